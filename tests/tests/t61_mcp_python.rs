//! The MCP front with the official Python SDK's client at its default settings (the plain MCP
//! client of the issue): it lists, calls, and finishes a destructive call by polling
//! `gatehouse.call_status` while an approver acts over gRPC. Skips, saying so, without python3.

use gatehouse_registry::CallState;
use gatehouse_testkit::python::PythonClient;
use gatehouse_tests::mcp_fixture::{ACME, BOT, ECHO, ECHO_CONTEXT, GINA, McpFixture, TRANSFER};
use serde_json::{Value, json};

fn names(listed: &Value) -> Vec<&str> {
    listed["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {listed}"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn the_sdk_lists_each_tenant_its_own_tools() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let Some(bot) = PythonClient::new(&fixture.url(), Some(BOT)) else {
        return Ok(());
    };
    let listed = bot.list_tools()?;
    let tools = names(&listed);
    for tool in [ECHO, TRANSFER, "gatehouse.call_status"] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }
    let gina = PythonClient::new(&fixture.url(), Some(GINA)).expect("python");
    let listed = gina.list_tools()?;
    let theirs = names(&listed);
    assert!(theirs.contains(&"other.echo"), "{theirs:?}");
    assert!(!theirs.iter().any(|t| t.starts_with("demo.")), "{theirs:?}");
    Ok(())
}

#[test]
fn the_sdk_calls_echo_and_sees_the_context_the_upstream_got() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    // Both revisions: the 2025-11-25 handshake, and the SDK's default (2026-07-28 when the
    // server offers it).
    for mode in ["legacy", "auto"] {
        let Some(bot) = PythonClient::new(&fixture.url(), Some(BOT)) else {
            return Ok(());
        };
        let seen = bot.mode(mode).call(ECHO, &json!({"text": "from python"}))?;
        let result = &seen["result"];
        assert_eq!(result["isError"], false, "{mode}: {seen}");
        assert_eq!(result["structuredContent"]["skill_context"], ECHO_CONTEXT);
        assert_eq!(result["content"][0]["text"], "from python");
        assert!(
            result["_meta"]["dev.gatehouse/call-id"].is_string(),
            "{seen}"
        );
    }
    let calls = fixture.upstream.calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls
            .iter()
            .all(|c| c.skill_context() == Some(ECHO_CONTEXT))
    );
    Ok(())
}

#[test]
fn a_plain_client_finishes_a_destructive_call_by_polling_call_status() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let Some(bot) = PythonClient::new(&fixture.url(), Some(BOT)) else {
        return Ok(());
    };
    let args = json!({"from": "a", "to": "b", "amount": 12});
    let running = bot.deadline(60.0).call_and_poll(TRANSFER, &args)?;
    let call_id = fixture.wait_for_call(TRANSFER, CallState::Pending)?;
    assert!(
        fixture.upstream.transfers().is_empty(),
        "nothing runs before the approval"
    );
    fixture.approve(&call_id)?;
    let seen = running.finish()?;

    let pending = &seen["pending"];
    assert_eq!(pending["code"], "approval_pending", "{seen}");
    assert_eq!(pending["call_id"], call_id.as_str());
    assert!(pending["expires_at"].is_string(), "{seen}");
    assert_eq!(seen["final"], true, "{seen}");
    assert!(seen["polls"].as_u64() >= Some(1));
    let result = &seen["result"];
    assert_eq!(result["isError"], false, "{seen}");
    assert_eq!(result["structuredContent"]["transfer"], 1);
    assert_eq!(result["_meta"]["dev.gatehouse/call-id"], call_id.as_str());
    assert_eq!(fixture.upstream.transfers(), vec![args], "it ran once");
    Ok(())
}

#[test]
fn a_plain_client_sees_a_rejected_call_end_as_an_error() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let Some(bot) = PythonClient::new(&fixture.url(), Some(BOT)) else {
        return Ok(());
    };
    let running = bot
        .deadline(60.0)
        .call_and_poll(TRANSFER, &json!({"from": "a", "to": "b", "amount": 3}))?;
    let call_id = fixture.wait_for_call(TRANSFER, CallState::Pending)?;
    fixture.reject(&call_id, "no")?;
    let seen = running.finish()?;
    assert_eq!(seen["final"], true, "{seen}");
    let result = &seen["result"];
    assert_eq!(result["isError"], true, "{seen}");
    assert_eq!(result["structuredContent"]["error"]["code"], "rejected");
    assert!(fixture.upstream.transfers().is_empty());
    Ok(())
}

#[test]
fn the_sdk_gets_the_right_refusals() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let Some(bot) = PythonClient::new(&fixture.url(), Some(BOT)) else {
        return Ok(());
    };
    let unknown = bot.call("demo.nope", &json!({}))?;
    assert_eq!(
        unknown["result"]["structuredContent"]["error"]["code"], "unknown_tool",
        "{unknown}"
    );
    let bad = bot.call(TRANSFER, &json!({"from": "a"}))?;
    assert_eq!(
        bad["result"]["structuredContent"]["error"]["code"], "invalid_arguments",
        "{bad}"
    );
    // Another tenant's agent: the tool is not there for it.
    let gina = PythonClient::new(&fixture.url(), Some(GINA)).expect("python");
    let foreign = gina.call(ECHO, &json!({"text": "x"}))?;
    assert_eq!(
        foreign["result"]["structuredContent"]["error"]["code"], "unknown_tool",
        "{foreign}"
    );
    // No key: the SDK cannot even start; the HTTP status says why.
    let anonymous = PythonClient::new(&fixture.url(), None).expect("python");
    let refused = anonymous.list_tools()?;
    assert!(refused["exception"].is_object(), "{refused}");
    assert!(refused["tools"].is_null());
    assert_eq!(refused["http_errors"][0], 401, "{refused}");

    assert!(fixture.upstream.calls().is_empty());
    let audited = fixture.audited_calls(ACME, "demo.nope")?;
    assert!(
        audited
            .iter()
            .any(|r| r.entry.outcome == "refused:unknown_tool"),
        "{audited:?}"
    );
    Ok(())
}
