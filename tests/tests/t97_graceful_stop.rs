//! A home that is stopped the way SIGTERM stops it lets a running execution finish and records
//! its outcome before it leaves: the call ends succeeded, not unknown, and ran once. The
//! tenant's queue then moves to another home, which runs the next call.

use gatehouse_registry::CallState;
use gatehouse_tests::flow::{
    self, Approvals, CAROL, DROP_TABLE, Roles, approve, grace, propose, table, wait_invoked,
    wait_state,
};
use std::time::Duration;

const SHORT: Duration = Duration::from_secs(15);

#[test]
fn a_stopping_home_finishes_its_execution_and_records_the_outcome() -> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles { home, follower, .. } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;

    // Slow enough that the stop begins while the request is at the upstream.
    upstream.set_delay(Duration::from_millis(800));
    let running = propose(&cluster, follower, DROP_TABLE, &table("audit"))?;
    approve(&cluster, follower, CAROL, &running)?;
    wait_invoked(&flow, &running, 1, SHORT)?;
    cluster.stop(home);

    let done = wait_state(&cluster, &running, CallState::Succeeded, SHORT)?;
    assert_eq!(done.claim.expect("claimed").node, home);
    upstream.set_delay(Duration::ZERO);

    // The next call is claimed by the home that replaced the stopped one.
    let next = propose(&cluster, follower, DROP_TABLE, &table("tmp"))?;
    approve(&cluster, follower, CAROL, &next)?;
    let after = wait_state(
        &cluster,
        &next,
        CallState::Succeeded,
        Duration::from_secs(30),
    )?;
    assert_ne!(after.claim.expect("claimed").node, home);
    grace();
    assert_eq!(upstream.count_for(&running), 1);
    assert_eq!(upstream.count_for(&next), 1);
    Ok(())
}
