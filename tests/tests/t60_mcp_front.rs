//! The MCP front against a real MCP upstream: rmcp's client (and raw JSON-RPC for what a broken
//! client sends) through a node's `/mcp` to an rmcp server, approvals over gRPC, and the node's
//! audit log read back. What the upstream received is checked at the upstream.

use gatehouse_fronts::mcp::McpSettings;
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

/// One request of the corpus below: what it changes about a well-formed stateless `tools/call`
/// of `demo.add`, and whether the direct path should answer it (else rmcp does).
struct Case {
    what: &'static str,
    direct: bool,
    key: Option<&'static str>,
    body: Value,
    /// Headers set over the well-formed ones; an empty value takes the header away, a name
    /// starting with `+` adds a second value.
    headers: Vec<(&'static str, String)>,
}

fn case(what: &'static str, direct: bool, tool: &str, arguments: Value) -> Case {
    let body = RawMcp::new("http://unused", None)
        .body("tools/call", json!({"name": tool, "arguments": arguments}));
    Case {
        what,
        direct,
        key: Some(BOT),
        body,
        headers: vec![("mcp-name", tool.to_owned())],
    }
}

impl Case {
    fn header(mut self, name: &'static str, value: &str) -> Case {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.to_owned()));
        self
    }

    fn body(mut self, change: impl FnOnce(&mut Value)) -> Case {
        change(&mut self.body);
        self
    }
}

/// Status, content type, and the body with what differs from call to call (ids, times) replaced
/// by placeholders wherever it appears.
fn answer_of(fixture: &McpFixture, http: &reqwest::Client, case: &Case) -> (u16, String, Value) {
    let mut request = http
        .post(fixture.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call");
    if let Some(key) = case.key {
        request = request.bearer_auth(key);
    }
    let mut request = request.build().expect("a request");
    for (name, value) in &case.headers {
        let headers = request.headers_mut();
        if value.is_empty() {
            headers.remove(*name);
        } else if let Some(again) = name.strip_prefix('+') {
            headers.append(again, value.parse().expect("a header value"));
        } else {
            headers.insert(*name, value.parse().expect("a header value"));
        }
    }
    *request.body_mut() = Some(serde_json::to_vec(&case.body).unwrap().into());
    let response = fixture
        .cluster
        .block_on(http.execute(request))
        .unwrap_or_else(|e| panic!("{}: {e}", case.what));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let text = fixture.cluster.block_on(response.text()).unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, content_type, without_volatile(body))
}

/// The body with the values of call ids, trace ids, task ids and times replaced, in every string
/// that carries them.
fn without_volatile(body: Value) -> Value {
    const VOLATILE: &[&str] = &[
        "dev.gatehouse/call-id",
        "dev.gatehouse/trace-id",
        "call_id",
        "taskId",
        "createdAt",
        "lastUpdatedAt",
        "expires_at",
        "expires_at_ms",
        // A task's: when it expires, in words and as what is left of it.
        "statusMessage",
        "ttlMs",
        // What the echo upstream got: the span id in it is the execution's own.
        "traceparent",
    ];
    fn collect(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    if VOLATILE.contains(&key.as_str()) {
                        match value {
                            Value::String(s) => found.push(s.clone()),
                            other => found.push(other.to_string()),
                        }
                    }
                    collect(value, found);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| collect(item, found)),
            _ => {}
        }
    }
    fn replace(value: &mut Value, found: &[String]) {
        match value {
            Value::String(s) => {
                for volatile in found {
                    *s = s.replace(volatile.as_str(), "<volatile>");
                }
            }
            Value::Number(n) if found.contains(&n.to_string()) => {
                *value = Value::String("<volatile>".into());
            }
            Value::Object(map) => map.values_mut().for_each(|v| replace(v, found)),
            Value::Array(items) => items.iter_mut().for_each(|v| replace(v, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    collect(&body, &mut found);
    found.retain(|s| !s.is_empty());
    // The longest first, so that no value is cut by a shorter one inside it.
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut body = body;
    replace(&mut body, &found);
    body
}

fn direct_calls(fixture: &McpFixture) -> u64 {
    let url = format!("http://{}/metrics", fixture.cluster.node(1).http_addr);
    let text = fixture
        .cluster
        .block_on(async { reqwest::get(&url).await?.text().await })
        .expect("a scrape");
    text.lines()
        .find_map(|line| line.strip_prefix("gatehouse_mcp_direct_calls_total "))
        .and_then(|n| n.trim().parse().ok())
        .expect("gatehouse_mcp_direct_calls_total in the scrape")
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The direct path answers a stateless `tools/call` exactly as rmcp does, and leaves to rmcp
/// every request it is not sure of: one corpus, sent to a node with the direct path and to one
/// without, gets the same status, content type and body (ids and times aside) from both, and the
/// direct path counts exactly the requests it should take.
#[test]
fn the_direct_path_answers_as_rmcp_and_leaves_it_the_rest() -> anyhow::Result<()> {
    let direct = McpFixture::start()?;
    let through_rmcp = McpFixture::start_with(McpSettings {
        direct_calls: false,
        ..McpSettings::default()
    })?;
    let add = || case("well formed", true, ADD, json!({"a": 2, "b": 3}));
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let corpus = vec![
        add(),
        add().body(|b| b["id"] = json!("a-string-id")),
        case("skill context", true, ECHO, json!({"text": "hi"})),
        case("unknown tool", true, "demo.nope", json!({})),
        case("bad arguments", true, ADD, json!({"a": "two"})),
        case(
            "destructive, pending",
            true,
            TRANSFER,
            json!({"from": "a", "to": "b", "amount": 1}),
        ),
        case(
            "destructive, as a task",
            true,
            TRANSFER,
            json!({"from": "a", "to": "b", "amount": 1}),
        )
        .body(|b| b["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = tasks),
        case("a trace to continue", true, ECHO, json!({"text": "traced"}))
            .header("traceparent", TRACEPARENT),
        add().header("accept", "text/event-stream, application/json"),
        Case {
            what: "another tenant's agent",
            key: Some(GINA),
            ..add()
        },
        // Left to rmcp.
        case(
            "the gateway's own tool",
            false,
            "gatehouse.call_status",
            json!({"call_id": "x"}),
        ),
        Case {
            what: "no key",
            direct: false,
            key: None,
            ..add()
        },
        Case {
            what: "name mismatch",
            direct: false,
            ..add().header("mcp-name", "demo.echo")
        },
        Case {
            what: "no name header",
            direct: false,
            ..add().header("mcp-name", "")
        },
        Case {
            what: "name in base64",
            direct: false,
            ..add().header("mcp-name", "=?base64?ZGVtby5hZGQ=?=")
        },
        Case {
            what: "name twice",
            direct: false,
            ..add().header("+mcp-name", ADD)
        },
        Case {
            what: "a param header",
            direct: false,
            ..add().header("mcp-param-a", "2")
        },
        Case {
            what: "an origin",
            direct: false,
            ..add().header("origin", "http://evil.example")
        },
        Case {
            what: "another host",
            direct: false,
            ..add().header("host", "evil.example")
        },
        Case {
            what: "json only",
            direct: false,
            ..add().header("accept", "application/json")
        },
        Case {
            what: "weighted accept",
            direct: false,
            ..add().header("accept", "application/json;q=0.9, text/event-stream")
        },
        Case {
            what: "text body",
            direct: false,
            ..add().header("content-type", "text/plain")
        },
        Case {
            what: "older header",
            direct: false,
            ..add().header("mcp-protocol-version", "2025-11-25")
        },
        Case {
            what: "method mismatch",
            direct: false,
            ..add().header("mcp-method", "tools/list")
        },
        Case {
            what: "a session id",
            direct: false,
            ..add().header("mcp-session-id", "nope")
        },
        Case {
            what: "no capabilities",
            direct: false,
            ..add().body(|b| {
                b["params"]["_meta"]
                    .as_object_mut()
                    .unwrap()
                    .remove("io.modelcontextprotocol/clientCapabilities");
            })
        },
        Case {
            what: "no version in _meta",
            direct: false,
            ..add().body(|b| {
                b["params"]["_meta"]
                    .as_object_mut()
                    .unwrap()
                    .remove("io.modelcontextprotocol/protocolVersion");
            })
        },
    ];
    let http = reqwest::Client::new();
    for case in &corpus {
        let taken_before = direct_calls(&direct);
        let ours = answer_of(&direct, &http, case);
        let taken = direct_calls(&direct) - taken_before;
        let rmcps = answer_of(&through_rmcp, &http, case);
        assert_eq!(
            ours, rmcps,
            "{}: the direct path and rmcp differ",
            case.what
        );
        assert_eq!(
            taken,
            u64::from(case.direct),
            "{}: direct path taken {taken} times",
            case.what
        );
    }
    assert_eq!(
        direct_calls(&through_rmcp),
        0,
        "switched off, nothing is direct"
    );
    // The direct path continues the caller's trace, as the handler does.
    let traced = direct
        .upstream
        .calls()
        .into_iter()
        .find(|call| call.arguments["text"] == "traced")
        .expect("the traced echo reached the upstream");
    let traceparent = traced.traceparent().expect("a traceparent in _meta");
    assert!(
        traceparent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{traceparent}"
    );
    // Both upstreams saw the same calls.
    for tool in ["add", "echo", "transfer"] {
        assert_eq!(
            direct.upstream.count_for(tool),
            through_rmcp.upstream.count_for(tool),
            "calls of {tool} that reached the upstream"
        );
    }
    Ok(())
}
