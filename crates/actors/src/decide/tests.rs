use super::*;
use gatehouse_registry::call::{Claim, NewCall, PrincipalChain};
use gatehouse_registry::mode::ApprovalMode;

const ME: NodeId = 1;

fn call(id: &str, state: CallState) -> Call {
    let spec = NewCall {
        id: CallId(id.to_owned()),
        tenant: "t".into(),
        tool: "u.x".into(),
        arguments: "{}".into(),
        args_sha256: String::new(),
        chain: PrincipalChain {
            people: Vec::new(),
            end_user: None,
            agent: "a".into(),
            a2a_peer: None,
        },
        requested_mode: None,
        effective_mode: ApprovalMode::Destructive,
        highest_mode: ApprovalMode::Destructive,
        policy_decision_id: String::new(),
        tool_generation: 1,
        policy_generation: 0,
        idempotency_key: None,
        retry_safe: false,
        required_approvals: 1,
        expires_at: 1_000,
        approval_valid_ms: 500,
        context_id: None,
        trace_parent: None,
    };
    let mut call = Call::new(spec, 0);
    call.state = state;
    if state == CallState::Approved {
        call.approval_valid_until = Some(800);
    }
    call
}

fn claimed(mut c: Call, node: NodeId, epoch: u64, claim_id: &str) -> Call {
    c.state = CallState::Executing;
    c.claim = Some(Claim {
        claim_id: claim_id.into(),
        node,
        epoch,
        at: 0,
    });
    c
}

fn home(epoch: u64) -> Option<Placement> {
    Some(Placement {
        home: ME,
        epoch,
        moving_to: None,
    })
}

fn duties(placement: Option<Placement>, calls: &[Call], live: &[&str], now: u64) -> HomeDuties {
    let live: HashMap<String, String> = live.iter().map(|s| (s.to_string(), "t".into())).collect();
    let in_flight = HashSet::new();
    let activity = NodeActivity {
        node: ME,
        live_claims: &live,
        in_flight: &in_flight,
        never_sent: &|_: &Claim| false,
    };
    home_duties(placement, calls, activity, now)
}

fn id(s: &str) -> CallId {
    CallId(s.into())
}

#[test]
fn a_node_that_is_not_home_has_no_duties() {
    let other = Some(Placement {
        home: 2,
        epoch: 3,
        moving_to: None,
    });
    let calls = [
        call("a", CallState::Approved),
        call("b", CallState::Pending),
    ];
    assert_eq!(duties(other, &calls, &[], 5_000), HomeDuties::default());
    assert_eq!(duties(None, &calls, &[], 5_000), HomeDuties::default());
}

#[test]
fn approved_calls_are_claimed_and_the_next_deadline_is_woken_for() {
    let calls = [
        call("a", CallState::Approved),
        call("b", CallState::Pending),
    ];
    let due = duties(home(2), &calls, &[], 100);
    assert_eq!(
        due.duties,
        [Duty::ClaimAndRun {
            call: id("a"),
            epoch: 2,
            replaces_unsent: None
        }]
    );
    assert_eq!(due.wake_at, Some(800));
}

#[test]
fn pending_and_approved_calls_expire_at_their_own_deadlines() {
    let calls = [
        call("a", CallState::Approved),
        call("b", CallState::Pending),
    ];
    let due = duties(home(1), &calls, &[], 900);
    assert_eq!(
        due.duties,
        [Duty::Expire {
            call: id("a"),
            epoch: 1
        }]
    );
    assert_eq!(due.wake_at, Some(1_000));
    let due = duties(home(1), &calls, &[], 1_000);
    assert_eq!(due.duties.len(), 2, "both deadlines passed: {due:?}");
}

#[test]
fn a_moving_home_claims_nothing_but_still_expires() {
    let moving = Some(Placement {
        home: ME,
        epoch: 4,
        moving_to: Some(2),
    });
    let calls = [call("a", CallState::Approved)];
    assert!(duties(moving, &calls, &[], 100).duties.is_empty());
    assert_eq!(
        duties(moving, &calls, &[], 800).duties,
        [Duty::Expire {
            call: id("a"),
            epoch: 4
        }]
    );
}

#[test]
fn a_live_claim_is_left_alone() {
    let calls = [claimed(call("a", CallState::Approved), ME, 2, "c1")];
    assert!(duties(home(2), &calls, &["c1"], 100).duties.is_empty());
}

#[test]
fn a_claim_lost_by_an_old_home_is_marked_unknown_unless_retry_safe() {
    let old = claimed(call("a", CallState::Approved), 2, 1, "c1");
    assert_eq!(
        duties(home(2), std::slice::from_ref(&old), &[], 100).duties,
        [Duty::MarkUnknown {
            call: id("a"),
            epoch: 2
        }]
    );
    let mut safe = old;
    safe.spec.retry_safe = true;
    assert_eq!(
        duties(home(2), &[safe], &[], 100).duties,
        [Duty::ClaimAndRun {
            call: id("a"),
            epoch: 2,
            replaces_unsent: None
        }]
    );
}

#[test]
fn this_nodes_own_claim_not_running_here_is_lost() {
    // The node restarted after claiming: nothing of that claim runs in this process.
    let mine = claimed(call("a", CallState::Approved), ME, 2, "c1");
    assert_eq!(
        duties(home(2), &[mine], &["other"], 100).duties,
        [Duty::MarkUnknown {
            call: id("a"),
            epoch: 2
        }]
    );
}

#[test]
fn a_call_with_a_proposal_in_flight_is_skipped() {
    let calls = [call("a", CallState::Approved)];
    let live = HashMap::new();
    let in_flight = HashSet::from([id("a")]);
    let activity = NodeActivity {
        node: ME,
        live_claims: &live,
        in_flight: &in_flight,
        never_sent: &|_: &Claim| false,
    };
    assert!(
        home_duties(home(1), &calls, activity, 900)
            .duties
            .is_empty()
    );
}

#[test]
fn a_moving_home_takes_back_its_own_lost_retry_safe_claim() {
    let moving = Some(Placement {
        home: ME,
        epoch: 2,
        moving_to: Some(2),
    });
    let mut mine = claimed(call("a", CallState::Approved), ME, 2, "before-restart");
    mine.spec.retry_safe = true;
    assert_eq!(
        duties(moving, &[mine], &[], 100).duties,
        [Duty::ClaimAndRun {
            call: id("a"),
            epoch: 2,
            replaces_unsent: None
        }]
    );
}

#[test]
fn this_nodes_own_lost_claim_that_never_sent_is_claimed_again_not_marked_unknown() {
    let mine = claimed(call("a", CallState::Approved), ME, 2, "c1");
    let theirs = claimed(call("b", CallState::Approved), 2, 1, "c9");
    let live = HashMap::new();
    let in_flight = HashSet::new();
    // The executor vouches for c1 and, wrongly, for c9: only the node's own claim counts.
    let never_sent = |claim: &Claim| claim.claim_id == "c1" || claim.claim_id == "c9";
    let activity = NodeActivity {
        node: ME,
        live_claims: &live,
        in_flight: &in_flight,
        never_sent: &never_sent,
    };
    assert_eq!(
        home_duties(home(2), &[mine.clone(), theirs], activity, 100).duties,
        [
            Duty::ClaimAndRun {
                call: id("a"),
                epoch: 2,
                replaces_unsent: Some("c1".into())
            },
            Duty::MarkUnknown {
                call: id("b"),
                epoch: 2
            }
        ]
    );
    // One that may have been sent stays a question for a person.
    let maybe = |_: &Claim| false;
    let activity = NodeActivity {
        never_sent: &maybe,
        ..activity
    };
    assert_eq!(
        home_duties(home(2), &[mine], activity, 100).duties,
        [Duty::MarkUnknown {
            call: id("a"),
            epoch: 2
        }]
    );
}
