use super::*;

fn view(placement: Option<Placement>, busy: bool) -> TenantView<'static> {
    TenantView {
        tenant: "globex",
        placement,
        busy,
    }
}

fn at(home: NodeId, epoch: u64, moving_to: Option<NodeId>) -> Option<Placement> {
    Some(Placement {
        home,
        epoch,
        moving_to,
    })
}

const VOTERS: [NodeId; 3] = [1, 2, 3];

#[test]
fn rendezvous_moves_only_the_tenants_of_a_removed_node() {
    let tenants: Vec<String> = (0..300).map(|i| format!("tenant-{i}")).collect();
    let before: Vec<NodeId> = tenants
        .iter()
        .map(|t| rendezvous(t, &VOTERS).unwrap())
        .collect();
    for n in VOTERS {
        assert!(before.contains(&n), "node {n} is home to some tenant");
    }
    let after: Vec<NodeId> = tenants
        .iter()
        .map(|t| rendezvous(t, &[1, 3]).unwrap())
        .collect();
    for (b, a) in before.iter().zip(&after) {
        if *b != 2 {
            assert_eq!(b, a, "a tenant not homed on the removed node stays");
        }
    }
    assert_eq!(rendezvous("x", &[]), None);
}

#[test]
fn an_unplaced_tenant_is_placed_at_epoch_one() {
    let desired = rendezvous("globex", &VOTERS).unwrap();
    assert_eq!(
        next_step(view(None, false), &VOTERS, &[], |_| true),
        Some(Command::Place {
            tenant: "globex".into(),
            home: desired,
            epoch: 1
        })
    );
}

#[test]
fn a_tenant_at_its_rightful_home_stays() {
    let desired = rendezvous("globex", &VOTERS).unwrap();
    assert_eq!(
        next_step(view(at(desired, 3, None), true), &VOTERS, &[], |_| true),
        None
    );
}

#[test]
fn a_planned_move_hands_over_then_waits_for_executions_then_places() {
    let desired = rendezvous("globex", &VOTERS).unwrap();
    let old = *VOTERS.iter().find(|n| **n != desired).unwrap();
    assert_eq!(
        next_step(view(at(old, 3, None), true), &VOTERS, &[], |_| true),
        Some(Command::StartMove {
            tenant: "globex".into(),
            epoch: 3,
            to: desired
        })
    );
    assert_eq!(
        next_step(view(at(old, 3, Some(desired)), true), &VOTERS, &[], |_| {
            true
        }),
        None,
        "the old home still runs an execution"
    );
    assert_eq!(
        next_step(view(at(old, 3, Some(desired)), false), &VOTERS, &[], |_| {
            true
        }),
        Some(Command::Place {
            tenant: "globex".into(),
            home: desired,
            epoch: 4
        })
    );
}

#[test]
fn an_unreachable_home_is_replaced_at_once_even_while_busy() {
    let first = rendezvous("globex", &VOTERS).unwrap();
    let rest: Vec<NodeId> = VOTERS.iter().copied().filter(|n| *n != first).collect();
    let next = rendezvous("globex", &rest).unwrap();
    assert_eq!(
        next_step(view(at(first, 5, None), true), &VOTERS, &[], |n| n != first),
        Some(Command::Place {
            tenant: "globex".into(),
            home: next,
            epoch: 6
        })
    );
}

#[test]
fn a_removed_home_is_replaced_at_once() {
    assert!(matches!(
        next_step(view(at(9, 2, None), true), &VOTERS, &[], |_| true),
        Some(Command::Place { epoch: 3, .. })
    ));
}

#[test]
fn a_move_no_longer_wanted_ends_with_a_new_epoch_at_the_same_home() {
    let desired = rendezvous("globex", &VOTERS).unwrap();
    let other = *VOTERS.iter().find(|n| **n != desired).unwrap();
    assert_eq!(
        next_step(
            view(at(desired, 2, Some(other)), true),
            &VOTERS,
            &[],
            |_| true
        ),
        Some(Command::Place {
            tenant: "globex".into(),
            home: desired,
            epoch: 3
        })
    );
}

#[test]
fn a_home_demoted_to_learner_is_drained_by_a_planned_move() {
    let home = 9;
    let desired = rendezvous("globex", &VOTERS).unwrap();
    // Still a member, as a learner: the move waits for its executions...
    assert_eq!(
        next_step(view(at(home, 2, None), true), &VOTERS, &[home], |_| true),
        Some(Command::StartMove {
            tenant: "globex".into(),
            epoch: 2,
            to: desired,
        })
    );
    assert_eq!(
        next_step(
            view(at(home, 2, Some(desired)), true),
            &VOTERS,
            &[home],
            |_| true
        ),
        None
    );
    assert_eq!(
        next_step(
            view(at(home, 2, Some(desired)), false),
            &VOTERS,
            &[home],
            |_| true
        ),
        Some(Command::Place {
            tenant: "globex".into(),
            home: desired,
            epoch: 3,
        })
    );
    // ...unless it stopped answering.
    assert_eq!(
        next_step(view(at(home, 2, None), true), &VOTERS, &[home], |n| n
            != home),
        Some(Command::Place {
            tenant: "globex".into(),
            home: desired,
            epoch: 3,
        })
    );
}
