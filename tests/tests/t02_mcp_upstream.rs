//! The test MCP upstream, checked with rmcp's own client and with raw stateless requests before
//! the gateway relies on it.

use gatehouse_tests::McpUpstream;
use gatehouse_tests::mcp_wire::RawMcp;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject, RequestMetaObject};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

async fn rmcp_client(
    upstream: &McpUpstream,
) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(upstream.url()),
    );
    Ok(ClientConfig::default().serve(transport).await?)
}

#[tokio::test]
async fn lists_its_tools_with_their_annotations() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let client = rmcp_client(&upstream).await?;
    let tools = client.list_all_tools().await?;
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort_unstable();
    assert_eq!(names, ["add", "echo", "transfer"]);
    let hints = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(tool.annotations.as_ref().unwrap()).unwrap()
    };
    assert_eq!(hints("echo")["readOnlyHint"], true);
    assert_eq!(hints("transfer")["destructiveHint"], true);
    assert_eq!(hints("transfer")["readOnlyHint"], false);
    assert_eq!(hints("add")["idempotentHint"], true);
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn echo_answers_the_skill_context_and_trace_it_received() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let client = rmcp_client(&upstream).await?;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let meta = RequestMetaObject(rmcp::model::MetaObject(object(json!({
        "dev.gatehouse/skill-context": "Be brief.\nSay please.",
        "traceparent": traceparent,
    }))));
    let mut request =
        CallToolRequestParams::new("echo").with_arguments(object(json!({"text": "hello"})));
    request.meta = Some(meta);
    let result = client.call_tool(request).await?;
    assert_ne!(result.is_error, Some(true));
    let seen = result.structured_content.expect("structured content");
    assert_eq!(seen["text"], "hello");
    assert_eq!(seen["skill_context"], "Be brief.\nSay please.");
    assert_eq!(seen["traceparent"], traceparent);

    let calls = upstream.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].tool, "echo");
    assert_eq!(calls[0].arguments, json!({"text": "hello"}));
    assert_eq!(calls[0].skill_context(), Some("Be brief.\nSay please."));
    assert_eq!(calls[0].traceparent(), Some(traceparent));
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn transfer_records_one_side_effect_per_call_and_add_adds() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let client = rmcp_client(&upstream).await?;
    let args = json!({"from": "a", "to": "b", "amount": 5});
    let result = client
        .call_tool(CallToolRequestParams::new("transfer").with_arguments(object(args.clone())))
        .await?;
    assert_ne!(result.is_error, Some(true));
    assert_eq!(result.structured_content.unwrap()["transfer"], 1);
    assert_eq!(upstream.transfers(), vec![args]);
    assert_eq!(upstream.count_for("transfer"), 1);

    let sum = client
        .call_tool(
            CallToolRequestParams::new("add").with_arguments(object(json!({"a": 2, "b": 3}))),
        )
        .await?;
    assert_eq!(sum.structured_content.unwrap()["sum"], 5.0);
    assert_eq!(upstream.count_for("add"), 1);
    assert_eq!(upstream.transfers().len(), 1, "add has no side effect");
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn bad_arguments_are_refused_and_run_nothing_but_are_recorded() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let client = rmcp_client(&upstream).await?;
    let refused = client
        .call_tool(
            CallToolRequestParams::new("transfer")
                .with_arguments(object(json!({"from": "a", "to": "b"}))),
        )
        .await;
    assert!(refused.is_err(), "a transfer without amount: {refused:?}");
    assert!(upstream.transfers().is_empty());
    assert_eq!(upstream.count_for("transfer"), 1);

    upstream.fail("transfer", "bank closed");
    let failed = client
        .call_tool(
            CallToolRequestParams::new("transfer")
                .with_arguments(object(json!({"from": "a", "to": "b", "amount": 1}))),
        )
        .await?;
    assert_eq!(failed.is_error, Some(true));
    assert!(
        upstream.transfers().is_empty(),
        "a failing tool runs nothing"
    );
    client.cancel().await?;
    Ok(())
}

#[tokio::test]
async fn answers_raw_stateless_requests_of_the_2026_revision() -> anyhow::Result<()> {
    let upstream = McpUpstream::start();
    let raw = RawMcp::new(&upstream.url(), Some("upstream-secret"));
    let list = raw.list_tools().await?;
    assert_eq!(list.status, 200, "{}", list.text);
    assert_eq!(list.result()?["tools"].as_array().unwrap().len(), 3);

    let answer = raw.call_tool("add", json!({"a": 1, "b": 2})).await?;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.result()?["structuredContent"]["sum"], 3.0);
    let calls = upstream.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].authorization.as_deref(),
        Some("Bearer upstream-secret")
    );
    Ok(())
}
