//! The identity model at apply: people, not keys, approve; a call, its cancellation and its
//! idempotency key belong to one principal and one end user.

use super::*;
use crate::call::Verdict;
use crate::resource::JwtSubject;

fn approver(name: &str, user: Option<&str>, jwt_subject: Option<&str>) -> Resource {
    let mut resource = principal(name, Role::Approver);
    if let Resource::Principal(p) = &mut resource {
        p.spec.user = user.map(str::to_owned);
        if let Some(subject) = jwt_subject {
            p.spec.api_key_sha256 = None;
            p.spec.jwt = Some(JwtSubject {
                issuer: "https://idp.example".into(),
                subject: subject.into(),
            });
        }
    }
    resource
}

fn with_approvers(resources: Vec<Resource>) -> Harness {
    let mut h = Harness::new();
    h.ok(Command::Put { resources });
    h
}

#[test]
fn an_approver_named_like_the_end_user_is_that_user() {
    let mut h = with_approvers(vec![approver("john", None, None)]);
    let id = h.propose(None, "{}", 1);
    assert!(matches!(
        h.approve(&id, "john"),
        Err(ApplyError::InChain { .. })
    ));
    assert_eq!(h.state_of(&id), CallState::Pending);
}

#[test]
fn an_approver_whose_jwt_subject_is_the_end_user_is_that_user() {
    let mut h = with_approvers(vec![approver("john-sso", None, Some("john"))]);
    let id = h.propose(None, "{}", 1);
    assert!(matches!(
        h.approve_as(&id, "john-sso", Some("someone-else")),
        Err(ApplyError::InChain { .. })
    ));
}

#[test]
fn two_keys_of_one_person_count_as_one_approval() {
    let mut h = with_approvers(vec![
        approver("alice-laptop", Some("alice"), None),
        approver("alice-ci", Some("alice"), None),
    ]);
    let id = h.propose(None, "{}", 2);
    h.approve(&id, "alice-laptop").unwrap();
    let err = h.approve(&id, "alice-ci").unwrap_err();
    assert!(
        matches!(&err, ApplyError::AlreadyDecided { principal, .. } if principal == "alice"),
        "{err:?}"
    );
    assert_eq!(h.state_of(&id), CallState::Pending);
    h.approve(&id, "bob").unwrap();
    assert_eq!(h.state_of(&id), CallState::Approved);
    let people: Vec<&str> = h
        .registry
        .call(&id)
        .unwrap()
        .approvals
        .iter()
        .map(Verdict::person)
        .collect();
    assert_eq!(people, ["alice", "bob"]);
}

#[test]
fn subjects_of_one_issuer_wide_approver_are_distinct_people() {
    let mut h = with_approvers(vec![approver("staff", None, Some("*"))]);
    let id = h.propose(None, "{}", 2);
    assert!(matches!(
        h.approve_as(&id, "staff", Some("john")),
        Err(ApplyError::InChain { .. })
    ));
    h.approve_as(&id, "staff", Some("carol")).unwrap();
    assert!(matches!(
        h.approve_as(&id, "staff", Some("carol")),
        Err(ApplyError::AlreadyDecided { .. })
    ));
    assert_eq!(h.state_of(&id), CallState::Pending);
    h.approve_as(&id, "staff", Some("dave")).unwrap();
    assert_eq!(h.state_of(&id), CallState::Approved);
}

#[test]
fn the_people_recorded_at_proposal_are_in_the_chain() {
    let mut h = with_approvers(vec![approver("erin-approver", Some("erin"), None)]);
    let id = h.propose_with(None, "{}", 1, |call| {
        call.chain.people = vec!["erin".into()]
    });
    assert!(matches!(
        h.approve(&id, "erin-approver"),
        Err(ApplyError::InChain { .. })
    ));
}

#[test]
fn an_idempotency_key_binds_the_tool_as_well_as_the_arguments() {
    let mut h = Harness::new();
    h.propose(Some("k"), r#"{"a":1}"#, 1);
    let before = h.registry.state.clone();
    let mut other = h.registry.calls_of("acme").next().unwrap().spec.clone();
    other.id = CallId::from_random(7);
    other.tool = "billing.transfer".into();
    let err = h.refused(Command::Propose {
        call: Box::new(other),
    });
    assert!(matches!(err, ApplyError::IdempotencyConflict { .. }));
    assert_eq!(h.registry.state, before);
}

#[test]
fn idempotency_keys_are_per_end_user_under_one_principal() {
    let mut h = Harness::new();
    let johns = h.propose(Some("k"), "{}", 1);
    let marys = h.propose_with(Some("k"), "{}", 1, |call| {
        call.chain.end_user = Some("mary".into());
    });
    assert_ne!(johns, marys, "mary got john's call back");
    let again = h.propose_with(Some("k"), "{}", 1, |call| {
        call.chain.end_user = Some("mary".into());
    });
    assert_eq!(again, marys);
}

#[test]
fn only_the_calls_own_end_user_may_cancel_it() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    let cancel = |user: &str| Command::Cancel {
        call_id: id.clone(),
        principal: "bot".into(),
        user: Some(user.into()),
        reason: "r".into(),
    };
    assert!(matches!(
        h.refused(cancel("mary")),
        ApplyError::NotInChain { .. }
    ));
    h.ok(cancel("john"));
    assert_eq!(h.state_of(&id), CallState::Cancelled);
}

#[test]
fn nobody_of_the_chain_may_resolve_what_the_call_did() {
    let mut h = with_approvers(vec![approver("john-oncall", Some("john"), None)]);
    let id = h.propose(None, "{}", 1);
    h.approve(&id, "alice").unwrap();
    h.claim(&id, 1, 1, "c1").unwrap();
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    h.ok(Command::MarkUnknown {
        call_id: id.clone(),
        node: 2,
        epoch: 2,
    });
    let resolve = |who: &str| Command::Resolve {
        call_id: id.clone(),
        approver: who.into(),
        user: None,
        outcome: Outcome::Failed {
            error: "never charged".into(),
        },
        note: "checked the processor".into(),
    };
    assert!(matches!(
        h.refused(resolve("john-oncall")),
        ApplyError::InChain { .. }
    ));
    h.ok(resolve("bob"));
    assert_eq!(h.state_of(&id), CallState::Failed);
}
