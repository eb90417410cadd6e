//! DESIGN's seven invariants of the propose, approve, execute flow, one test each, on real nodes
//! calling a real HTTP upstream. Executions are counted where they happen, at the
//! `RecordingUpstream`, never from the registry's own record of a call.
//!
//! The three nodes are laid out by `flow::NODES`: node 2 leads, node 1 is acme's home, node 3 is
//! neither. Losing the home therefore never costs the cluster its leader, and the leader replaces
//! the home once it has not heard from it for `home_unreachable_after`.

use gatehouse_cluster::cluster::WriteError;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::call::PrincipalChain;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::{ApplyError, ApprovalMode, CallId, CallState, Command, NewCall};
use gatehouse_testkit::wire::resource;
use gatehouse_tests::flow::{
    self, ACME, Approvals, BOT, CAROL, DAVE, DROP_TABLE, JOHN_APPROVER, OTHER, OTHER_APPROVER,
    OTHER_BOT, Roles, SET_FLAG, approve, approve_hash, call_tool, call_tool_keyed, grace, propose,
    record, record_on, table, wait_invoked, wait_state,
};
use serde_json::json;
use std::time::Duration;
use tonic::Code;

/// Long enough for an election, a lost home's replacement and a claim on a loaded machine.
const FAILOVER: Duration = Duration::from_secs(20);
/// Generous: seven three-node clusters share two cores while this file runs.
const SHORT: Duration = Duration::from_secs(30);

fn code<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> Code {
    result.expect_err("the request is refused").code()
}

#[test]
fn invariant_1_nothing_runs_upstream_without_a_committed_approval_and_claim() -> anyhow::Result<()>
{
    let (cluster, flow) = flow::start(Approvals {
        required: 2,
        ttl_seconds: None,
    })?;
    let Roles {
        home,
        leader,
        follower,
    } = flow::roles(&cluster)?;

    // Pending, and then with one approval of the two required: nothing goes upstream.
    let id = propose(&cluster, follower, DROP_TABLE, &table("users"))?;
    let once = approve(&cluster, follower, CAROL, &id)?;
    assert_eq!(once.state, pb::CallState::Pending as i32);
    grace();
    assert_eq!(flow.upstream.count_for(&id), 0, "a pending call ran");

    // The home goes mute: it still hears the cluster, nothing it sends arrives. It sees the
    // call approved, but its claim cannot commit, so it must not call the upstream.
    let epoch = flow::home_of(&cluster, ACME).expect("placed").epoch;
    cluster.router().cut_one_way(home, leader);
    cluster.router().cut_one_way(home, follower);
    let approved = approve(&cluster, follower, DAVE, &id)?;
    assert_eq!(approved.state, pb::CallState::Approved as i32);
    cluster.wait_until("the home sees the approval", SHORT, |c| {
        record_on(c, home, &id).is_some_and(|r| r.state == CallState::Approved)
    })?;
    grace();
    // Read the upstream first: anything it received was claimed before it was sent.
    let sent = flow.upstream.count_for(&id);
    let now = record(&cluster, &id).expect("the call");
    match &now.claim {
        None => assert_eq!(sent, 0, "an approved call ran without a committed claim"),
        // Only if the leader gave up on the mute home meanwhile: a new home claimed it.
        Some(claim) => assert_ne!(claim.node, home, "the mute home committed a claim"),
    }

    // Once the claim can commit, the call runs, once, at its home (or, had the leader given
    // up on the mute home, at the new one).
    cluster.router().heal();
    let done = wait_state(&cluster, &id, CallState::Succeeded, SHORT)?;
    grace();
    assert_eq!(flow.upstream.count_for(&id), 1);
    let claim = done.claim.expect("a succeeded call was claimed");
    assert!(claim.node == home || claim.epoch > epoch, "{claim:?}");
    let invocation = flow
        .upstream
        .invocations()
        .into_iter()
        .find(|i| i.call_id.as_deref() == Some(id.as_str()))
        .expect("the invocation");
    assert_eq!(invocation.idempotency_key.as_deref(), Some(id.as_str()));
    assert_eq!(
        invocation.body, done.spec.arguments,
        "exactly what was approved"
    );
    let last_approval = done.approvals.last().expect("approvals").at;
    assert!(
        last_approval <= claim.at && claim.at <= invocation.at_unix_ms,
        "approval {last_approval}, claim {}, invocation {}",
        claim.at,
        invocation.at_unix_ms
    );
    Ok(())
}

#[test]
fn invariant_2_an_approval_is_bound_to_the_argument_hash() -> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let Roles { follower, .. } = flow::roles(&cluster)?;

    let users = propose(&cluster, follower, DROP_TABLE, &table("users"))?;
    let reviewed = flow::get(&cluster, follower, CAROL, &users)?;
    assert_eq!(
        reviewed.args_sha256,
        sha256_hex(reviewed.args_json.as_bytes())
    );

    // An approval naming other arguments is refused and changes nothing.
    let elsewhere = sha256_hex(br#"{"table":"orders"}"#);
    assert_eq!(
        code(approve_hash(&cluster, follower, CAROL, &users, &elsewhere)),
        Code::FailedPrecondition
    );
    let untouched = record(&cluster, &users).expect("the call");
    assert_eq!(untouched.state, CallState::Pending);
    assert!(untouched.approvals.is_empty());

    // Other arguments are another call, which the first call's approval does not cover.
    let orders = propose(&cluster, follower, DROP_TABLE, &table("orders"))?;
    assert_ne!(orders, users);
    assert_eq!(
        code(approve_hash(
            &cluster,
            follower,
            CAROL,
            &orders,
            &reviewed.args_sha256
        )),
        Code::FailedPrecondition
    );
    approve_hash(&cluster, follower, CAROL, &users, &reviewed.args_sha256)?;
    wait_state(&cluster, &users, CallState::Succeeded, SHORT)?;
    grace();
    let sent: Vec<_> = flow
        .upstream
        .invocations()
        .into_iter()
        .filter(|i| i.call_id.as_deref() == Some(users.as_str()))
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body, reviewed.args_json);
    assert_eq!(sha256_hex(sent[0].body.as_bytes()), reviewed.args_sha256);
    assert_eq!(
        record(&cluster, &orders).expect("orders").state,
        CallState::Pending
    );
    assert_eq!(flow.upstream.count_for(&orders), 0);

    // One idempotency key names one set of arguments: a repeat is the same call, other
    // arguments under it are refused.
    let args = json!({"table": "sessions"});
    let first = call_tool_keyed(
        &cluster,
        follower,
        BOT,
        ACME,
        DROP_TABLE,
        &args,
        Some("k-1"),
    )?;
    let again = call_tool_keyed(
        &cluster,
        follower,
        BOT,
        ACME,
        DROP_TABLE,
        &args,
        Some("k-1"),
    )?;
    assert_eq!(again.call_id, first.call_id);
    let other_args = json!({"table": "accounts"});
    assert_eq!(
        code(call_tool_keyed(
            &cluster,
            follower,
            BOT,
            ACME,
            DROP_TABLE,
            &other_args,
            Some("k-1")
        )),
        Code::FailedPrecondition
    );
    Ok(())
}

#[test]
fn invariant_3_the_upstream_is_invoked_at_most_once_per_claim_and_a_lost_claim_is_never_silently_rerun()
-> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles { home, follower, .. } = flow::roles(&cluster)?;
    let upstream = &flow.upstream;
    // A well-behaved upstream: a repeated idempotency key runs nothing again.
    upstream.dedupe_by_key(true);

    // The home dies while the upstream runs a call that is not safe to repeat: the new home
    // marks it outcome unknown, never sends it again, and an approver settles it.
    upstream.hold("drop_table");
    let drop = propose(&cluster, follower, DROP_TABLE, &table("payments"))?;
    approve(&cluster, follower, CAROL, &drop)?;
    wait_invoked(&flow, &drop, 1, SHORT)?;
    let executing = wait_state(&cluster, &drop, CallState::Executing, SHORT)?;
    let first_claim = executing.claim.expect("claimed");
    assert_eq!(first_claim.node, home);
    cluster.kill(home);
    let unknown = wait_state(&cluster, &drop, CallState::OutcomeUnknown, FAILOVER)?;
    assert_eq!(
        unknown.claim,
        Some(first_claim.clone()),
        "nobody claimed it again"
    );
    let placed = flow::home_of(&cluster, ACME).expect("placed");
    assert!(placed.home != home && placed.epoch > first_claim.epoch);
    upstream.release("drop_table");
    // The request the dead home sent still runs at the upstream, as it would at a real service.
    cluster.wait_until("the first request runs", SHORT, |_| {
        upstream.executions_for(&drop) == 1
    })?;
    grace();
    assert_eq!(
        upstream.count_for(&drop),
        1,
        "a call of unknown outcome was re-sent"
    );
    let resolved = flow::resolve(
        &cluster,
        follower,
        CAROL,
        &drop,
        pb::ResolveOutcome::Succeeded,
        "the table is gone: checked the database",
    )?;
    assert_eq!(resolved.state, pb::CallState::Succeeded as i32);
    assert_eq!(
        resolved.resolution.map(|r| r.principal).as_deref(),
        Some("carol")
    );
    assert_eq!(upstream.count_for(&drop), 1);

    // The home comes back and acme returns to it.
    cluster.restart(home)?;
    let back = flow::wait_settled(&cluster, ACME, FAILOVER)?;
    assert_eq!(back.home, home);

    // The home dies while the upstream runs an idempotent call: the new home claims it again
    // under its own epoch with the same idempotency key. The upstream sees two requests and
    // runs the side effect once.
    upstream.hold("set_flag");
    let flag = propose(&cluster, follower, SET_FLAG, &flow::flag("beta"))?;
    approve(&cluster, follower, CAROL, &flag)?;
    wait_invoked(&flow, &flag, 1, SHORT)?;
    let executing = wait_state(&cluster, &flag, CallState::Executing, SHORT)?;
    let lost_claim = executing.claim.expect("claimed");
    assert_eq!(lost_claim.node, home);
    cluster.kill(home);
    wait_invoked(&flow, &flag, 2, FAILOVER)?;
    let reclaimed = record(&cluster, &flag).expect("the call");
    let claim = reclaimed.claim.expect("claimed again");
    assert!(
        claim.node != home && claim.epoch > lost_claim.epoch,
        "{claim:?}"
    );
    assert_ne!(claim.claim_id, lost_claim.claim_id);
    upstream.release("set_flag");
    let done = wait_state(&cluster, &flag, CallState::Succeeded, SHORT)?;
    assert_eq!(done.claim.expect("claim").claim_id, claim.claim_id);
    grace();
    let sent: Vec<_> = upstream
        .invocations()
        .into_iter()
        .filter(|i| i.call_id.as_deref() == Some(flag.as_str()))
        .collect();
    assert_eq!(sent.len(), 2, "one request per claim");
    assert!(
        sent.iter()
            .all(|i| i.idempotency_key.as_deref() == Some(flag.as_str())),
        "both claims carry the call's key: {sent:?}"
    );
    assert_eq!(
        upstream.executions_for(&flag),
        1,
        "the side effect ran once"
    );
    Ok(())
}

#[test]
fn invariant_4_pending_and_approved_calls_survive_the_loss_of_a_minority() -> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles {
        home,
        leader,
        follower,
    } = flow::roles(&cluster)?;

    // The home dies while a call waits for approval. The call is still there; approved on
    // another node, it runs once at the new home.
    let pending = propose(&cluster, follower, DROP_TABLE, &table("audit"))?;
    let epoch = flow::home_of(&cluster, ACME).expect("placed").epoch;
    cluster.kill(home);
    for node in [leader, follower] {
        let kept = record_on(&cluster, node, &pending).expect("the pending call survives");
        assert_eq!(kept.state, CallState::Pending);
    }
    approve(&cluster, follower, CAROL, &pending)?;
    let done = wait_state(&cluster, &pending, CallState::Succeeded, FAILOVER)?;
    let claim = done.claim.expect("claimed");
    assert!(claim.node != home && claim.epoch > epoch, "{claim:?}");
    grace();
    assert_eq!(flow.upstream.count_for(&pending), 1);

    // Back with three nodes and acme at its home again.
    cluster.restart(home)?;
    let settled = flow::wait_settled(&cluster, ACME, FAILOVER)?;
    assert_eq!(settled.home, home);
    assert_eq!(
        flow.upstream.count_for(&pending),
        1,
        "the old home ran a call it had never claimed"
    );

    // The home dies after an approval and before its claim: it is cut off first, so that it
    // sees the approval but cannot commit a claim; then it dies. The new home claims and runs
    // the call once.
    let approved = propose(&cluster, follower, DROP_TABLE, &table("billing"))?;
    cluster.router().cut_one_way(home, leader);
    cluster.router().cut_one_way(home, follower);
    approve(&cluster, follower, CAROL, &approved)?;
    cluster.wait_until("the home sees the approval", SHORT, |c| {
        record_on(c, home, &approved).is_some_and(|r| r.state == CallState::Approved)
    })?;
    for node in [leader, follower] {
        let kept = record_on(&cluster, node, &approved).expect("the approved call");
        let claimant = kept.claim.map(|c| c.node);
        assert_ne!(claimant, Some(home), "the mute home committed a claim");
    }
    cluster.kill(home);
    cluster.router().heal();
    let done = wait_state(&cluster, &approved, CallState::Succeeded, FAILOVER)?;
    let claim = done.claim.expect("claimed");
    assert!(
        claim.node != home && claim.epoch > settled.epoch,
        "{claim:?}"
    );
    grace();
    assert_eq!(flow.upstream.count_for(&approved), 1);
    Ok(())
}

#[test]
fn invariant_5_only_the_tenants_approvers_outside_the_chain_approve_and_n_of_m_hold()
-> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals {
        required: 2,
        ttl_seconds: None,
    })?;
    let Roles { follower, .. } = flow::roles(&cluster)?;
    let id = propose(&cluster, follower, DROP_TABLE, &table("customers"))?;

    // The agent that made the call is no approver; the approver who is the call's own end
    // user is in its chain.
    assert_eq!(
        code(approve(&cluster, follower, BOT, &id)),
        Code::PermissionDenied
    );
    assert_eq!(
        code(approve(&cluster, follower, JOHN_APPROVER, &id)),
        Code::PermissionDenied
    );

    // Two of the tenant's approvers, each once.
    let first = approve(&cluster, follower, CAROL, &id)?;
    assert_eq!(first.state, pb::CallState::Pending as i32);
    assert!(
        approve(&cluster, follower, CAROL, &id).is_err(),
        "carol twice"
    );
    grace();
    assert_eq!(flow.upstream.count_for(&id), 0);
    let second = approve(&cluster, follower, DAVE, &id)?;
    assert_eq!(second.state, pb::CallState::Approved as i32);
    let done = wait_state(&cluster, &id, CallState::Succeeded, SHORT)?;
    let approvers: Vec<&str> = done
        .approvals
        .iter()
        .map(|v| v.principal.as_str())
        .collect();
    assert_eq!(approvers, ["carol", "dave"]);
    grace();
    assert_eq!(flow.upstream.count_for(&id), 1);
    Ok(())
}

#[test]
fn invariant_6_the_effective_mode_never_exceeds_the_declared_maximum() -> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let Roles { follower, .. } = flow::roles(&cluster)?;
    let leader = cluster.leader(SHORT)?;
    // `ops.note` is declared local_write; one rule tries to raise it, another lowers
    // drop_table for the scratch table.
    let index = cluster.block_on(cluster.admin(leader).apply(vec![
        resource(
            "Tool",
            "ops.note",
            Some(ACME),
            json!({"approvalMode": "local_write", "inputSchema": {"type": "object"}}),
        ),
        resource(
            "Policy",
            "modes",
            Some(ACME),
            json!({"rules": [
                {"name": "notes-are-destructive", "tools": "ops.note", "mode": "destructive"},
                {
                    "name": "scratch-is-local",
                    "tools": "ops.drop_table",
                    "when": [{"arg": "table", "op": "==", "value": "scratch"}],
                    "mode": "local_write",
                },
            ]}),
        ),
    ]))?;
    cluster.wait_converged(index, SHORT)?;

    // A rule asking for more than the declared maximum changes nothing: the note runs at once.
    let note = call_tool(
        &cluster,
        follower,
        BOT,
        ACME,
        "ops.note",
        &json!({"text": "hi"}),
    )?;
    assert_eq!(note.effective_mode, pb::ApprovalMode::LocalWrite as i32);
    assert_eq!(note.state, pb::CallState::Succeeded as i32);

    // The lowering rule applies where its condition holds...
    let keyed = call_tool_keyed(
        &cluster,
        follower,
        BOT,
        ACME,
        DROP_TABLE,
        &json!({"table": "scratch"}),
        Some("scratch-1"),
    )?;
    assert_eq!(keyed.effective_mode, pb::ApprovalMode::LocalWrite as i32);
    let scratch = wait_state(&cluster, &keyed.call_id, CallState::Succeeded, SHORT)?;
    assert_eq!(
        (scratch.spec.effective_mode, scratch.spec.highest_mode),
        (ApprovalMode::LocalWrite, ApprovalMode::Destructive)
    );
    assert!(scratch.approvals.is_empty(), "it needed no approval");

    // ...and a request for more than it covers gets the declared maximum, not beyond.
    let users = call_tool(&cluster, follower, BOT, ACME, DROP_TABLE, &table("users"))?;
    assert_eq!(users.effective_mode, pb::ApprovalMode::Destructive as i32);
    assert_eq!(users.state, pb::CallState::Pending as i32);
    let pending = record(&cluster, &users.call_id).expect("the call");
    assert_eq!(pending.spec.highest_mode, ApprovalMode::Destructive);
    assert!(pending.spec.effective_mode <= pending.spec.highest_mode);

    // A rule outside the taxonomy is refused when declared.
    let outside = cluster.block_on(cluster.admin(leader).apply(vec![resource(
        "Policy",
        "beyond",
        Some(ACME),
        json!({"rules": [{"name": "x", "tools": "*", "mode": "catastrophic"}]}),
    )]));
    assert!(outside.is_err(), "a mode outside the taxonomy was accepted");

    // And the state machine refuses a proposal that claims more than its tool's maximum,
    // whoever proposes it.
    let arguments = json!({"table": "x"}).to_string();
    let forged = NewCall {
        id: CallId::from_random(0x6_6666),
        tenant: ACME.into(),
        tool: DROP_TABLE.into(),
        args_sha256: sha256_hex(arguments.as_bytes()),
        arguments,
        chain: PrincipalChain {
            people: Vec::new(),
            end_user: None,
            agent: "bot".into(),
            a2a_peer: None,
        },
        requested_mode: Some(ApprovalMode::Destructive),
        effective_mode: ApprovalMode::Destructive,
        highest_mode: ApprovalMode::Network,
        policy_decision_id: "pd_forged".into(),
        tool_generation: 1,
        policy_generation: 0,
        idempotency_key: None,
        retry_safe: false,
        required_approvals: 1,
        expires_at: gatehouse_actors::now_ms() + 60_000,
        approval_valid_ms: 60_000,
        context_id: None,
        trace_parent: None,
    };
    let node = cluster.node(follower).cluster.clone();
    let refused = cluster.block_on(node.propose(Command::Propose {
        call: Box::new(forged),
    }));
    assert!(
        matches!(
            refused,
            Err(WriteError::Rejected(ApplyError::Refused { .. }))
        ),
        "{refused:?}"
    );
    grace();
    assert_eq!(flow.upstream.count_for(&users.call_id), 0);
    Ok(())
}

#[test]
fn invariant_7_no_api_lets_one_tenant_see_or_touch_another_tenants_calls() -> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    let Roles { follower, .. } = flow::roles(&cluster)?;
    let id = propose(&cluster, follower, DROP_TABLE, &table("secrets"))?;
    let sha = record(&cluster, &id).expect("the call").spec.args_sha256;

    for key in [OTHER_BOT, OTHER_APPROVER] {
        let mut approvals = flow::approvals(&cluster, follower, key);
        let mut gateway = flow::gateway(&cluster, follower, key);
        cluster.block_on(async {
            let get = approvals
                .get(pb::GetCallRecordRequest {
                    call_id: id.clone(),
                })
                .await;
            assert_eq!(code(get), Code::NotFound, "Get");
            let approve = approvals
                .approve(pb::ApproveCallRequest {
                    call_id: id.clone(),
                    args_sha256: sha.clone(),
                    reason: "mine now".into(),
                })
                .await;
            assert_eq!(code(approve), Code::NotFound, "Approve");
            let reject = approvals
                .reject(pb::RejectCallRequest {
                    call_id: id.clone(),
                    reason: "mine now".into(),
                })
                .await;
            assert_eq!(code(reject), Code::NotFound, "Reject");
            let cancel = approvals
                .cancel(pb::CancelCallRequest {
                    call_id: id.clone(),
                    reason: "mine now".into(),
                })
                .await;
            assert_eq!(code(cancel), Code::NotFound, "Cancel");
            let list = approvals
                .list_pending(pb::ListCallsRequest {
                    tenant: ACME.into(),
                    ..Default::default()
                })
                .await;
            assert_eq!(code(list), Code::NotFound, "ListPending");
            let watch = approvals
                .watch_pending(pb::WatchCallsRequest {
                    tenant: ACME.into(),
                    from_index: 0,
                })
                .await;
            assert_eq!(code(watch), Code::NotFound, "WatchPending");
            let read = gateway
                .get_call(pb::GetCallRequest {
                    call_id: id.clone(),
                })
                .await;
            assert_eq!(code(read), Code::NotFound, "GetCall");
            let call = gateway
                .call_tool(pb::CallToolRequest {
                    tenant: ACME.into(),
                    tool: DROP_TABLE.into(),
                    arguments_json: r#"{"table":"users"}"#.into(),
                    idempotency_key: None,
                })
                .await;
            assert_eq!(code(call), Code::NotFound, "CallTool in acme");
        });
    }
    // acme's tools do not exist in other, and other's queue holds none of acme's calls.
    assert_eq!(
        code(call_tool(
            &cluster,
            follower,
            OTHER_BOT,
            OTHER,
            DROP_TABLE,
            &table("users")
        )),
        Code::NotFound
    );
    let mut approvals = flow::approvals(&cluster, follower, OTHER_APPROVER);
    let listed = cluster
        .block_on(approvals.list_pending(pb::ListCallsRequest {
            tenant: OTHER.into(),
            ..Default::default()
        }))?
        .into_inner();
    assert!(listed.calls.is_empty(), "{:?}", listed.calls);

    // The call was untouched by all of it, and acme's own approver still decides it.
    let untouched = record(&cluster, &id).expect("the call");
    assert_eq!(untouched.state, CallState::Pending);
    assert!(untouched.approvals.is_empty() && untouched.rejections.is_empty());
    let mut carol = flow::approvals(&cluster, follower, CAROL);
    let rejected = cluster
        .block_on(carol.reject(pb::RejectCallRequest {
            call_id: id.clone(),
            reason: "not ours to drop".into(),
        }))?
        .into_inner();
    assert_eq!(
        rejected.call.expect("a record").state,
        pb::CallState::Rejected as i32
    );
    grace();
    assert_eq!(flow.upstream.count_for(&id), 0);
    Ok(())
}
