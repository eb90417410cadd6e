//! Placement at apply: only the tenant's home under the current epoch acts on its queue, and a
//! planned move stops the home claiming while what it runs completes.

use super::*;

#[test]
fn a_claim_by_a_stale_epoch_is_refused() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 0);
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    assert!(matches!(
        h.claim(&id, 1, 1, "c1"),
        Err(ApplyError::StaleEpoch { .. })
    ));
    h.claim(&id, 2, 2, "c1").unwrap();
}

#[test]
fn a_home_moving_away_claims_nothing_but_its_claims_complete() {
    let mut h = Harness::new();
    let running = h.propose(None, "{}", 0);
    let waiting = h.propose(None, r#"{"n":2}"#, 0);
    h.claim(&running, 1, 1, "c1").unwrap();
    h.ok(Command::StartMove {
        tenant: "acme".into(),
        epoch: 1,
        to: 2,
    });
    assert!(matches!(
        h.claim(&waiting, 1, 1, "c2"),
        Err(ApplyError::Refused { .. })
    ));
    h.ok(Command::Complete {
        call_id: running.clone(),
        claim_id: "c1".into(),
        outcome: Outcome::Failed {
            error: "boom".into(),
        },
    });
    assert_eq!(h.state_of(&running), CallState::Failed);
    assert!(matches!(
        h.run(Command::StartMove {
            tenant: "acme".into(),
            epoch: 7,
            to: 2,
        }),
        Err(ApplyError::StaleEpoch { .. })
    ));
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    h.claim(&waiting, 2, 2, "c3").unwrap();
}

#[test]
fn a_placement_needs_a_tenant_and_a_higher_epoch() {
    let mut h = Harness::new();
    let place = |tenant: &str, home, epoch| Command::Place {
        tenant: tenant.into(),
        home,
        epoch,
    };
    assert!(matches!(
        h.refused(place("nobody", 1, 1)),
        ApplyError::NotFound { .. }
    ));
    assert!(matches!(
        h.refused(place("acme", 2, 1)),
        ApplyError::Refused { .. }
    ));
    h.ok(place("acme", 2, 2));
    assert_eq!(
        h.registry.placement("acme"),
        Some(Placement {
            home: 2,
            epoch: 2,
            moving_to: None
        })
    );
}

#[test]
fn a_started_move_is_written_as_a_handover_in_the_log() {
    let command = Command::StartMove {
        tenant: "acme".into(),
        epoch: 1,
        to: 2,
    };
    let written = r#"{"type":"handover","tenant":"acme","epoch":1,"to":2}"#;
    assert_eq!(serde_json::to_string(&command).unwrap(), written);
    assert_eq!(serde_json::from_str::<Command>(written).unwrap(), command);
}

#[test]
fn the_unsettled_tenants_are_those_without_a_home_or_moving() {
    let mut h = Harness::new();
    let unsettled = |h: &Harness| -> Vec<String> {
        h.registry.unsettled_tenants().map(str::to_owned).collect()
    };
    let place = |home, epoch| Command::Place {
        tenant: "beta".into(),
        home,
        epoch,
    };
    h.ok(Command::Put {
        resources: vec![tenant("beta", "Beta")],
    });
    let homeless: Vec<String> = h
        .registry
        .tenants()
        .filter(|t| h.registry.placement(t).is_none())
        .map(str::to_owned)
        .collect();
    assert!(homeless.contains(&"beta".to_owned()));
    assert_eq!(unsettled(&h), homeless);

    h.ok(place(1, 1));
    assert!(!unsettled(&h).contains(&"beta".to_owned()));
    h.ok(Command::StartMove {
        tenant: "beta".into(),
        epoch: 1,
        to: 2,
    });
    assert!(unsettled(&h).contains(&"beta".to_owned()));
    h.ok(place(2, 2));
    assert!(!unsettled(&h).contains(&"beta".to_owned()));

    // A deleted tenant is nobody's business, whatever its placement was.
    h.ok(Command::Put {
        resources: vec![tenant("gamma", "Gamma")],
    });
    assert!(unsettled(&h).contains(&"gamma".to_owned()));
    h.ok(Command::Delete {
        keys: vec![tenant("gamma", "").key()],
    });
    assert!(!unsettled(&h).contains(&"gamma".to_owned()));
    let reloaded = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
    assert_eq!(
        unsettled(&h),
        reloaded.unsettled_tenants().collect::<Vec<_>>()
    );
}
