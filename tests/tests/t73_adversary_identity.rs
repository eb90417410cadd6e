//! Adversaries of the identity model (docs/security.md): approvers who are the call's own user
//! under another name, one person holding two approver keys, end users behind one shared JWT
//! principal, an idempotency key reused for another tool, and an untrusted upstream claiming its
//! destructive tool is idempotent. Each attack runs against real nodes over gRPC and MCP and must
//! fail with a typed error and no state change: the call's record, the upstream's log.

use gatehouse_gateway::auth::JwtIssuerConfig;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::CallState;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::flow::{
    self, ACME, Approvals, BOT, CAROL, DAVE, DROP_TABLE, Flow, approvals, approve, call_tool,
    call_tool_keyed, gateway, grace, propose, wait_state,
};
use gatehouse_tests::mcp_wire::RawMcp;
use gatehouse_tests::{NodeOptions, TestCluster};
use serde_json::{Value, json};
use std::time::Duration;
use tonic::Code;

const ISSUER: &str = "https://id.acme.example";
const SECRET: &[u8] = b"t73-a-shared-secret-of-at-least-32-bytes";
const WAIT: Duration = Duration::from_secs(20);

const DANA_APPROVER: &str = "gate_t73-dana-00000000000000000000000000";
const DANA_AGENT: &str = "gate_t73-dana-agent-000000000000000000000";
const ALICE_LAPTOP: &str = "gate_t73-alice-laptop-00000000000000000000";
const ALICE_CI: &str = "gate_t73-alice-ci-0000000000000000000000";

fn apply(cluster: &TestCluster, resources: Vec<pb::Resource>) {
    let leader = cluster.leader(WAIT).unwrap();
    let index = cluster
        .block_on(cluster.admin(leader).apply(resources))
        .unwrap();
    cluster.wait_converged(index, WAIT).unwrap();
}

fn state(cluster: &TestCluster, call_id: &str) -> CallState {
    flow::record(cluster, call_id)
        .expect("the call exists")
        .state
}

/// One node that also takes HS256 tokens of `ISSUER`, with the flow fixture.
fn jwt_cluster() -> (TestCluster, Flow, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("hs256.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let issuer = JwtIssuerConfig {
        issuer: ISSUER.into(),
        audience: Some("gatehouse".into()),
        algorithms: vec!["HS256".into()],
        hs256_secret_file: Some(secret),
        leeway_secs: 30,
        ..Default::default()
    };
    let options = NodeOptions {
        jwt: vec![issuer],
        ..NodeOptions::default()
    };
    let cluster = TestCluster::with_options(&[1], options).unwrap();
    let flow = Flow::setup(&cluster).unwrap();
    (cluster, flow, dir)
}

fn token(sub: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims =
        json!({"iss": ISSUER, "sub": sub, "aud": "gatehouse", "iat": now, "exp": now + 600});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

fn issuer_wide(name: &str, roles: Value) -> pb::Resource {
    resource(
        "Principal",
        name,
        None,
        json!({"jwt": {"issuer": ISSUER, "subject": "*"}, "roles": roles}),
    )
}

fn drop_args(n: u64) -> Value {
    json!({"table": "orders", "n": n})
}

#[test]
fn an_approver_named_like_the_end_user_cannot_approve_the_users_call() {
    let (cluster, flow) = flow::start_one(Approvals::default()).unwrap();
    apply(
        &cluster,
        vec![
            principal("dana", DANA_APPROVER, json!({ACME: ["approver"]}), None),
            principal(
                "dana-bot",
                DANA_AGENT,
                json!({ACME: ["agent"]}),
                Some("dana"),
            ),
        ],
    );
    let envelope = call_tool(&cluster, 1, DANA_AGENT, ACME, DROP_TABLE, &drop_args(1)).unwrap();
    assert_eq!(envelope.state, pb::CallState::Pending as i32);

    let refused = approve(&cluster, 1, DANA_APPROVER, &envelope.call_id).unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    grace();
    assert_eq!(state(&cluster, &envelope.call_id), CallState::Pending);
    assert_eq!(flow.upstream.executions(), 0);
}

#[test]
fn two_approver_keys_of_one_person_do_not_make_two_approvals() {
    let (cluster, flow) = flow::start_one(Approvals {
        required: 2,
        ttl_seconds: None,
    })
    .unwrap();
    apply(
        &cluster,
        vec![
            principal(
                "alice-laptop",
                ALICE_LAPTOP,
                json!({ACME: ["approver"]}),
                Some("alice"),
            ),
            principal(
                "alice-ci",
                ALICE_CI,
                json!({ACME: ["approver"]}),
                Some("alice"),
            ),
        ],
    );
    let id = propose(&cluster, 1, DROP_TABLE, &drop_args(2)).unwrap();
    approve(&cluster, 1, ALICE_LAPTOP, &id).unwrap();
    let twice = approve(&cluster, 1, ALICE_CI, &id).unwrap_err();
    assert_eq!(twice.code(), Code::AlreadyExists, "{twice:?}");
    assert!(twice.message().contains("alice"), "{}", twice.message());
    grace();
    let record = flow::record(&cluster, &id).unwrap();
    assert_eq!(record.state, CallState::Pending);
    assert_eq!(record.approvals.len(), 1);
    assert_eq!(record.approvals[0].person(), "alice");
    assert_eq!(flow.upstream.executions(), 0);

    // A second person completes it, and it runs once.
    approve(&cluster, 1, CAROL, &id).unwrap();
    wait_state(&cluster, &id, CallState::Succeeded, WAIT).unwrap();
    assert_eq!(flow.upstream.count_for(&id), 1);
}

#[test]
fn end_users_behind_one_jwt_principal_cannot_reach_each_others_calls() {
    let (cluster, flow, _dir) = jwt_cluster();
    apply(
        &cluster,
        vec![issuer_wide("staff", json!({ACME: ["agent"]}))],
    );
    let (alice, bob) = (token("alice"), token("bob"));

    let key = "alice-pays-once";
    let alices_call = || {
        call_tool_keyed(
            &cluster,
            1,
            &alice,
            ACME,
            DROP_TABLE,
            &drop_args(3),
            Some(key),
        )
        .unwrap()
    };
    let hers = alices_call();
    assert_eq!(hers.state, pb::CallState::Pending as i32);

    // gRPC: bob cannot read it, cancel it, or get it back with her key.
    let mut bobs_gateway = gateway(&cluster, 1, &bob);
    let read = cluster
        .block_on(bobs_gateway.get_call(pb::GetCallRequest {
            call_id: hers.call_id.clone(),
        }))
        .unwrap_err();
    assert_eq!(read.code(), Code::NotFound, "{read:?}");
    let mut bobs_approvals = approvals(&cluster, 1, &bob);
    let cancel = cluster
        .block_on(bobs_approvals.cancel(pb::CancelCallRequest {
            call_id: hers.call_id.clone(),
            reason: "mine now".into(),
        }))
        .unwrap_err();
    assert_eq!(cancel.code(), Code::NotFound, "{cancel:?}");
    let his = call_tool_keyed(
        &cluster,
        1,
        &bob,
        ACME,
        DROP_TABLE,
        &drop_args(3),
        Some(key),
    )
    .unwrap();
    assert_ne!(his.call_id, hers.call_id, "bob got alice's call by her key");

    // MCP: the same through call_status, the call resource and tasks/cancel.
    let url = format!("http://{}/mcp", cluster.node(1).http_addr);
    let mcp = RawMcp::new(&url, Some(&bob));
    let status = cluster
        .block_on(mcp.call_tool(
            "gatehouse.call_status",
            json!({"call_id": hers.call_id.clone()}),
        ))
        .unwrap();
    let result = status.result().unwrap();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["error"]["code"], "not_found");
    let resource = cluster
        .block_on(mcp.request(
            "resources/read",
            json!({"uri": format!("gatehouse://calls/{}", hers.call_id)}),
        ))
        .unwrap();
    assert!(resource.error_code().is_some(), "{resource:?}");
    let cancel = cluster
        .block_on(mcp.request("tasks/cancel", json!({"taskId": hers.call_id.clone()})))
        .unwrap();
    assert!(cancel.error_code().is_some(), "{cancel:?}");

    grace();
    assert_eq!(state(&cluster, &hers.call_id), CallState::Pending);
    // Alice herself still reads and cancels her own call.
    let mine = alices_call();
    assert_eq!(mine.call_id, hers.call_id);
    let mut her_approvals = approvals(&cluster, 1, &alice);
    cluster
        .block_on(her_approvals.cancel(pb::CancelCallRequest {
            call_id: hers.call_id.clone(),
            reason: "changed my mind".into(),
        }))
        .unwrap();
    assert_eq!(state(&cluster, &hers.call_id), CallState::Cancelled);
    assert_eq!(flow.upstream.executions(), 0);
}

#[test]
fn a_jwt_approver_approves_over_grpc_as_the_person_it_names() {
    let (cluster, flow, _dir) = jwt_cluster();
    apply(
        &cluster,
        vec![issuer_wide("reviewers", json!({ACME: ["approver"]}))],
    );
    let id = propose(&cluster, 1, DROP_TABLE, &drop_args(4)).unwrap();
    // The call is bot's for john: john, signing in through the issuer, is in its chain.
    let john = approve(&cluster, 1, &token("john"), &id).unwrap_err();
    assert_eq!(john.code(), Code::PermissionDenied, "{john:?}");
    let record = approve(&cluster, 1, &token("erin"), &id).unwrap();
    assert_eq!(record.approvals.len(), 1);
    assert_eq!(record.approvals[0].principal, "reviewers");
    assert_eq!(record.approvals[0].person, "erin");
    wait_state(&cluster, &id, CallState::Succeeded, WAIT).unwrap();
    assert_eq!(flow.upstream.count_for(&id), 1);
}

#[test]
fn an_idempotency_key_cannot_fetch_another_tools_call() {
    let (cluster, flow) = flow::start_one(Approvals::default()).unwrap();
    // Arguments both tools take, so that only the tool differs.
    let args = json!({"flag": "orders", "table": "orders"});
    let first = call_tool_keyed(&cluster, 1, BOT, ACME, flow::SET_FLAG, &args, Some("k7")).unwrap();
    assert_eq!(first.state, pb::CallState::Pending as i32);
    let refused =
        call_tool_keyed(&cluster, 1, BOT, ACME, DROP_TABLE, &args, Some("k7")).unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert!(
        refused.message().contains("idempotency key"),
        "{}",
        refused.message()
    );
    let registry = cluster.node(1).cluster.registry.read();
    let calls: Vec<&str> = registry
        .calls_of(ACME)
        .map(|c| c.spec.tool.as_str())
        .collect();
    assert_eq!(calls, [flow::SET_FLAG], "a second call was recorded");
    drop(registry);
    assert_eq!(flow.upstream.executions(), 0);
}

#[test]
fn an_untrusted_upstreams_idempotent_hint_never_lets_a_call_run_twice() {
    let (mut cluster, flow) = flow::start(Approvals::default()).unwrap();
    // An admin writes the tool from what the untrusted upstream advertises: destructive, and
    // "idempotent". Only the admin's own `idempotent` or a trusted upstream could say so.
    apply(
        &cluster,
        vec![resource(
            "Tool",
            "ops.pay",
            Some(ACME),
            json!({
                "inputSchema": {"type": "object"},
                "annotations": {"idempotentHint": true, "destructiveHint": true},
                "approvalMode": "destructive",
            }),
        )],
    );
    let roles = flow::roles(&cluster).unwrap();
    flow.upstream.hold("pay");
    let id = propose(&cluster, roles.follower, "ops.pay", &json!({"amount": 5})).unwrap();
    assert!(!flow::record(&cluster, &id).unwrap().spec.retry_safe);
    approve(&cluster, roles.follower, DAVE, &id).unwrap();
    flow::wait_invoked(&flow, &id, 1, WAIT).unwrap();

    cluster.kill(roles.home);
    flow.upstream.release("pay");
    wait_state(
        &cluster,
        &id,
        CallState::OutcomeUnknown,
        Duration::from_secs(30),
    )
    .unwrap();
    grace();
    assert_eq!(
        flow.upstream.count_for(&id),
        1,
        "the payment was sent twice"
    );
}
