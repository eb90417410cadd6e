//! Placement epochs on real nodes. A home cut off from the cluster is replaced under a new
//! epoch: from then on it can neither claim nor expire (the state machine refuses its commands
//! as stale, and while it is cut off nothing it proposes commits), but the completion it reports
//! for a claim it already held is still recorded. A planned move (a new voter that rendezvous
//! hashing prefers) hands the queue over only once the old home's running execution is done.
//!
//! Executions are counted at the `RecordingUpstream`. Node 2 leads, node 1 is acme's first home
//! (`flow::NODES`).

use gatehouse_actors::placement::rendezvous;
use gatehouse_cluster::cluster::WriteError;
use gatehouse_registry::registry::Placement;
use gatehouse_registry::{ApplyError, CallId, CallState, Command, Response};
use gatehouse_tests::TestCluster;
use gatehouse_tests::flow::{
    self, ACME, Approvals, CAROL, DROP_TABLE, Flow, NODES, Roles, SET_FLAG, approve, grace,
    home_of, placement_on, propose, record, record_on, table, wait_invoked, wait_placement,
    wait_state,
};
use std::time::Duration;

const SHORT: Duration = Duration::from_secs(10);
const FAILOVER: Duration = Duration::from_secs(20);

/// Proposes through node `node`'s own cluster handle, as its actors would.
fn propose_on(cluster: &TestCluster, node: u64, command: Command) -> Result<Response, WriteError> {
    let handle = cluster.node(node).cluster.clone();
    cluster.block_on(async move { handle.propose(command).await.map(|(r, _)| r) })
}

/// `propose_on`, given up on after `within`: `None` if it had not committed by then.
fn propose_within(
    cluster: &TestCluster,
    node: u64,
    command: Command,
    within: Duration,
) -> Option<Result<Response, WriteError>> {
    let handle = cluster.node(node).cluster.clone();
    cluster.block_on(async move {
        tokio::time::timeout(within, handle.propose(command))
            .await
            .ok()
            .map(|r| r.map(|(r, _)| r))
    })
}

fn claim(call: &str, node: u64, epoch: u64) -> Command {
    Command::Claim {
        call_id: CallId(call.to_owned()),
        node,
        epoch,
        claim_id: format!("claim_stale_{node}_{epoch}"),
        replaces_unsent: None,
    }
}

fn expire(call: &str, node: u64, epoch: u64) -> Command {
    Command::Expire {
        call_id: CallId(call.to_owned()),
        node,
        epoch,
    }
}

fn assert_stale(result: Result<Response, WriteError>, what: &str) {
    assert!(
        matches!(
            result,
            Err(WriteError::Rejected(ApplyError::StaleEpoch { .. }))
        ),
        "{what}: {result:?}"
    );
}

/// A node id that rendezvous hashing prefers for acme over the three of `NODES`.
fn newcomer() -> u64 {
    (4..1_000)
        .find(|n| {
            let mut voters = NODES.to_vec();
            voters.push(*n);
            rendezvous(ACME, &voters) == Some(*n)
        })
        .expect("some id wins acme")
}

/// Calls wait this long for approval, at first: short enough that one passes its deadline while
/// the home is cut off.
const TTL_SECONDS: u64 = 2;

#[test]
fn a_home_cut_off_mid_execution_can_neither_claim_nor_expire_but_its_completion_is_recorded()
-> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals {
        required: 1,
        ttl_seconds: Some(TTL_SECONDS),
    })?;
    let Roles {
        home: old,
        leader,
        follower,
    } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;
    let first = home_of(&cluster, ACME).expect("placed");

    // The home claims a call that is not safe to repeat and is in the middle of running it.
    upstream.hold("drop_table");
    let held = propose(&cluster, follower, DROP_TABLE, &table("orders"))?;
    approve(&cluster, follower, CAROL, &held)?;
    wait_invoked(&flow, &held, 1, SHORT)?;
    let old_claim = wait_state(&cluster, &held, CallState::Executing, SHORT)?
        .claim
        .expect("claimed");
    assert_eq!((old_claim.node, old_claim.epoch), (old, first.epoch));

    // A call waits for approval, and the home knows it.
    let overdue = propose(&cluster, follower, DROP_TABLE, &table("ledger"))?;
    let deadline = record(&cluster, &overdue)
        .expect("the call")
        .spec
        .expires_at;
    cluster.wait_until("the home has the pending call", SHORT, |c| {
        record_on(c, old, &overdue).is_some()
    })?;

    // The home is cut off. Another call is approved on the majority's side, and waits: nobody
    // can claim it until the leader places acme elsewhere. The pending call passes its
    // deadline. Whatever the old home proposes meanwhile commits nothing: its actor's expiry
    // of the overdue call, a claim and an expiry proposed by hand.
    cluster.router().partition(&[old], &[leader, follower]);
    let waiting = propose(&cluster, follower, DROP_TABLE, &table("invoices"))?;
    approve(&cluster, follower, CAROL, &waiting)?;
    let attempt = propose_within(
        &cluster,
        old,
        claim(&waiting, old, first.epoch),
        Duration::from_millis(500),
    );
    assert!(
        attempt.is_none(),
        "a claim from a cut-off node: {attempt:?}"
    );
    cluster.wait_until("the pending call overdue", SHORT, |_| {
        gatehouse_actors::now_ms() > deadline
    })?;
    let attempt = propose_within(
        &cluster,
        old,
        expire(&overdue, old, first.epoch),
        Duration::from_millis(500),
    );
    assert!(
        attempt.is_none(),
        "an expiry from a cut-off node: {attempt:?}"
    );

    // The home is replaced under the next epoch. The new home marks the held call unknown
    // (claimed under an older epoch, not safe to repeat), claims and runs the waiting call
    // (held at the upstream like the first), and expires the overdue one.
    let second = wait_placement(&cluster, ACME, "acme placed elsewhere", FAILOVER, |p| {
        p.home != old && p.epoch > first.epoch
    })?;
    let new = second.home;
    wait_state(&cluster, &held, CallState::OutcomeUnknown, SHORT)?;
    wait_state(&cluster, &overdue, CallState::Expired, SHORT)?;
    wait_invoked(&flow, &waiting, 1, SHORT)?;
    let new_claim = wait_state(&cluster, &waiting, CallState::Executing, SHORT)?
        .claim
        .expect("claimed");
    assert_eq!((new_claim.node, new_claim.epoch), (new, second.epoch));
    assert_eq!(
        placement_on(&cluster, old, ACME),
        Some(first),
        "the old home has heard nothing"
    );

    // Healed, the old home is rendezvous hashing's choice again: the leader starts a planned
    // move back, which waits for the new home's running execution. Meanwhile nobody claims:
    // an approved call and a pending one sit there, and the old home, under its old epoch or
    // the current one, can neither claim the one nor expire the other.
    cluster.router().heal();
    let moving = wait_placement(
        &cluster,
        ACME,
        "a move back to the old home",
        FAILOVER,
        |p| p.moving_to == Some(old),
    )?;
    assert_eq!((moving.home, moving.epoch), (new, second.epoch));
    // Calls from now on wait an hour for approval, so the pending one below stays pending.
    Flow::set_approvals(&cluster, Approvals::default())?;
    let unclaimed = propose(&cluster, follower, DROP_TABLE, &table("payroll"))?;
    approve(&cluster, follower, CAROL, &unclaimed)?;
    let pending = propose(&cluster, follower, DROP_TABLE, &table("archive"))?;
    assert_stale(
        propose_on(&cluster, old, claim(&unclaimed, old, first.epoch)),
        "a claim under the old epoch",
    );
    assert_stale(
        propose_on(&cluster, old, claim(&unclaimed, old, second.epoch)),
        "a claim by a node that is not the home",
    );
    assert_stale(
        propose_on(&cluster, old, expire(&pending, old, first.epoch)),
        "an expiry under the old epoch",
    );
    let still = record(&cluster, &unclaimed).expect("the call");
    assert_eq!((still.state, still.claim), (CallState::Approved, None));
    assert_eq!(
        record(&cluster, &pending).expect("the call").state,
        CallState::Pending
    );

    // Released, the old home's completion of the claim it held is recorded: the call goes
    // from outcome unknown to succeeded, under the old claim. The new home finishes its call,
    // the move completes, and the old home, home again, claims the waiting call.
    upstream.release("drop_table");
    let late = wait_state(&cluster, &held, CallState::Succeeded, SHORT)?;
    assert_eq!(
        late.claim,
        Some(old_claim),
        "completed under the claim it held"
    );
    assert!(late.outcome.is_some());
    wait_state(&cluster, &waiting, CallState::Succeeded, SHORT)?;
    let third = wait_placement(&cluster, ACME, "acme back at its old home", FAILOVER, |p| {
        p.home == old && p.moving_to.is_none()
    })?;
    assert_eq!(third.epoch, second.epoch + 1);
    let ran = wait_state(&cluster, &unclaimed, CallState::Succeeded, SHORT)?;
    let claim = ran.claim.expect("claimed");
    assert_eq!((claim.node, claim.epoch), (old, third.epoch));

    grace();
    for (call, times) in [
        (&held, 1),
        (&waiting, 1),
        (&unclaimed, 1),
        (&overdue, 0),
        (&pending, 0),
    ] {
        assert_eq!(upstream.count_for(call), times, "call {call}");
    }
    Ok(())
}

#[test]
fn a_planned_move_waits_for_the_old_homes_execution_then_moves_under_the_next_epoch()
-> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles {
        home: old,
        follower,
        ..
    } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;
    let first = home_of(&cluster, ACME).expect("placed");
    let newcomer = newcomer();

    upstream.hold("drop_table");
    let running = propose(&cluster, follower, DROP_TABLE, &table("events"))?;
    approve(&cluster, follower, CAROL, &running)?;
    wait_invoked(&flow, &running, 1, SHORT)?;
    wait_state(&cluster, &running, CallState::Executing, SHORT)?;

    // The new voter wins acme: a move to it starts, and the old home claims nothing more.
    cluster.add_voter(newcomer)?;
    let moving = wait_placement(&cluster, ACME, "a move to the newcomer", FAILOVER, |p| {
        p.moving_to == Some(newcomer)
    })?;
    assert_eq!(
        moving,
        Placement {
            home: old,
            epoch: first.epoch,
            moving_to: Some(newcomer)
        }
    );
    let next = propose(&cluster, follower, DROP_TABLE, &table("metrics"))?;
    approve(&cluster, follower, CAROL, &next)?;
    grace();
    assert_eq!(
        home_of(&cluster, ACME),
        Some(moving),
        "moved while executing"
    );
    let waiting = record(&cluster, &next).expect("the call");
    assert_eq!((waiting.state, waiting.claim), (CallState::Approved, None));
    assert_eq!(upstream.count_for(&next), 0);

    // Once its execution is done, the tenant moves, under the next epoch, and only then.
    upstream.release("drop_table");
    let mut early = None;
    cluster.wait_until("acme on the newcomer", FAILOVER, |c| {
        let Some(id) = c.running().into_iter().max_by_key(|id| c.applied(*id)) else {
            return false;
        };
        // Placement and call read together, from one applied state.
        let registry = c.node(id).cluster.registry.read();
        let placement = registry.placement(ACME);
        let state = registry.call(&CallId(running.clone())).map(|r| r.state);
        let moved = placement.is_some_and(|p| p.home == newcomer);
        if moved && state != Some(CallState::Succeeded) {
            early = Some((placement, state));
        }
        moved
    })?;
    assert_eq!(
        early, None,
        "the tenant moved before its execution finished"
    );
    let moved = home_of(&cluster, ACME).expect("placed");
    assert_eq!(
        moved,
        Placement {
            home: newcomer,
            epoch: first.epoch + 1,
            moving_to: None
        }
    );
    let done = wait_state(&cluster, &running, CallState::Succeeded, SHORT)?;
    let claim = done.claim.expect("claimed");
    assert_eq!((claim.node, claim.epoch), (old, first.epoch));
    let ran = wait_state(&cluster, &next, CallState::Succeeded, SHORT)?;
    let claim = ran.claim.expect("claimed");
    assert_eq!((claim.node, claim.epoch), (newcomer, moved.epoch));
    grace();
    assert_eq!(upstream.count_for(&running), 1);
    assert_eq!(upstream.count_for(&next), 1);
    Ok(())
}

/// The old home restarts during a planned move while it runs a retry-safe call. Back within
/// `home_unreachable_after`, it finds its own claim lost; a moving home starts nothing new, but it
/// takes that claim back and finishes the call (the upstream dedupes by the call id), because the
/// leader waits for that execution before it places the tenant. Without this, the move stalls.
#[test]
fn a_home_restarted_during_a_planned_move_does_not_stall_it() -> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles {
        home: old,
        follower,
        ..
    } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;
    upstream.dedupe_by_key(true);
    let first = home_of(&cluster, ACME).expect("placed");
    let newcomer = newcomer();

    upstream.hold("set_flag");
    let running = propose(&cluster, follower, SET_FLAG, &flow::flag("dark-mode"))?;
    approve(&cluster, follower, CAROL, &running)?;
    wait_invoked(&flow, &running, 1, SHORT)?;
    wait_state(&cluster, &running, CallState::Executing, SHORT)?;
    cluster.add_voter(newcomer)?;
    wait_placement(&cluster, ACME, "a move to the newcomer", FAILOVER, |p| {
        p.moving_to == Some(newcomer)
    })?;

    // The old home crashes and is back at once: its execution is gone with the process.
    cluster.kill(old);
    cluster.restart(old)?;
    upstream.release("set_flag");

    let done = wait_state(&cluster, &running, CallState::Succeeded, FAILOVER)?;
    let moved = wait_placement(&cluster, ACME, "acme on the newcomer", FAILOVER, |p| {
        p.home == newcomer && p.moving_to.is_none()
    })?;
    assert!(moved.epoch > first.epoch);
    assert!(done.claim.is_some());
    grace();
    assert_eq!(
        upstream.executions_for(&running),
        1,
        "the side effect ran once"
    );
    Ok(())
}
