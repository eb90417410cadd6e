//! The Python SDK's client (tests/python/mcp_client.py) against the test MCP upstream, so the
//! interoperability tests know the client itself is right before they point it at the gateway.

use gatehouse_testkit::python::PythonClient;
use gatehouse_tests::McpUpstream;
use serde_json::json;

#[test]
fn lists_and_calls_in_both_revisions() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    for (mode, version) in [("auto", "2026-07-28"), ("legacy", "2025-11-25")] {
        let Some(client) = PythonClient::new(&upstream.url(), Some("k")) else {
            return Ok(());
        };
        let client = client.mode(mode);
        let listed = client.list_tools()?;
        assert_eq!(listed["protocol_version"], version, "{mode}: {listed}");
        let mut tools: Vec<&str> = listed["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{mode}: {listed}"))
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        tools.sort_unstable();
        assert_eq!(tools, ["add", "echo", "transfer"], "{mode}");

        let echoed = client.call("echo", &json!({"text": "hi"}))?;
        let result = &echoed["result"];
        assert_eq!(result["isError"], false, "{mode}: {echoed}");
        assert_eq!(result["structuredContent"]["text"], "hi", "{mode}");
        assert_eq!(result["content"][0]["text"], "hi", "{mode}");
    }
    assert_eq!(upstream.count_for("echo"), 2);
    let calls = upstream.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.authorization.as_deref() == Some("Bearer k"))
    );
    Ok(())
}

#[test]
fn a_json_rpc_error_and_an_error_result_are_told_apart() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let Some(client) = PythonClient::new(&upstream.url(), None) else {
        return Ok(());
    };
    let unknown = client.call("nope", &json!({}))?;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(unknown.get("result").is_none());

    upstream.fail("transfer", "bank closed");
    let failed = client.call("transfer", &json!({"from": "a", "to": "b", "amount": 1}))?;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert_eq!(failed["result"]["content"][0]["text"], "bank closed");
    Ok(())
}

#[test]
fn call_and_poll_returns_at_once_when_nothing_is_pending() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let Some(client) = PythonClient::new(&upstream.url(), None) else {
        return Ok(());
    };
    let done = client
        .call_and_poll("add", &json!({"a": 1, "b": 2}))?
        .finish()?;
    assert_eq!(done["polls"], 0, "{done}");
    assert!(done["pending"].is_null());
    assert_eq!(done["result"]["structuredContent"]["sum"], 3.0);
    Ok(())
}

#[test]
fn an_unreachable_endpoint_is_reported_as_an_exception() -> anyhow::Result<()> {
    let Some(client) = PythonClient::new("http://127.0.0.1:9/mcp", None) else {
        return Ok(());
    };
    let seen = client.list_tools()?;
    assert!(seen["exception"]["type"].is_string(), "{seen}");
    Ok(())
}
