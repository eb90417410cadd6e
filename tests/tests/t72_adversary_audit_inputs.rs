//! Adversary tests for what the gateway records and what arguments may reach: each performs an
//! attack (or a failure an attacker would wish for) against real nodes and shows it fails with a
//! typed error and no change to state — nothing at the upstream (`RecordingUpstream`, a real
//! HTTP listener that outlives node kills), nothing proposed in the registry — and that the
//! audit log, read back from the node's `DATA_DIR/audit/audit.log`, says what happened.
//!
//! Finding 8 (audit what happens, before it happens), 9 (HTTP bindings and dot segments) and 10
//! (read-only intent) of issue 14.

use gatehouse_audit::{Kind, Record};
use gatehouse_proto::v1 as pb;
use gatehouse_registry::CallState;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::TestCluster;
use gatehouse_tests::flow::{
    self, ACME, Approvals, BOT, CAROL, DROP_TABLE, Flow, Roles, approvals, approve, call_tool,
    grace, propose, record, table, wait_invoked, wait_state,
};
use gatehouse_tests::mcp_wire::RawMcp;
use serde_json::{Value, json};
use std::time::Duration;
use tonic::Code;

const SHORT: Duration = Duration::from_secs(10);
/// An election, a lost home's replacement and a claim, on a loaded machine.
const FAILOVER: Duration = Duration::from_secs(20);

/// A read-only tool on acme's `ops` upstream: run at once, off Raft.
const READ_ROWS: &str = "ops.read_rows";
/// Read-only, bound to a path with an argument in it.
const ITEM_SUMMARY: &str = "ops.item_summary";
/// Destructive, bound to a path with an argument in it: would need approval.
const DELETE_ITEM: &str = "ops.delete_item";
/// Destructive, of class `verify`.
const VERIFY_BACKUP: &str = "ops.verify_backup";
/// `local_write`, of class `observe`.
const NOTE_SEEN: &str = "ops.note_seen";

/// An agent of acme whose declared intent is `read_only`.
const AUDITOR: &str = "gate_t72-auditor-000000000000000000000";
/// An agent of acme acting for no end user: an A2A peer delegating its own tasks.
const RELAY: &str = "gate_t72-relay-00000000000000000000000";

fn tool(name: &str, spec: Value) -> pb::Resource {
    resource("Tool", name, Some(ACME), spec)
}

fn extra_resources() -> Vec<pb::Resource> {
    let schema = |properties: Value| json!({"type": "object", "properties": properties});
    vec![
        tool(
            READ_ROWS,
            json!({"inputSchema": schema(json!({"table": {"type": "string"}})),
                   "approvalMode": "read_only"}),
        ),
        tool(
            ITEM_SUMMARY,
            json!({"inputSchema": schema(json!({"id": {"type": "string"}})),
                   "approvalMode": "read_only",
                   "http": {"method": "GET", "path": "/tenants/acme/items/{id}/summary"}}),
        ),
        tool(
            DELETE_ITEM,
            json!({"inputSchema": schema(json!({"id": {"type": "string"}})),
                   "approvalMode": "destructive",
                   "http": {"method": "DELETE", "path": "/tenants/acme/items/{id}"}}),
        ),
        tool(
            VERIFY_BACKUP,
            json!({"approvalMode": "destructive", "capabilityClass": "verify"}),
        ),
        tool(
            NOTE_SEEN,
            json!({"approvalMode": "local_write", "capabilityClass": "observe"}),
        ),
        resource(
            "Principal",
            "auditor",
            None,
            json!({
                "apiKeySha256": gatehouse_registry::canonical::sha256_hex(AUDITOR.as_bytes()),
                "roles": {"acme": ["agent"]},
                "intent": "read_only",
            }),
        ),
        principal("relay", RELAY, json!({"acme": ["agent"]}), None),
    ]
}

/// A one-node cluster with the approval fixture and the tools above.
fn one_node() -> anyhow::Result<(TestCluster, Flow)> {
    let cluster = TestCluster::new(&[1])?;
    let flow = Flow::setup(&cluster)?;
    apply_extra(&cluster)?;
    Ok((cluster, flow))
}

fn apply_extra(cluster: &TestCluster) -> anyhow::Result<()> {
    let leader = cluster.leader(SHORT)?;
    let index = cluster.block_on(cluster.admin(leader).apply(extra_resources()))?;
    cluster.wait_converged(index, SHORT)?;
    Ok(())
}

/// The node's audit records, read from `DATA_DIR/audit/audit.log` (a running node's log is
/// flushed first; a killed node's is read as it was left, a torn last line skipped).
fn audit_log(cluster: &TestCluster, id: u64) -> Vec<Record> {
    if cluster.running().contains(&id) {
        // A log made to fail refuses the flush; what it wrote is on disk either way.
        let _ = cluster.block_on(cluster.node(id).audit.flush());
    }
    on_disk(cluster, id)
}

/// Waits until the node's audit log satisfies `done` (what a home writes after its own
/// proposal lands comes a moment after the registry shows it); the records then.
fn wait_audited(
    cluster: &TestCluster,
    id: u64,
    what: &str,
    done: impl Fn(&[Record]) -> bool,
) -> anyhow::Result<Vec<Record>> {
    cluster.wait_until(what, SHORT, |c| done(&audit_log(c, id)))?;
    Ok(audit_log(cluster, id))
}

/// Whether the records hold one of `call_id` with this decision and outcome.
fn has(records: &[Record], call_id: &str, decision: &str, outcome: &str) -> bool {
    records.iter().any(|r| {
        r.entry.call_id.as_deref() == Some(call_id)
            && r.entry.decision.as_deref() == Some(decision)
            && r.entry.outcome == outcome
    })
}

/// The tools `principal` sees in acme, by name, as node `id` has them.
fn visible(cluster: &TestCluster, id: u64, principal: &str) -> Vec<String> {
    let registry = cluster.node(id).cluster.registry.read();
    registry
        .visible_tools(ACME, principal)
        .into_iter()
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The records of one call, in the order they were written.
fn of_call<'a>(records: &'a [Record], call_id: &str) -> Vec<&'a Record> {
    records
        .iter()
        .filter(|r| r.entry.call_id.as_deref() == Some(call_id))
        .collect()
}

/// (decision, outcome) of each record.
fn steps(records: &[&Record]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|r| {
            (
                r.entry.decision.clone().unwrap_or_default(),
                r.entry.outcome.clone(),
            )
        })
        .collect()
}

/// A home's own decision may take more than one attempt (a proposal lost to an election is
/// tried again): each attempt is a `requested` record and then what came of it, and the last
/// attempt ended in `last`.
fn assert_written_ahead(records: &[&Record], decision: &str, last: &str) {
    let outcomes: Vec<&str> = records
        .iter()
        .filter(|r| r.entry.decision.as_deref() == Some(decision))
        .map(|r| r.entry.outcome.as_str())
        .collect();
    assert!(
        !outcomes.is_empty() && outcomes.len().is_multiple_of(2),
        "{decision}: {outcomes:?}"
    );
    for attempt in outcomes.chunks(2) {
        assert_eq!(attempt[0], "requested", "{decision}: {outcomes:?}");
        assert_ne!(attempt[1], "requested", "{decision}: {outcomes:?}");
    }
    assert_eq!(outcomes.last(), Some(&last), "{decision}: {outcomes:?}");
}

fn step(decision: &str, outcome: &str) -> (String, String) {
    (decision.to_owned(), outcome.to_owned())
}

fn code<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> Code {
    result.expect_err("the request is refused").code()
}

/// How many calls of acme the node's registry holds.
fn acme_calls(cluster: &TestCluster, id: u64) -> usize {
    let registry = cluster.node(id).cluster.registry.read();
    registry.calls_of(ACME).count()
}

fn mcp(cluster: &TestCluster, id: u64, key: &str) -> RawMcp {
    RawMcp::new(
        &format!("http://{}/mcp", cluster.node(id).http_addr),
        Some(key),
    )
}

/// A2A JSON-RPC (`/a2a`) as `key`: one method, its answer.
fn a2a(cluster: &TestCluster, id: u64, key: &str, method: &str, params: Value) -> Value {
    let url = format!("http://{}/a2a", cluster.node(id).http_addr);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    cluster.block_on(async {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(key)
            .header("A2A-Version", "1.0")
            .json(&body)
            .send()
            .await
            .expect("the A2A front answers")
            .json::<Value>()
            .await
            .expect("a JSON-RPC answer")
    })
}

/// The structured error of an MCP tool result.
fn mcp_error(answer: &gatehouse_tests::mcp_wire::Answer) -> Value {
    let result = answer.result().expect("a tools/call result");
    assert_eq!(result["isError"], true, "{result}");
    result["structuredContent"]["error"].clone()
}

#[test]
fn a_home_killed_mid_execution_leaves_an_execution_start_record() -> anyhow::Result<()> {
    let (mut cluster, flow) = flow::start(Approvals::default())?;
    let Roles { home, follower, .. } = flow::roles(&cluster)?;
    flow.upstream.hold("drop_table");
    let id = propose(&cluster, follower, DROP_TABLE, &table("ledger"))?;
    approve(&cluster, follower, CAROL, &id)?;
    wait_invoked(&flow, &id, 1, SHORT)?;
    let executing = wait_state(&cluster, &id, CallState::Executing, SHORT)?;
    let claim = executing.claim.clone().expect("claimed");
    assert_eq!(claim.node, home);

    // The home dies while the upstream holds the request: nothing after the request was sent
    // was written, yet its log already names the request.
    cluster.kill(home);
    let left = audit_log(&cluster, home);
    let records = of_call(&left, &id);
    let started: Vec<&&Record> = records
        .iter()
        .filter(|r| r.entry.decision.as_deref() == Some("execute"))
        .collect();
    assert_eq!(
        steps(&started.iter().map(|r| **r).collect::<Vec<_>>()),
        [step("execute", "started")]
    );
    let start = &started[0].entry;
    assert_eq!(start.kind, Kind::ToolCall);
    assert_eq!(start.claim_id.as_deref(), Some(claim.claim_id.as_str()));
    assert_eq!(
        start.args_sha256.as_deref(),
        Some(executing.spec.args_sha256.as_str())
    );
    assert_eq!(start.tenant.as_deref(), Some(ACME));
    assert_eq!(start.target.as_deref(), Some(DROP_TABLE));
    assert_eq!(start.chain, ["user:john", "agent:bot"]);
    assert_eq!(start.mode.as_deref(), Some("destructive"));
    // It was synced before the request: the request arrived after the record's time.
    let sent = flow.upstream.invocations()[0].at_unix_ms;
    assert!(started[0].at_ms <= sent, "{} > {sent}", started[0].at_ms);

    // The new home settles the lost claim as outcome unknown, and says so in its own log
    // before it proposes it.
    let unknown = wait_state(&cluster, &id, CallState::OutcomeUnknown, FAILOVER)?;
    let new_home = flow::home_of(&cluster, ACME).expect("placed").home;
    assert_ne!(new_home, home);
    let marked = wait_audited(&cluster, new_home, "the marking audited", |r| {
        has(r, &id, "mark_unknown", "outcome_unknown")
    })?;
    assert_written_ahead(&of_call(&marked, &id), "mark_unknown", "outcome_unknown");
    assert_eq!(unknown.claim, Some(claim));
    flow.upstream.release("drop_table");
    grace();
    assert_eq!(
        flow.upstream.count_for(&id),
        1,
        "the request was never sent again"
    );
    Ok(())
}

#[test]
fn every_cancellation_path_is_audited() -> anyhow::Result<()> {
    let (cluster, flow) = one_node()?;

    // gRPC ApprovalService.Cancel, by the agent of the call.
    let by_grpc = propose(&cluster, 1, DROP_TABLE, &table("grpc"))?;
    let mut client = approvals(&cluster, 1, BOT);
    cluster.block_on(client.cancel(pb::CancelCallRequest {
        call_id: by_grpc.clone(),
        reason: "wrong table".into(),
    }))?;

    // MCP tasks/cancel.
    let by_mcp = propose(&cluster, 1, DROP_TABLE, &table("mcp"))?;
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let params = json!({
        "taskId": by_mcp,
        "_meta": {"io.modelcontextprotocol/clientCapabilities": tasks},
    });
    let answer = cluster.block_on(mcp(&cluster, 1, BOT).request("tasks/cancel", params))?;
    assert!(answer.message.get("error").is_none(), "{}", answer.text);

    // A2A CancelTask, on a task a peer delegated over A2A.
    let sent = a2a(
        &cluster,
        1,
        RELAY,
        "SendMessage",
        json!({"message": {
            "messageId": "t72-cancel",
            "role": "ROLE_USER",
            "parts": [{"data": {"tool": DROP_TABLE, "arguments": table("a2a")}}],
        }}),
    );
    let by_a2a = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {sent}"))
        .to_owned();
    let cancelled = a2a(&cluster, 1, RELAY, "CancelTask", json!({"id": by_a2a}));
    assert!(cancelled.get("error").is_none(), "{cancelled}");

    let records = audit_log(&cluster, 1);
    let bot = ["user:john", "agent:bot"].map(str::to_owned).to_vec();
    let relay = vec!["agent:relay".to_owned()];
    for (id, chain) in [(&by_grpc, &bot), (&by_mcp, &bot), (&by_a2a, &relay)] {
        assert_eq!(
            record(&cluster, id).map(|r| r.state),
            Some(CallState::Cancelled)
        );
        let cancels: Vec<&Record> = of_call(&records, id)
            .into_iter()
            .filter(|r| r.entry.decision.as_deref() == Some("cancel"))
            .collect();
        assert_eq!(
            steps(&cancels),
            [step("cancel", "requested"), step("cancel", "cancelled")],
            "{id}"
        );
        assert!(
            cancels
                .iter()
                .all(|r| r.entry.kind == Kind::Approval && &r.entry.chain == chain),
            "{cancels:?}"
        );
    }
    assert!(flow.upstream.invocations().is_empty());
    Ok(())
}

#[test]
fn a_toolset_load_is_audited() -> anyhow::Result<()> {
    let (cluster, _flow) = one_node()?;
    let bot = mcp(&cluster, 1, BOT);
    let loaded =
        cluster.block_on(bot.call_tool("gatehouse.load_toolset", json!({"toolset": "ops"})))?;
    assert_ne!(loaded.result()?["isError"], true, "{}", loaded.text);
    // One that does not exist changes nothing, and is audited as refused.
    let seen = visible(&cluster, 1, "bot");
    let missing =
        cluster.block_on(bot.call_tool("gatehouse.load_toolset", json!({"toolset": "nope"})))?;
    assert_eq!(mcp_error(&missing)["code"], "not_found");
    assert_eq!(visible(&cluster, 1, "bot"), seen);

    let loads: Vec<Record> = audit_log(&cluster, 1)
        .into_iter()
        .filter(|r| r.entry.kind == Kind::ToolsetLoad)
        .collect();
    let seen: Vec<(Option<String>, String)> = loads
        .iter()
        .map(|r| (r.entry.target.clone(), r.entry.outcome.clone()))
        .collect();
    assert_eq!(
        seen[..3],
        [
            (Some("ops".into()), "requested".into()),
            (Some("ops".into()), "loaded".into()),
            (Some("nope".into()), "requested".into()),
        ]
    );
    assert!(seen[3].1.starts_with("refused:"), "{seen:?}");
    assert!(
        loads
            .iter()
            .all(|r| r.entry.chain == ["user:john", "agent:bot"]
                && r.entry.tenant.as_deref() == Some(ACME))
    );
    Ok(())
}

#[test]
fn mark_unknown_resolve_and_expire_are_audited() -> anyhow::Result<()> {
    let (mut cluster, flow) = one_node()?;
    // The home restarts while the upstream holds an approved call that is not safe to repeat:
    // on restart it finds its own claim that nothing runs, and marks the call unknown.
    flow.upstream.hold("drop_table");
    let lost = propose(&cluster, 1, DROP_TABLE, &table("restart"))?;
    approve(&cluster, 1, CAROL, &lost)?;
    wait_invoked(&flow, &lost, 1, SHORT)?;
    cluster.kill(1);
    cluster.restart(1)?;
    wait_state(&cluster, &lost, CallState::OutcomeUnknown, FAILOVER)?;
    wait_audited(&cluster, 1, "the marking audited", |r| {
        has(r, &lost, "mark_unknown", "outcome_unknown")
    })?;
    flow::resolve(
        &cluster,
        1,
        CAROL,
        &lost,
        pb::ResolveOutcome::Failed,
        "the table is still there",
    )?;
    let records = audit_log(&cluster, 1);
    assert_written_ahead(&of_call(&records, &lost), "mark_unknown", "outcome_unknown");
    let resolved: Vec<(String, String)> = steps(&of_call(&records, &lost))
        .into_iter()
        .filter(|(d, _)| d == "resolve")
        .collect();
    assert_eq!(
        resolved,
        [step("resolve", "requested"), step("resolve", "failed")]
    );
    let chains: Vec<&Vec<String>> = of_call(&records, &lost)
        .into_iter()
        .filter(|r| {
            r.entry.decision.as_deref() != Some("execute") && r.entry.kind == Kind::Approval
        })
        .map(|r| &r.entry.chain)
        .collect();
    assert!(chains.contains(&&vec!["node:1".to_owned()]), "{chains:?}");
    assert!(
        chains.contains(&&vec!["approver:carol".to_owned()]),
        "{chains:?}"
    );
    flow.upstream.release("drop_table");

    // A call nobody approves in time is expired by its home, audited before it is proposed.
    Flow::set_approvals(
        &cluster,
        Approvals {
            required: 1,
            ttl_seconds: Some(1),
        },
    )?;
    let late = propose(&cluster, 1, DROP_TABLE, &table("late"))?;
    wait_state(&cluster, &late, CallState::Expired, FAILOVER)?;
    let records = wait_audited(&cluster, 1, "the expiry audited", |r| {
        has(r, &late, "expire", "expired")
    })?;
    let expiry: Vec<&Record> = of_call(&records, &late)
        .into_iter()
        .filter(|r| r.entry.decision.as_deref() == Some("expire"))
        .collect();
    assert_written_ahead(&expiry, "expire", "expired");
    assert_eq!(expiry[0].entry.chain, ["node:1"]);
    assert_eq!(flow.upstream.count_for(&late), 0);
    Ok(())
}

#[test]
fn a_call_whose_audit_record_cannot_be_written_does_not_reach_the_upstream() -> anyhow::Result<()> {
    let (cluster, flow) = flow::start(Approvals::default())?;
    apply_extra(&cluster)?;
    let Roles { home, follower, .. } = flow::roles(&cluster)?;
    let pending = propose(&cluster, home, DROP_TABLE, &table("kept"))?;
    let calls = acme_calls(&cluster, home);
    let upstream = &flow.upstream;

    // The home's audit log stops writing (a full or failing disk).
    cluster
        .node(home)
        .audit
        .inject_write_failure("disk full (injected by t72)");
    let before = audit_log(&cluster, home).len();

    // A read-only call run at once on the home: refused before the upstream is called.
    let read = call_tool(&cluster, home, BOT, ACME, READ_ROWS, &json!({"table": "t"}));
    let status = read.expect_err("refused");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("audit log"), "{status:?}");
    // A call that needs approval: nothing is proposed.
    assert_eq!(
        code(call_tool(
            &cluster,
            home,
            BOT,
            ACME,
            DROP_TABLE,
            &table("x")
        )),
        Code::Unavailable
    );
    assert_eq!(acme_calls(&cluster, home), calls);
    // Deciding on a call through the home: nothing is proposed, the call still waits.
    let mut carol = approvals(&cluster, home, CAROL);
    let hash = record(&cluster, &pending)
        .expect("the call")
        .spec
        .args_sha256;
    let approved = cluster.block_on(carol.approve(pb::ApproveCallRequest {
        call_id: pending.clone(),
        args_sha256: hash,
        reason: "ok".into(),
    }));
    assert_eq!(code(approved), Code::Unavailable);
    let mut bot = approvals(&cluster, home, BOT);
    let cancel = cluster.block_on(bot.cancel(pb::CancelCallRequest {
        call_id: pending.clone(),
        reason: "no".into(),
    }));
    assert_eq!(code(cancel), Code::Unavailable);
    // MCP: a toolset load and a context pull are refused with the same code.
    let bot_mcp = mcp(&cluster, home, BOT);
    let seen = visible(&cluster, home, "bot");
    let load =
        cluster.block_on(bot_mcp.call_tool("gatehouse.load_toolset", json!({"toolset": "ops"})))?;
    assert_eq!(mcp_error(&load)["code"], "unavailable");
    assert_eq!(visible(&cluster, home, "bot"), seen);
    let guide =
        cluster.block_on(bot_mcp.request("prompts/get", json!({"name": "operating_guide"})))?;
    assert_eq!(
        guide.message["error"]["data"]["code"], "unavailable",
        "{}",
        guide.text
    );
    assert_eq!(
        record(&cluster, &pending).map(|r| r.state),
        Some(CallState::Pending)
    );
    assert_eq!(acme_calls(&cluster, home), calls);

    // Approved through a node whose log writes, the call is claimed by the home, which cannot
    // make its execution-start record durable: the request is never sent, and the call fails
    // saying why (it did not run, so its outcome is known, not unknown).
    approve(&cluster, follower, CAROL, &pending)?;
    let failed = wait_state(&cluster, &pending, CallState::Failed, SHORT)?;
    let why = format!("{:?}", failed.outcome);
    assert!(
        why.contains("not sent to the upstream") && why.contains("audit log"),
        "{why}"
    );
    grace();
    assert!(
        upstream.invocations().is_empty(),
        "{:?}",
        upstream.invocations()
    );
    // Nothing reached the home's log after it failed.
    assert_eq!(audit_log(&cluster, home).len(), before);
    Ok(())
}

#[test]
fn a_dot_segment_argument_never_reaches_another_path() -> anyhow::Result<()> {
    let (cluster, flow) = one_node()?;
    let calls = acme_calls(&cluster, 1);
    let hostile = [
        "..",
        ".",
        "%2e%2e",
        "%2E.",
        "%252e%252e",
        "..;x",
        "a/../..",
        "a%2Fb",
        "a\\b",
        "",
    ];
    for id in hostile {
        for tool in [ITEM_SUMMARY, DELETE_ITEM] {
            let refused = call_tool(&cluster, 1, BOT, ACME, tool, &json!({"id": id}));
            let status = refused.expect_err("refused");
            assert_eq!(
                status.code(),
                Code::InvalidArgument,
                "{tool} {id:?}: {status:?}"
            );
            assert!(status.message().contains("argument `id`"), "{status:?}");
        }
    }
    // Nothing was sent, nothing proposed (the destructive tool would have waited for approval),
    // and every refusal is audited.
    assert!(
        flow.upstream.invocations().is_empty(),
        "{:?}",
        flow.upstream.invocations()
    );
    assert_eq!(acme_calls(&cluster, 1), calls);
    let refusals = audit_log(&cluster, 1)
        .into_iter()
        .filter(|r| r.entry.outcome == "refused:invalid_arguments")
        .count();
    assert_eq!(refusals, hostile.len() * 2);

    // What is allowed reaches the listener with the request line exactly as validated.
    for id in ["a.b", "...", "50%"] {
        call_tool(&cluster, 1, BOT, ACME, ITEM_SUMMARY, &json!({"id": id}))?;
    }
    let lines: Vec<(String, String)> = flow
        .upstream
        .invocations()
        .into_iter()
        .map(|i| (i.method, i.raw_path))
        .collect();
    let expected = [
        "/tenants/acme/items/a.b/summary",
        "/tenants/acme/items/.../summary",
        "/tenants/acme/items/50%25/summary",
    ];
    assert_eq!(lines, expected.map(|p| ("GET".to_owned(), p.to_owned())),);

    // An admin cannot declare a path that climbs out either.
    let climbing = tool(
        "ops.escape",
        json!({"approvalMode": "read_only", "http": {"method": "GET", "path": "/tenants/acme/../{id}"}}),
    );
    let applied = cluster.block_on(cluster.admin(1).apply(vec![climbing]));
    let error = applied.expect_err("refused at apply");
    assert!(format!("{error:#}").contains("spec.http.path"), "{error:#}");
    Ok(())
}

#[test]
fn read_only_intent_refuses_every_call_above_read_only_before_any_proposal() -> anyhow::Result<()> {
    let (cluster, flow) = one_node()?;
    let calls = acme_calls(&cluster, 1);
    // Destructive of class verify (the finding), and local_write of class observe.
    for tool in [VERIFY_BACKUP, NOTE_SEEN] {
        let status = call_tool(&cluster, 1, AUDITOR, ACME, tool, &json!({})).expect_err("refused");
        assert_eq!(status.code(), Code::PermissionDenied, "{tool}: {status:?}");
        assert!(status.message().contains("read_only intent"), "{status:?}");
    }
    // Over MCP the refusal is the same, typed.
    let over_mcp =
        cluster.block_on(mcp(&cluster, 1, AUDITOR).call_tool(VERIFY_BACKUP, json!({})))?;
    assert_eq!(mcp_error(&over_mcp)["code"], "denied_by_policy");
    assert_eq!(acme_calls(&cluster, 1), calls, "nothing was proposed");
    assert!(flow.upstream.invocations().is_empty());
    let refused = audit_log(&cluster, 1)
        .into_iter()
        .filter(|r| {
            r.entry.chain == ["agent:auditor"] && r.entry.outcome == "refused:denied_by_policy"
        })
        .count();
    assert_eq!(refused, 3);

    // A read-only call is what the intent allows.
    let read = call_tool(
        &cluster,
        1,
        AUDITOR,
        ACME,
        READ_ROWS,
        &json!({"table": "t"}),
    )?;
    assert_eq!(read.state, pb::CallState::Succeeded as i32, "{read:?}");
    assert_eq!(flow.upstream.invocations().len(), 1);
    Ok(())
}

/// The node's audit file as it stands, without a flush first: what is in it was written.
fn on_disk(cluster: &TestCluster, id: u64) -> Vec<Record> {
    let path = cluster.data_dir(id).join("audit").join("audit.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .map(|line| serde_json::from_str(line).expect("an audit line is a record"))
        .collect()
}

/// The outcomes of the admin changes of `target`, in the order they were written.
fn admin_changes(records: &[Record], target: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.entry.kind == Kind::AdminChange)
        .filter(|r| r.entry.target.as_deref() == Some(target))
        .map(|r| r.entry.outcome.clone())
        .collect()
}

#[test]
fn an_admin_change_has_its_request_on_disk_before_the_answer_and_its_outcome_after()
-> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1])?;
    let leader = cluster.leader(SHORT)?;
    let target = "Tenant/audited";

    cluster.block_on(cluster.admin(leader).put_tenant("audited"))?;
    // Read before anything else is flushed: the request was on disk before the answer.
    let at_answer = admin_changes(&on_disk(&cluster, leader), target);
    assert_eq!(
        at_answer.first().map(String::as_str),
        Some("requested"),
        "answered before its request was written: {at_answer:?}"
    );
    // What it changed follows it.
    assert_eq!(
        admin_changes(&audit_log(&cluster, leader), target),
        ["requested", "created"]
    );
    cluster.block_on(cluster.admin(leader).put_tenant("audited"))?;
    assert_eq!(
        admin_changes(&audit_log(&cluster, leader), target),
        ["requested", "created", "requested", "unchanged"]
    );

    // A log that takes nothing refuses the change before it is proposed.
    cluster
        .node(leader)
        .audit
        .inject_write_failure("the disk is full");
    let refused = cluster.block_on(cluster.admin(leader).put_tenant("unaudited"));
    assert!(refused.is_err(), "a change went through unaudited");
    grace();
    assert!(!cluster.has_tenant(leader, "unaudited"));
    Ok(())
}
