//! A claim whose request was never sent is not an unknown outcome. The home records, durably and
//! before the request goes out, that it is about to send it (the execution-start audit record);
//! a claim of its own that nothing runs under and that no such record names is known unsent,
//! and the home claims the call again instead of leaving it `outcome_unknown` for a person. A
//! claim whose request may have gone out still ends unknown.
//!
//! The unsent claim is made the way a crash between a claim's commit and its start record
//! leaves one: the home's own claim, committed in the same log entry as the approval that makes
//! the call claimable, so that the home's actor never runs it.

use anyhow::Context;
use gatehouse_registry::{CallId, CallState, Command, Proposal};
use gatehouse_tests::flow::{self, ACME, Approvals, DROP_TABLE, table};
use std::time::Duration;

const SETTLE: Duration = Duration::from_secs(20);

#[test]
fn the_homes_own_claim_that_never_sent_its_request_is_claimed_again_and_runs_once()
-> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let home = flow::wait_settled(&cluster, ACME, SETTLE)?;
    let call_id = flow::propose(&cluster, home.home, DROP_TABLE, &table("ghost"))?;
    let record = flow::record(&cluster, &call_id).context("the proposed call")?;

    let handle = &cluster.node(home.home).cluster;
    let step = |command| Proposal {
        request_id: uuid::Uuid::new_v4(),
        at: gatehouse_cluster::cluster::now_ms(),
        command,
    };
    let approve_and_claim = Command::Batch {
        proposals: vec![
            step(Command::Approve {
                call_id: CallId(call_id.clone()),
                approver: "carol".into(),
                user: None,
                args_sha256: record.spec.args_sha256.clone(),
                note: "approved with a ghost claim".into(),
            }),
            step(Command::Claim {
                call_id: CallId(call_id.clone()),
                node: home.home,
                epoch: home.epoch,
                claim_id: "claim_ghost".into(),
                replaces_unsent: None,
            }),
        ],
    };
    cluster.block_on(handle.propose(approve_and_claim))?;

    let done = flow::wait_state(&cluster, &call_id, CallState::Succeeded, SETTLE)?;
    let claim = done.claim.context("a succeeded call names its claim")?;
    assert_ne!(
        claim.claim_id, "claim_ghost",
        "claimed again under a new claim"
    );
    assert_eq!(claim.node, home.home);
    flow::grace();
    assert_eq!(
        flow.upstream.count_for(&call_id),
        1,
        "the upstream ran it exactly once"
    );
    Ok(())
}

#[test]
fn a_claim_whose_request_may_have_gone_out_still_ends_unknown() -> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let roles = flow::roles(&cluster)?;
    // The request reaches the upstream, which holds its answer: the home has sent it.
    flow.upstream.hold("drop_table");
    let call_id = flow::propose(&cluster, roles.leader, DROP_TABLE, &table("sent"))?;
    flow::approve(&cluster, roles.leader, flow::CAROL, &call_id)?;
    flow::wait_invoked(&flow, &call_id, 1, SETTLE)?;
    cluster.kill(roles.home);
    let unknown = flow::wait_state(
        &cluster,
        &call_id,
        CallState::OutcomeUnknown,
        Duration::from_secs(60),
    )?;
    assert_eq!(unknown.state, CallState::OutcomeUnknown);
    flow.upstream.release("drop_table");
    flow::grace();
    assert_eq!(flow.upstream.count_for(&call_id), 1, "never run again");
    Ok(())
}
