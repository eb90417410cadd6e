//! Removing a voter that is a tenant's home while one of its calls executes. The voter is first
//! kept as a learner: the leader moves its tenants away by a planned move, which waits for the
//! running execution, and the old home reports the call's outcome before it leaves. Removed at
//! once, it would take the outcome with it and the new home would have to call the call unknown.

use gatehouse_registry::CallState;
use gatehouse_tests::flow::{self, ACME, Approvals, CAROL, DROP_TABLE, table};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(30);

#[test]
fn a_home_removed_mid_execution_reports_the_outcome_before_it_leaves() -> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let roles = flow::roles(&cluster)?;
    flow.upstream.hold("drop_table");
    let call_id = flow::propose(&cluster, roles.leader, DROP_TABLE, &table("leaving"))?;
    flow::approve(&cluster, roles.leader, CAROL, &call_id)?;
    flow::wait_invoked(&flow, &call_id, 1, SETTLE)?;

    std::thread::scope(|scope| -> anyhow::Result<()> {
        let removing = scope.spawn(|| cluster.remove(roles.home));
        // The removal waits for the tenant to move, the move for the execution: the voter is a
        // learner meanwhile and its tenant moving away.
        cluster.wait_until("the home is demoted and its tenant moving", SETTLE, |c| {
            let (voters, learners) = c.membership(roles.leader);
            let moving =
                flow::placement_on(c, roles.leader, ACME).is_some_and(|p| p.moving_to.is_some());
            !voters.contains(&roles.home) && learners.contains(&roles.home) && moving
        })?;
        flow.upstream.release("drop_table");
        removing.join().expect("the removal thread")?;
        Ok(())
    })?;

    let done = flow::wait_state(&cluster, &call_id, CallState::Succeeded, SETTLE)?;
    assert_eq!(
        done.claim.map(|c| c.node),
        Some(roles.home),
        "the old home's own claim"
    );
    let (voters, learners) = cluster.membership(roles.leader);
    assert!(!voters.contains(&roles.home) && !learners.contains(&roles.home));
    let placement = flow::placement_on(&cluster, roles.leader, ACME).expect("placed");
    assert_ne!(placement.home, roles.home, "the tenant moved");
    flow::grace();
    assert_eq!(flow.upstream.count_for(&call_id), 1);
    Ok(())
}

#[test]
fn the_leader_removing_itself_leaves_the_cluster_entirely() -> anyhow::Result<()> {
    let (cluster, _flow) = flow::start(Approvals::default())?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    cluster.remove(leader)?;
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    cluster.wait_until("the old leader is no member at all", SETTLE, |c| {
        others.iter().all(|id| {
            let (voters, learners) = c.membership(*id);
            voters.len() == 2 && !voters.contains(&leader) && !learners.contains(&leader)
        })
    })?;
    Ok(())
}
