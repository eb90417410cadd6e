//! A tenant actor that panics on a real node is restarted by its supervisor with its state
//! rebuilt from the registry and the node's work: an execution it had started keeps running
//! (it lives in a tracked task, not in the actor) and is neither marked unknown nor run again,
//! and the next approved call runs once. Executions are counted at the `RecordingUpstream`.

use gatehouse_actors::Health;
use gatehouse_registry::CallState;
use gatehouse_tests::flow::{
    self, ACME, Approvals, CAROL, DROP_TABLE, Roles, approve, grace, propose, record, table,
    wait_invoked, wait_state,
};
use std::time::Duration;

const SHORT: Duration = Duration::from_secs(10);

#[test]
fn a_tenant_actor_restarted_after_a_panic_keeps_its_execution_and_runs_the_next_call_once()
-> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let Roles { home, follower, .. } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;
    let actors = cluster.node(home).actors.clone();

    // A call is running at the upstream when the home's tenant actor panics.
    upstream.hold("drop_table");
    let running = propose(&cluster, follower, DROP_TABLE, &table("sessions"))?;
    approve(&cluster, follower, CAROL, &running)?;
    wait_invoked(&flow, &running, 1, SHORT)?;
    let claim = wait_state(&cluster, &running, CallState::Executing, SHORT)?.claim;

    let before = actors.restarts();
    let handle = cluster.block_on(actors.tenant(ACME))?;
    handle.inject_panic();
    cluster.wait_until("the failure counted", SHORT, |_| actors.restarts() > before)?;
    // The supervisor restarts it after a backoff; until then readers are told it is restarting.
    cluster.wait_until("the tenant actor back", SHORT, |c| {
        c.block_on(actors.tenant(ACME)).is_ok()
    })?;

    // The restarted actor finds the claim live in this process: it leaves it alone.
    grace();
    let untouched = record(&cluster, &running).expect("the call");
    assert_eq!(
        (untouched.state, untouched.claim),
        (CallState::Executing, claim)
    );
    assert_eq!(upstream.count_for(&running), 1);
    upstream.release("drop_table");
    wait_state(&cluster, &running, CallState::Succeeded, SHORT)?;

    // The next destructive call, approved, runs once at the home.
    let next = propose(&cluster, follower, DROP_TABLE, &table("tokens"))?;
    approve(&cluster, follower, CAROL, &next)?;
    let done = wait_state(&cluster, &next, CallState::Succeeded, SHORT)?;
    assert_eq!(done.claim.expect("claimed").node, home);
    grace();
    assert_eq!(upstream.count_for(&running), 1);
    assert_eq!(upstream.count_for(&next), 1);
    assert_eq!(upstream.executions_for(&running), 1);
    assert_eq!(*actors.health().borrow(), Health::Ready);
    Ok(())
}
