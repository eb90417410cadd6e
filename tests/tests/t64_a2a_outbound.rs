//! Outbound A2A: a tool whose upstream is of kind `a2a` runs as a task of a remote agent. The
//! agent here is the same node's own A2A front, serving another tenant: tenant `front` has the
//! upstream `partner` pointing at the node's HTTP address with the API key of `partner-peer`, an
//! agent of tenant `back`, whose built-in `demo.echo` is what `partner.demo.echo` reaches. The
//! upstream `hurried` is the same agent with a short timeout, for a remote task that waits for
//! back's approvers longer than that.

use gatehouse_cluster::grants::BuiltinTool;
use gatehouse_cluster::grants::{CredentialSource, Grants};
use gatehouse_proto::v1 as pb;
use gatehouse_registry::CallState;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::TestCluster;
use gatehouse_tests::flow::call_tool;
use serde_json::{Value, json};
use std::time::Duration;

const BACK: &str = "back";
const FRONT: &str = "front";

const PEER: &str = "gate_a2a-partner-peer-0000000000000000";
const FRONT_BOT: &str = "gate_a2a-front-bot-0000000000000000000";

const SETTLE: Duration = Duration::from_secs(30);

/// An agent of `tenant` who signs in with `key`.
fn agent(name: &str, key: &str, tenant: &str) -> pb::Resource {
    principal(name, key, json!({tenant: ["agent"]}), None)
}

fn tool(name: &str, tenant: &str, description: &str) -> pb::Resource {
    tool_in_mode(name, tenant, description, "read_only")
}

fn tool_in_mode(name: &str, tenant: &str, description: &str, mode: &str) -> pb::Resource {
    resource(
        "Tool",
        name,
        Some(tenant),
        json!({
            "description": description,
            "approvalMode": mode,
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
        }),
    )
}

/// The operator's credential holding partner-peer's key, granted to front.
const PEER_CREDENTIAL: &str = "partner-peer";

fn resources(node_url: &str) -> Vec<pb::Resource> {
    vec![
        resource("Tenant", BACK, None, json!({})),
        resource("Tenant", FRONT, None, json!({})),
        agent("partner-peer", PEER, BACK),
        agent("front-bot", FRONT_BOT, FRONT),
        resource("Upstream", "demo", Some(BACK), json!({"type": "builtin"})),
        tool("demo.echo", BACK, "Answers with its text."),
        tool_in_mode("demo.fail", BACK, "Needs back's approvers.", "destructive"),
        resource(
            "Upstream",
            "partner",
            Some(FRONT),
            json!({
                "type": "a2a",
                "url": node_url,
                "credential": PEER_CREDENTIAL,
                "timeoutMs": 20_000,
            }),
        ),
        tool("partner.demo.echo", FRONT, "back's echo, reached over A2A."),
        tool(
            "partner.demo.nope",
            FRONT,
            "A tool the partner does not have.",
        ),
        resource(
            "Upstream",
            "hurried",
            Some(FRONT),
            json!({
                "type": "a2a",
                "url": node_url,
                "credential": PEER_CREDENTIAL,
                "timeoutMs": 1_500,
            }),
        ),
        tool(
            "hurried.demo.fail",
            FRONT,
            "back's fail tool, which waits for back's approvers.",
        ),
    ]
}

/// A one-node cluster with both tenants applied and placed: back's built-in echo and fail are
/// enabled, and the operator's credential file with partner-peer's key is granted to front. The
/// directory holding that file lives as long as the cluster is used.
fn start() -> anyhow::Result<(TestCluster, tempfile::TempDir)> {
    let secrets = tempfile::tempdir()?;
    let credential = secrets.path().join("partner-peer.key");
    std::fs::write(&credential, format!("{PEER}\n"))?;
    let grants = Grants::default()
        .with_builtins(BACK, [BuiltinTool::Echo, BuiltinTool::Fail])
        .with_credential(
            PEER_CREDENTIAL,
            CredentialSource::File(credential),
            &[FRONT],
        );
    let cluster = TestCluster::with_grants(&[1], grants)?;
    let node_url = format!("http://{}", cluster.node(1).http_addr);
    let index = cluster.block_on(cluster.admin(1).apply(resources(&node_url)))?;
    cluster.wait_for_applied(1, index, SETTLE)?;
    cluster.wait_all_placed(SETTLE)?;
    Ok((cluster, secrets))
}

#[test]
fn a_tool_of_an_a2a_upstream_runs_as_a_task_of_the_remote_agent() -> anyhow::Result<()> {
    let (cluster, _secrets) = start()?;

    let envelope = call_tool(
        &cluster,
        1,
        FRONT_BOT,
        FRONT,
        "partner.demo.echo",
        &json!({"text": "hello over a2a"}),
    )?;
    assert_eq!(
        envelope.state,
        pb::CallState::Succeeded as i32,
        "{envelope:?}"
    );
    assert!(!envelope.is_error, "{envelope:?}");
    let result: Value = serde_json::from_str(envelope.result_json.as_deref().unwrap_or("null"))?;
    // back's built-in echo answered, and its CallToolResult came back as it was.
    assert_eq!(result["content"][0]["text"], json!("hello over a2a"));
    assert_eq!(result["structuredContent"]["text"], json!("hello over a2a"));

    // The delegation happened: back holds the call, made by partner-peer as its A2A peer,
    // under the message id the front's call gave it.
    let registry = cluster.node(1).cluster.registry.read();
    let delegated: Vec<_> = registry
        .calls_of(BACK)
        .filter(|c| c.spec.tool == "demo.echo")
        .collect();
    assert_eq!(delegated.len(), 1, "{delegated:?}");
    let chain = &delegated[0].spec.chain;
    assert_eq!(chain.a2a_peer.as_deref(), Some("partner-peer"), "{chain:?}");
    assert_eq!(chain.agent, "partner-peer", "{chain:?}");
    assert_eq!(
        delegated[0].spec.idempotency_key.as_deref(),
        Some(format!("a2a:{}", envelope.call_id).as_str()),
    );
    Ok(())
}

#[test]
fn a_task_the_remote_agent_rejects_fails_the_call_naming_the_state() -> anyhow::Result<()> {
    let (cluster, _secrets) = start()?;

    let envelope = call_tool(
        &cluster,
        1,
        FRONT_BOT,
        FRONT,
        "partner.demo.nope",
        &json!({"text": "anyone?"}),
    )?;
    assert_eq!(envelope.state, pb::CallState::Failed as i32, "{envelope:?}");
    assert!(envelope.is_error, "{envelope:?}");
    let error = envelope.error.unwrap_or_default();
    assert!(error.contains("TASK_STATE_REJECTED"), "{error}");
    assert!(error.contains("partner"), "{error}");

    // Nothing ran in back.
    let registry = cluster.node(1).cluster.registry.read();
    assert_eq!(registry.calls_of(BACK).count(), 0);
    Ok(())
}

#[test]
fn a_remote_task_still_waiting_for_approval_at_the_timeout_is_cancelled() -> anyhow::Result<()> {
    let (cluster, _secrets) = start()?;

    let envelope = call_tool(
        &cluster,
        1,
        FRONT_BOT,
        FRONT,
        "hurried.demo.fail",
        &json!({"text": "later"}),
    )?;
    assert_eq!(envelope.state, pb::CallState::Failed as i32, "{envelope:?}");
    let error = envelope.error.unwrap_or_default();
    assert!(error.contains("TASK_STATE_AUTH_REQUIRED"), "{error}");
    assert!(error.contains("it was cancelled"), "{error}");

    // The remote call named in the error was cancelled, so no approval can run it now.
    let registry = cluster.node(1).cluster.registry.read();
    let waited: Vec<_> = registry
        .calls_of(BACK)
        .filter(|c| c.spec.tool == "demo.fail")
        .collect();
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert!(error.contains(&waited[0].spec.id.0), "{error}");
    assert_eq!(waited[0].state, CallState::Cancelled);
    Ok(())
}
