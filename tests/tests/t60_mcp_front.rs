//! The MCP front against a real MCP upstream: rmcp's client (and raw JSON-RPC for what a broken
//! client sends) through a node's `/mcp` to an rmcp server, approvals over gRPC, and the node's
//! audit log read back. What the upstream received is checked at the upstream.

use gatehouse_registry::CallState;
use gatehouse_tests::mcp_fixture::{
    ACME, ADD, BOT, ECHO, ECHO_CONTEXT, GINA, McpFixture, SETTLE, TRANSFER,
};
use gatehouse_tests::mcp_wire::RawMcp;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::time::Instant;

type Client = RunningService<RoleClient, ClientConfig>;

fn client(fixture: &McpFixture, key: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(fixture.url()).auth_header(key);
    // The transport spawns its worker: it is made on the runtime that drives it.
    fixture
        .cluster
        .block_on(async {
            let transport = StreamableHttpClientTransport::from_config(config);
            ClientConfig::default().serve(transport).await
        })
        .expect("an MCP session with the gateway")
}

fn call(fixture: &McpFixture, client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    fixture
        .cluster
        .block_on(client.call_tool(request))
        .unwrap_or_else(|e| panic!("calling {tool}: {e}"))
}

fn names(fixture: &McpFixture, client: &Client) -> Vec<String> {
    let tools = fixture
        .cluster
        .block_on(client.list_all_tools())
        .expect("tools/list");
    tools.into_iter().map(|t| t.name.into_owned()).collect()
}

fn error_of(result: &CallToolResult) -> &Value {
    assert_eq!(result.is_error, Some(true), "an error result: {result:?}");
    &result
        .structured_content
        .as_ref()
        .expect("an error result's structured content")["error"]
}

fn meta_of<'a>(result: &'a CallToolResult, key: &str) -> Option<&'a Value> {
    result.meta.as_ref().and_then(|m| m.get(key))
}

/// Polls `gatehouse.call_status` (each poll waiting up to two seconds) until the call is final.
fn settle(fixture: &McpFixture, client: &Client, call_id: &str) -> CallToolResult {
    let deadline = Instant::now() + SETTLE;
    loop {
        let status = call(
            fixture,
            client,
            "gatehouse.call_status",
            json!({"call_id": call_id, "wait_ms": 2000}),
        );
        let state = status
            .structured_content
            .as_ref()
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str);
        if !matches!(state, Some("pending" | "approved" | "executing")) {
            return status;
        }
        assert!(Instant::now() < deadline, "call {call_id} never settled");
    }
}

#[test]
fn tools_list_shows_each_tenant_its_own_upstreams_tools() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let bot = client(&fixture, BOT);
    let listed = names(&fixture, &bot);
    for tool in [ECHO, TRANSFER, ADD, "gatehouse.call_status"] {
        assert!(listed.iter().any(|n| n == tool), "{tool} in {listed:?}");
    }
    assert!(
        !listed.iter().any(|n| n.starts_with("other.")),
        "acme sees none of globex's tools: {listed:?}"
    );
    // The upstream's annotations come through unchanged for a trusted upstream.
    let tools = fixture.cluster.block_on(bot.list_all_tools())?;
    let transfer = tools.iter().find(|t| t.name == TRANSFER).unwrap();
    let hints = serde_json::to_value(transfer.annotations.as_ref().unwrap())?;
    assert_eq!(hints["destructiveHint"], true);

    let gina = client(&fixture, GINA);
    let theirs = names(&fixture, &gina);
    assert!(theirs.iter().any(|n| n == "other.echo"), "{theirs:?}");
    assert!(
        !theirs.iter().any(|n| n.starts_with("demo.")),
        "globex sees none of acme's tools: {theirs:?}"
    );
    assert_eq!(
        fixture.upstream.calls().len(),
        0,
        "listing calls no upstream tool"
    );
    Ok(())
}

#[test]
fn echo_reaches_the_upstream_with_the_resolved_skill_context() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let bot = client(&fixture, BOT);
    let result = call(&fixture, &bot, ECHO, json!({"text": "hello"}));
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let seen = result
        .structured_content
        .as_ref()
        .expect("echo's structure");
    assert_eq!(seen["text"], "hello");
    assert_eq!(seen["skill_context"], ECHO_CONTEXT);
    let call_id = meta_of(&result, "dev.gatehouse/call-id")
        .and_then(Value::as_str)
        .expect("the envelope's call id")
        .to_owned();
    assert_eq!(
        meta_of(&result, "dev.gatehouse/effective-mode"),
        Some(&json!("read_only"))
    );

    let calls = fixture.upstream.calls();
    assert_eq!(calls.len(), 1, "one call reached the upstream");
    assert_eq!(calls[0].tool, "echo", "the upstream's own name for it");
    assert_eq!(calls[0].arguments, json!({"text": "hello"}));
    assert_eq!(calls[0].skill_context(), Some(ECHO_CONTEXT));
    // W3C trace context goes along, naming the call's trace.
    let trace_id = meta_of(&result, "dev.gatehouse/trace-id")
        .and_then(Value::as_str)
        .expect("a trace id");
    let traceparent = calls[0].traceparent().expect("a traceparent in _meta");
    assert!(
        traceparent.contains(trace_id),
        "{traceparent} names {trace_id}"
    );

    // The upstream request was recorded before it was made, the call's outcome after.
    let audited = fixture.audited_calls(ACME, ECHO)?;
    let outcomes: Vec<(&str, Option<&str>)> = audited
        .iter()
        .filter(|r| r.entry.call_id.as_deref() == Some(call_id.as_str()))
        .map(|r| (r.entry.outcome.as_str(), r.entry.mode.as_deref()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("started", Some("read_only")),
            ("succeeded", Some("read_only"))
        ]
    );
    Ok(())
}

#[test]
fn a_destructive_call_runs_once_and_only_after_an_approval_over_grpc() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let bot = client(&fixture, BOT);
    let args = json!({"from": "a", "to": "b", "amount": 5});
    let pending = call(&fixture, &bot, TRANSFER, args.clone());
    let error = error_of(&pending);
    assert_eq!(error["code"], "approval_pending");
    assert!(error["expires_at"].is_string(), "{error}");
    let call_id = error["call_id"].as_str().expect("a call id").to_owned();
    assert!(
        fixture.upstream.transfers().is_empty(),
        "nothing runs before the approval"
    );
    assert_eq!(fixture.upstream.count_for("transfer"), 0);

    fixture.approve(&call_id)?;
    let done = settle(&fixture, &bot, &call_id);
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(done.structured_content.as_ref().unwrap()["transfer"], 1);
    assert_eq!(fixture.upstream.transfers(), vec![args]);

    // Asking again reads the recorded result: the upstream is not called again.
    let again = call(
        &fixture,
        &bot,
        "gatehouse.call_status",
        json!({"call_id": call_id}),
    );
    assert_eq!(again.structured_content, done.structured_content);
    assert_eq!(fixture.upstream.count_for("transfer"), 1);

    let outcomes: Vec<String> = fixture
        .audited_calls(ACME, TRANSFER)?
        .into_iter()
        .filter(|r| r.entry.call_id.as_deref() == Some(call_id.as_str()))
        .map(|r| r.entry.outcome)
        .collect();
    assert!(
        outcomes.iter().any(|o| o == "pending") && outcomes.iter().any(|o| o == "succeeded"),
        "the proposal and the execution are audited: {outcomes:?}"
    );
    Ok(())
}

#[test]
fn a_rejected_call_ends_as_an_error_and_never_runs() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let bot = client(&fixture, BOT);
    let pending = call(
        &fixture,
        &bot,
        TRANSFER,
        json!({"from": "a", "to": "b", "amount": 7}),
    );
    let call_id = error_of(&pending)["call_id"].as_str().unwrap().to_owned();
    fixture.reject(&call_id, "not today")?;
    let done = settle(&fixture, &bot, &call_id);
    let error = error_of(&done);
    assert_eq!(error["code"], "rejected");
    assert!(
        error["message"].as_str().unwrap().contains("not today"),
        "{error}"
    );
    assert!(fixture.upstream.transfers().is_empty());
    assert_eq!(fixture.upstream.count_for("transfer"), 0);
    Ok(())
}

#[test]
fn another_tenants_key_sees_none_of_the_tools_and_finds_none_of_the_calls() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let bot = client(&fixture, BOT);
    let pending = call(
        &fixture,
        &bot,
        TRANSFER,
        json!({"from": "a", "to": "b", "amount": 1}),
    );
    let call_id = error_of(&pending)["call_id"].as_str().unwrap().to_owned();

    let gina = client(&fixture, GINA);
    let foreign = call(&fixture, &gina, ECHO, json!({"text": "hi"}));
    assert_eq!(error_of(&foreign)["code"], "unknown_tool");
    let theirs = call(
        &fixture,
        &gina,
        "gatehouse.call_status",
        json!({"call_id": call_id}),
    );
    assert_eq!(error_of(&theirs)["code"], "not_found");
    assert_eq!(
        fixture.upstream.count_for("echo"),
        0,
        "gina's call reached no upstream"
    );
    // Still pending for acme: gina's look changed nothing.
    assert_eq!(
        fixture.wait_for_call(TRANSFER, CallState::Pending)?,
        call_id
    );
    Ok(())
}

#[test]
fn refusals_each_get_their_error_and_calls_an_audit_record() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let raw = RawMcp::new(&fixture.url(), Some(BOT));
    fixture.cluster.block_on(async {
        // Bytes that are not JSON.
        let broken = raw
            .post("tools/call", Some(ECHO), b"{not json".to_vec(), true)
            .await?;
        assert_eq!(broken.status, 400, "{}", broken.text);
        assert_eq!(broken.error_code(), Some(-32700));
        // JSON that is not JSON-RPC.
        let body = json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list"});
        let wrong = raw
            .post("tools/list", None, body.to_string().into_bytes(), true)
            .await?;
        assert_eq!(wrong.error_code(), Some(-32600), "{}", wrong.text);

        // An unknown tool and bad arguments: error results an agent can branch on.
        let unknown = raw.call_tool("demo.nope", json!({})).await?;
        let result = unknown.result()?;
        assert_eq!(result["isError"], true, "{}", unknown.text);
        assert_eq!(result["structuredContent"]["error"]["code"], "unknown_tool");
        let bad = raw.call_tool(ADD, json!({"a": "one", "b": 2})).await?;
        let result = bad.result()?;
        assert_eq!(result["isError"], true, "{}", bad.text);
        assert_eq!(
            result["structuredContent"]["error"]["code"],
            "invalid_arguments"
        );

        // A body over the limit (1 MiB by default) is refused by its declared length.
        assert_eq!(raw.declared_length_status(2 << 20).await?, 413);

        // No key: 401, and no JSON-RPC answer.
        let body = raw.body("tools/list", json!({}));
        let anonymous = raw
            .post("tools/list", None, body.to_string().into_bytes(), false)
            .await?;
        assert_eq!(anonymous.status, 401, "{}", anonymous.text);
        anyhow::Ok(())
    })?;
    assert!(
        fixture.upstream.calls().is_empty(),
        "no refused call reached the upstream: {:?}",
        fixture.upstream.calls()
    );

    let unknown = fixture.audited_calls(ACME, "demo.nope")?;
    assert!(
        unknown
            .iter()
            .any(|r| r.entry.outcome == "refused:unknown_tool"),
        "{unknown:?}"
    );
    let bad = fixture.audited_calls(ACME, ADD)?;
    assert!(
        bad.iter()
            .any(|r| r.entry.outcome == "refused:invalid_arguments"),
        "{bad:?}"
    );
    Ok(())
}

#[test]
fn raw_stateless_requests_and_rmcps_client_get_the_same_answer() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let raw = RawMcp::new(&fixture.url(), Some(BOT));
    let stateless = fixture
        .cluster
        .block_on(raw.call_tool(ADD, json!({"a": 2, "b": 3})))?;
    let result = stateless.result()?;
    assert_eq!(
        result["structuredContent"]["sum"], 5.0,
        "{}",
        stateless.text
    );

    let bot = client(&fixture, BOT);
    let session = call(&fixture, &bot, ADD, json!({"a": 2, "b": 3}));
    assert_eq!(session.structured_content, Some(json!({"sum": 5.0})));
    assert_eq!(fixture.upstream.count_for("add"), 2);
    Ok(())
}
