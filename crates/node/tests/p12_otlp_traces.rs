//! Traces of a real `gatehouse serve` process, received by an OTLP/gRPC collector the test runs
//! itself: the caller's W3C `traceparent` (an MCP request's HTTP header, gRPC metadata) is
//! continued by the `call` span, by the `execute` span (also when the tenant's actor executes a
//! replicated call from its record), and by the `traceparent` the upstream receives. The node
//! is stopped with SIGTERM and must export every span of its finished calls before it exits.
//!
//! Tenant `acme`, agent `bot`, approver `alice`; the HTTP upstream `rec`, which records the
//! `traceparent` of every request; tools `rec.echo` (read-only) and `rec.pay` (destructive: it
//! waits for `alice`, whose decision is a `decide` span in the call's trace).

mod common;

use common::{Node, serve};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_proto::v1::gateway_service_client::GatewayServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::{jsonrpc_message, principal, resource};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BOT: &str = "gate_bot-key-000000000000000000000000";
const ALICE: &str = "gate_alice-key-00000000000000000000000";
const DEADLINE: Duration = Duration::from_secs(20);

const MCP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const MCP_PARENT: &str = "00f067aa0ba902b7";
const GRPC_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const GRPC_PARENT: &str = "b7ad6b7169203331";
const APPROVED_TRACE: &str = "5b8aa5a2d2c872e8321cf37308d69df2";

/// Every export request the collector received.
#[derive(Debug, Clone, Default)]
struct Collector {
    received: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Starts the collector on a loopback port of its own: its `http://` endpoint.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        format!("http://{addr}")
    }

    fn spans(&self) -> Vec<Span> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    /// The resource attributes the node's spans came with.
    fn resource(&self) -> HashMap<String, String> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .flat_map(|r| &r.resource_spans)
            .filter_map(|r| r.resource.as_ref())
            .flat_map(|r| &r.attributes)
            .map(|kv| {
                (
                    kv.key.clone(),
                    text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                )
            })
            .collect()
    }
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
}

/// An HTTP upstream that answers `{"ok": true}` and records each request's `traceparent`.
#[derive(Debug, Clone, Default)]
struct Upstream {
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

impl Upstream {
    async fn start(&self) -> String {
        let seen = self.seen.clone();
        let app = axum::Router::new().route(
            "/{tool}",
            axum::routing::post(move |headers: http::HeaderMap| {
                let seen = seen.clone();
                async move {
                    let trace = headers
                        .get("traceparent")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    seen.lock().unwrap().push(trace);
                    axum::Json(json!({"ok": true}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn traceparents(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .cloned()
            .collect()
    }
}

fn resources(upstream: &str) -> Vec<pb::Resource> {
    let acme = Some("acme");
    vec![
        resource("Tenant", "acme", None, json!({})),
        principal("bot", BOT, json!({"acme": ["agent"]}), None),
        principal("alice", ALICE, json!({"acme": ["approver"]}), None),
        resource(
            "Tool",
            "rec.pay",
            acme,
            json!({"inputSchema": {"type": "object"}, "approvalMode": "destructive"}),
        ),
        resource(
            "Upstream",
            "rec",
            acme,
            json!({"type": "http", "url": upstream, "timeoutMs": 5000}),
        ),
        resource(
            "Tool",
            "rec.echo",
            acme,
            json!({"inputSchema": {"type": "object"}, "approvalMode": "read_only"}),
        ),
    ]
}

fn with_metadata<T>(message: T, pairs: &[(&'static str, &str)]) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for (key, value) in pairs {
        request.metadata_mut().insert(*key, value.parse().unwrap());
    }
    request
}

/// Applies the resources once the new cluster has a leader.
async fn apply(node: &Node, admin: &str, upstream: &str) {
    let started = Instant::now();
    loop {
        let attempt = async {
            let mut registry = RegistryServiceClient::connect(format!("http://{}", node.grpc))
                .await
                .map_err(|e| e.to_string())?;
            let request = with_metadata(
                pb::ApplyRequest {
                    resources: resources(upstream),
                },
                &[("authorization", &format!("Bearer {admin}"))],
            );
            registry
                .apply(request)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(()) => return,
            Err(e) if started.elapsed() > DEADLINE => panic!("apply: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Calls `rec.echo` over gRPC with `traceparent` metadata when given; with an idempotency key
/// the call is recorded through Raft and the tenant's actor runs it. Answers the envelope once
/// the call has finished (from GetCall, for a recorded call).
async fn grpc_call(node: &Node, traceparent: Option<&str>, key: Option<&str>) -> pb::CallEnvelope {
    grpc_call_tool(node, "rec.echo", traceparent, key).await
}

/// Calls `tool` over gRPC as [`grpc_call`] does; a call that waits for approval is approved by
/// `alice`.
async fn grpc_call_tool(
    node: &Node,
    tool: &str,
    traceparent: Option<&str>,
    key: Option<&str>,
) -> pb::CallEnvelope {
    let url = format!("http://{}", node.grpc);
    let mut gateway = GatewayServiceClient::connect(url).await.unwrap();
    let bearer = format!("Bearer {BOT}");
    let mut metadata = vec![("authorization", bearer.as_str())];
    if let Some(traceparent) = traceparent {
        metadata.push(("traceparent", traceparent));
    }
    let request = pb::CallToolRequest {
        tenant: "acme".into(),
        tool: tool.into(),
        arguments_json: "{}".into(),
        idempotency_key: key.map(Into::into),
    };
    let envelope = gateway
        .call_tool(with_metadata(request, &metadata))
        .await
        .unwrap()
        .into_inner()
        .envelope
        .unwrap();
    if envelope.state == pb::CallState::Succeeded as i32 {
        return envelope;
    }
    if envelope.state == pb::CallState::Pending as i32 {
        approve(node, &envelope.call_id).await;
    }
    let started = Instant::now();
    loop {
        let request = pb::GetCallRequest {
            call_id: envelope.call_id.clone(),
        };
        let now = gateway
            .get_call(with_metadata(request, &metadata[..1]))
            .await
            .unwrap()
            .into_inner()
            .envelope
            .unwrap();
        if now.state == pb::CallState::Succeeded as i32 {
            return now;
        }
        assert!(started.elapsed() < DEADLINE, "call never finished: {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `alice` approves the call.
async fn approve(node: &Node, call_id: &str) {
    let url = format!("http://{}", node.grpc);
    let mut approvals = ApprovalServiceClient::connect(url).await.unwrap();
    let bearer = format!("Bearer {ALICE}");
    let auth = [("authorization", bearer.as_str())];
    let request = pb::GetCallRecordRequest {
        call_id: call_id.into(),
    };
    let record = approvals
        .get(with_metadata(request, &auth))
        .await
        .unwrap()
        .into_inner()
        .call
        .unwrap();
    let request = pb::ApproveCallRequest {
        call_id: call_id.into(),
        args_sha256: record.args_sha256,
        reason: "fine".into(),
    };
    approvals
        .approve(with_metadata(request, &auth))
        .await
        .unwrap();
}

/// Posts one JSON-RPC message to `/mcp` with MCP's headers, and `extra` ones.
async fn mcp_post(
    url: &str,
    session: Option<&str>,
    extra: &[(&str, &str)],
    body: Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(BOT)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// The JSON-RPC message of a response, whether sent as JSON or as an event stream.
async fn message(response: reqwest::Response) -> Value {
    jsonrpc_message(&response.text().await.unwrap())
}

/// Calls `rec.echo` over MCP with a `traceparent` HTTP header: the trace id in the result's
/// `_meta`.
async fn mcp_call(node: &Node, traceparent: &str) -> String {
    let url = format!("http://{}/mcp", node.http);
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    });
    let opened = mcp_post(&url, None, &[], init).await;
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = message(opened).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let _ = mcp_post(&url, Some(&session), &[], initialized).await;
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "rec.echo", "arguments": {}}
    });
    let headers = [("traceparent", traceparent)];
    let answer = message(mcp_post(&url, Some(&session), &headers, call).await).await;
    let result = &answer["result"];
    assert_eq!(result["isError"], false, "{answer}");
    result["_meta"]["dev.gatehouse/trace-id"]
        .as_str()
        .unwrap_or_else(|| panic!("no trace id in {answer}"))
        .to_owned()
}

/// SIGTERM, then the exit: a graceful stop.
fn stop(mut node: Node) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exited = node.child.wait().unwrap();
    assert!(exited.success(), "{exited:?}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Span], name: &str, trace: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name == name && hex(&s.trace_id) == trace)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_callers_trace_through_execution_to_the_upstream() {
    let collector = Collector::default();
    let endpoint = collector.start().await;
    let upstream = Upstream::default();
    let upstream_url = upstream.start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = serve(
        1,
        dir.path(),
        &["--bootstrap", "--otlp-endpoint", &endpoint],
        None,
    );
    let admin = std::fs::read_to_string(dir.path().join("node-1/admin.key")).unwrap();
    apply(&node, admin.trim(), &upstream_url).await;

    let mcp_trace = mcp_call(&node, &format!("00-{MCP_TRACE}-{MCP_PARENT}-01")).await;
    let grpc = grpc_call(
        &node,
        Some(&format!("00-{GRPC_TRACE}-{GRPC_PARENT}-01")),
        Some("replicated-1"),
    )
    .await;
    let approved = grpc_call_tool(
        &node,
        "rec.pay",
        Some(&format!("00-{APPROVED_TRACE}-{GRPC_PARENT}-01")),
        None,
    )
    .await;
    let fresh = grpc_call(&node, None, None).await;
    let invalid_trace = "00000000000000000000000000000000";
    let invalid = grpc_call(
        &node,
        Some(&format!("00-{invalid_trace}-{GRPC_PARENT}-01")),
        None,
    )
    .await;
    let uppercase = grpc_call(
        &node,
        Some(&format!(
            "00-{}-{GRPC_PARENT}-01",
            GRPC_TRACE.to_uppercase()
        )),
        None,
    )
    .await;
    tokio::task::spawn_blocking(move || stop(node))
        .await
        .unwrap();

    // What callers were told.
    assert_eq!(mcp_trace, MCP_TRACE);
    assert_eq!(grpc.trace_id, GRPC_TRACE);
    for ignored in [&fresh, &invalid, &uppercase] {
        assert_eq!(ignored.trace_id.len(), 32);
        assert_ne!(ignored.trace_id, invalid_trace);
        assert_ne!(ignored.trace_id, GRPC_TRACE);
        assert_ne!(ignored.trace_id, GRPC_TRACE.to_uppercase());
    }

    // What the collector received.
    let spans = collector.spans();
    assert!(
        !spans.is_empty(),
        "the node exported no span before it exited"
    );
    let resource = collector.resource();
    assert_eq!(resource["service.name"], "gatehouse");
    assert_eq!(resource["service.instance.id"], "1");
    for (trace, parent, call_id, replicated) in [
        (MCP_TRACE, MCP_PARENT, None, "false"),
        (GRPC_TRACE, GRPC_PARENT, Some(&grpc.call_id), "true"),
    ] {
        let calls = named(&spans, "call", trace);
        assert_eq!(calls.len(), 1, "one call span in trace {trace}: {spans:#?}");
        let call = calls[0];
        assert_eq!(hex(&call.parent_span_id), parent);
        assert_eq!(attribute(call, "tenant").as_deref(), Some("acme"));
        assert_eq!(attribute(call, "tool").as_deref(), Some("rec.echo"));
        assert_eq!(attribute(call, "mode").as_deref(), Some("read_only"));
        assert_eq!(attribute(call, "decision").as_deref(), Some("allowed"));
        assert_eq!(attribute(call, "replicated").as_deref(), Some(replicated));
        assert!(attribute(call, "policy_decision").is_some_and(|d| !d.is_empty()));
        let id = attribute(call, "call").expect("a call id");
        if let Some(call_id) = call_id {
            assert_eq!(&id, call_id);
        }
        let executes = named(&spans, "execute", trace);
        assert_eq!(executes.len(), 1, "one execute span in trace {trace}");
        let execute = executes[0];
        assert_eq!(execute.parent_span_id, call.span_id);
        assert_eq!(attribute(execute, "call"), Some(id));
        assert_eq!(attribute(execute, "outcome").as_deref(), Some("succeeded"));
        // The upstream's parent is the execute span, which the collector has.
        let expected = format!("00-{trace}-{}-01", hex(&execute.span_id));
        assert!(
            upstream.traceparents().contains(&expected),
            "{expected} not in {:?}",
            upstream.traceparents()
        );
    }
    // A call that waited for approval: the decision and the execution are in its trace, under
    // the call span.
    assert_eq!(approved.trace_id, APPROVED_TRACE);
    let calls = named(&spans, "call", APPROVED_TRACE);
    assert_eq!(calls.len(), 1);
    let call = calls[0];
    assert_eq!(hex(&call.parent_span_id), GRPC_PARENT);
    assert_eq!(
        attribute(call, "decision").as_deref(),
        Some("needs_approval")
    );
    assert_eq!(attribute(call, "mode").as_deref(), Some("destructive"));
    assert_eq!(attribute(call, "outcome").as_deref(), Some("pending"));
    let decides = named(&spans, "decide", APPROVED_TRACE);
    assert_eq!(decides.len(), 1);
    assert_eq!(decides[0].parent_span_id, call.span_id);
    assert_eq!(
        attribute(decides[0], "decision").as_deref(),
        Some("approve")
    );
    assert_eq!(attribute(decides[0], "principal").as_deref(), Some("alice"));
    let executes = named(&spans, "execute", APPROVED_TRACE);
    assert_eq!(executes.len(), 1);
    assert_eq!(executes[0].parent_span_id, call.span_id);
    let expected = format!("00-{APPROVED_TRACE}-{}-01", hex(&executes[0].span_id));
    assert!(upstream.traceparents().contains(&expected));

    // A call without a (valid) traceparent starts a trace of its own, with no parent.
    for started in [&fresh, &invalid, &uppercase] {
        let calls = named(&spans, "call", &started.trace_id);
        assert_eq!(calls.len(), 1, "a call span in trace {}", started.trace_id);
        assert!(calls[0].parent_span_id.is_empty());
        assert_eq!(named(&spans, "execute", &started.trace_id).len(), 1);
    }
}
