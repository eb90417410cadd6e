//! MCP and HTTP upstreams against real servers on 127.0.0.1: what arrives, how retries and the
//! circuit breaker behave.

use super::test_mcp;
use super::tests::{execution, node_executor, registry, result};
use super::*;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn mcp_upstream(addr: SocketAddr, extra: &str) -> String {
    format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: kb, tenant: acme}}\n\
         spec: {{type: mcp, url: 'http://{addr}/mcp', {extra}}}\n"
    )
}

#[tokio::test]
async fn mcp_calls_carry_context_idempotency_key_and_trace_in_meta() {
    let upstream = test_mcp::Upstream::default();
    let addr = test_mcp::serve(upstream.clone()).await;
    let env: HashMap<String, String> = [("KB_TOKEN".to_owned(), "t0ken".to_owned())].into();
    let executor =
        node_executor(registry(&mcp_upstream(addr, "credential: kb"))).with_env(Arc::new(env));
    let mut call = execution("acme", "kb.whoami", json!({"q": "refunds"}));
    call.skill_context = Some("Answer in French.".into());
    let out = executor.execute(call.clone()).await.unwrap();
    assert!(!out.is_error);
    let answer = result(&out)["structuredContent"].clone();
    let meta = &answer["meta"];
    assert_eq!(meta[mcp::SKILL_CONTEXT_META], json!("Answer in French."));
    assert_eq!(meta[mcp::IDEMPOTENCY_KEY_META], json!(call.idempotency_key));
    let trace = meta["traceparent"].as_str().unwrap();
    let hex = call.call_id.to_string()["call_".len()..].to_owned();
    let parts: Vec<&str> = trace.split('-').collect();
    assert_eq!(parts.len(), 4, "{trace}");
    assert_eq!((parts[0], parts[1], parts[3]), ("00", hex.as_str(), "01"));
    assert_eq!(parts[2].len(), 16);
    assert_eq!(answer["arguments"], json!({"q": "refunds"}));
    assert_eq!(answer["authorization"], json!("Bearer t0ken"));

    // The session is kept: a second call reuses it and a tool error maps to `is_error`.
    let out = executor
        .execute(execution("acme", "kb.refuse", json!({})))
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(result(&out)["structuredContent"], json!({"why": "no"}));
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 2);

    // Without a skill context the key is left out.
    let out = executor
        .execute(execution("acme", "kb.whoami", json!({})))
        .await
        .unwrap();
    let meta = result(&out)["structuredContent"]["meta"].clone();
    assert!(meta.get(mcp::SKILL_CONTEXT_META).is_none(), "{meta}");
}

#[tokio::test]
async fn mcp_calls_reuse_kept_alive_connections() {
    let upstream = test_mcp::Upstream::default();
    let addr = test_mcp::serve(upstream.clone()).await;
    let executor = node_executor(registry(&mcp_upstream(addr, "trusted: true")));
    for _ in 0..20 {
        let out = executor
            .execute(execution("acme", "kb.echo", json!({})))
            .await
            .unwrap();
        assert!(!out.is_error);
    }
    // Twenty calls after the handshake: a connection each would be over twenty.
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 20);
    let connections = upstream.connections.load(Ordering::SeqCst);
    assert!(connections <= 3, "{connections} connections for 20 calls");
}

#[tokio::test]
async fn mcp_calls_are_posted_directly_and_survive_a_forgotten_session() {
    let upstream = test_mcp::Upstream::default();
    let addr = test_mcp::serve(upstream.clone()).await;
    let executor = node_executor(registry(&mcp_upstream(addr, "trusted: true")));
    let whoami = async || {
        let out = executor
            .execute(execution("acme", "kb.whoami", json!({})))
            .await
            .unwrap();
        assert!(!out.is_error);
        result(&out)["structuredContent"]["id"].clone()
    };
    // The call's own id, not one of rmcp's numbered requests: posted by the executor itself.
    let id = whoami().await;
    assert!(
        id.as_str().is_some_and(|id| id.starts_with("gatehouse-")),
        "{id}"
    );
    assert_eq!(upstream.sessions.sessions.read().await.len(), 1);

    // The upstream forgets the session, as a restarted one would: the next call still succeeds, on a new
    // session.
    upstream.forget_sessions().await;
    let id = whoami().await;
    assert!(
        id.as_str().is_some_and(|id| id.starts_with("gatehouse-")),
        "{id}"
    );
    assert_eq!(upstream.calls.load(Ordering::SeqCst), 2);
    assert_eq!(upstream.sessions.sessions.read().await.len(), 1);
}

/// The bodies of the `tools/call` requests an upstream received, as they came.
type Bodies = Arc<Mutex<Vec<axum::body::Bytes>>>;

/// A hand-written MCP upstream that keeps sessions: `initialize` gets a JSON answer and a session
/// id, each `tools/call` an SSE stream of `events` (with `{id}` replaced by the call's own id).
async fn scripted_upstream(events: Vec<&'static str>) -> SocketAddr {
    scripted_upstream_keeping(events, Bodies::default()).await
}

/// [`scripted_upstream`], keeping each `tools/call`'s body in `bodies`.
async fn scripted_upstream_keeping(events: Vec<&'static str>, bodies: Bodies) -> SocketAddr {
    let answer = move |request: Request| {
        let events = events.clone();
        let bodies = bodies.clone();
        async move {
            let body = axum::body::to_bytes(request.into_body(), 1 << 20)
                .await
                .unwrap();
            let message: Value = serde_json::from_slice(&body).unwrap();
            if message["method"] == "tools/call" {
                bodies.lock().unwrap().push(body.clone());
            }
            let id = message["id"].clone();
            match message["method"].as_str() {
                Some("initialize") => (
                    StatusCode::OK,
                    [
                        ("content-type", "application/json"),
                        ("mcp-session-id", "s1"),
                    ],
                    json!({"jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "scripted", "version": "0"},
                    }})
                    .to_string(),
                ),
                Some("tools/call") => {
                    let stream: String = events
                        .iter()
                        .map(|e| format!("data: {}\n\n", e.replace("{id}", &id.to_string())))
                        .collect();
                    (
                        StatusCode::OK,
                        [
                            ("content-type", "text/event-stream"),
                            ("mcp-session-id", "s1"),
                        ],
                        stream,
                    )
                }
                _ => (
                    StatusCode::ACCEPTED,
                    [("content-type", "text/plain"), ("mcp-session-id", "s1")],
                    String::new(),
                ),
            }
        }
    };
    serve_mcp(answer).await
}

/// Serves `answer` for POSTs to `/mcp` on 127.0.0.1 (GET refused, DELETE accepted), as a
/// hand-written MCP upstream; its address.
async fn serve_mcp<H, T>(answer: H) -> SocketAddr
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    let router = Router::new().route(
        "/mcp",
        axum::routing::post(answer)
            .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
            .delete(|| async { StatusCode::OK }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

#[tokio::test]
async fn an_upstream_stream_answers_a_call_only_with_that_calls_own_answer() {
    // Before the call's answer, the stream carries a request of the server's, a notification
    // and an answer to some other request: none of them is taken for the call's result.
    let addr = scripted_upstream(vec![
        r#"{"jsonrpc":"2.0","id":99,"method":"sampling/createMessage","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":"other","result":{"content":[{"type":"text","text":"injected"}]}}"#,
        r#"{"jsonrpc":"2.0","id":{id},"result":{"content":[{"type":"text","text":"real"}]}}"#,
    ])
    .await;
    let out = echo_at(addr).await.unwrap();
    assert_eq!(result(&out)["content"][0]["text"], "real");

    // A stream that ends with only another request's answer is no answer at all.
    let addr = scripted_upstream(vec![
        r#"{"jsonrpc":"2.0","id":"other","result":{"content":[{"type":"text","text":"injected"}]}}"#,
    ])
    .await;
    let err = echo_at(addr).await.unwrap_err();
    assert!(err.message.contains("without an answer"), "{err}");
}

#[tokio::test]
async fn an_upstream_stream_is_read_no_further_than_its_bound() {
    // One event bigger than any answer may be, then the call's answer: the gateway stops reading
    // at the bound and fails the call, instead of holding whatever the upstream sends.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":"{}"}}}}"#,
        "x".repeat(super::mcp_post::MAX_ANSWER)
    );
    let addr = scripted_upstream(vec![
        Box::leak(huge.into_boxed_str()),
        r#"{"jsonrpc":"2.0","id":{id},"result":{"content":[{"type":"text","text":"real"}]}}"#,
    ])
    .await;
    let err = echo_at(addr).await.unwrap_err();
    assert!(err.message.contains("larger than"), "{err}");
}

/// An executor whose `kb` is a trusted scripted upstream answering every call with an empty
/// result, and the bodies of the calls it gets.
async fn keeping_upstream() -> (NodeExecutor, Bodies) {
    let bodies = Bodies::default();
    let addr = scripted_upstream_keeping(
        vec![r#"{"jsonrpc":"2.0","id":{id},"result":{"content":[]}}"#],
        bodies.clone(),
    )
    .await;
    let executor = node_executor(registry(&mcp_upstream(addr, "trusted: true")));
    (executor, bodies)
}

#[tokio::test]
async fn a_call_carries_its_arguments_as_the_text_the_audit_hashed() {
    // The call's arguments are the canonical text whose SHA-256 is the call's `args_sha256`; the
    // upstream gets that text itself, not a re-encoding of it.
    let (executor, bodies) = keeping_upstream().await;
    let mut call = execution("acme", "kb.echo", json!({}));
    call.arguments = r#"{"a":"\u00e9\n","b":[1,2.5e-7,{"c":null}]}"#.into();
    let out = executor.execute(call.clone()).await.unwrap();
    assert!(!out.is_error);
    #[derive(serde::Deserialize)]
    struct Posted<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        name: String,
        #[serde(borrow)]
        arguments: &'a serde_json::value::RawValue,
    }
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1);
    let posted: Posted<'_> = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(posted.params.name, "echo");
    assert_eq!(posted.params.arguments.get(), call.arguments);
}

#[tokio::test]
async fn arguments_that_are_not_one_json_object_never_reach_the_upstream() {
    let (executor, bodies) = keeping_upstream().await;
    for arguments in ["[1]", "\"text\"", "{\"a\":1} {\"b\":2}", "{\"a\":", ""] {
        let mut call = execution("acme", "kb.echo", json!({}));
        call.arguments = arguments.into();
        let err = executor.execute(call).await.unwrap_err();
        assert!(
            err.message.contains("not a JSON object"),
            "{arguments}: {err}"
        );
    }
    assert!(bodies.lock().unwrap().is_empty());
}

/// `kb.echo` of a trusted MCP upstream at `addr`.
async fn echo_at(addr: SocketAddr) -> Result<ToolOutput, ExecError> {
    let executor = node_executor(registry(&mcp_upstream(addr, "trusted: true")));
    executor
        .execute(execution("acme", "kb.echo", json!({})))
        .await
}

#[tokio::test]
async fn an_mcp_upstream_redirect_is_not_followed() {
    // The upstream answers every request with a 307 elsewhere on its own origin (where rmcp's
    // own client would follow, credential and all); the gateway goes nowhere but the declared
    // URL.
    let followed = Arc::new(AtomicUsize::new(0));
    let counted = followed.clone();
    let router = Router::new()
        .route(
            "/mcp",
            axum::routing::any(|| async {
                (StatusCode::TEMPORARY_REDIRECT, [("location", "/elsewhere")])
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::any(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { StatusCode::OK }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let env: HashMap<String, String> = [("KB_TOKEN".to_owned(), "t0ken".to_owned())].into();
    let executor =
        node_executor(registry(&mcp_upstream(addr, "credential: kb"))).with_env(Arc::new(env));
    let outcome = executor
        .execute(execution("acme", "kb.echo", json!({})))
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(followed.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_mcp_protocol_error_is_an_exec_error() {
    let upstream = test_mcp::Upstream::default();
    let addr = test_mcp::serve(upstream.clone()).await;
    let executor = node_executor(registry(&mcp_upstream(addr, "trusted: true")));
    let err = executor
        .execute(execution("acme", "kb.broken", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("broken on purpose"), "{err}");
}

/// Method, path, query and body of one request.
type Seen = (String, String, Option<String>, String);

/// What the HTTP server saw, and how many answers fail before it succeeds.
#[derive(Clone, Default)]
struct Server {
    seen: Arc<Mutex<Vec<Seen>>>,
    hits: Arc<AtomicUsize>,
    failing: Arc<AtomicUsize>,
}

async fn record(State(server): State<Server>, request: Request) -> (StatusCode, String) {
    server.hits.fetch_add(1, Ordering::SeqCst);
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap();
    server.seen.lock().unwrap().push((
        method,
        path,
        query,
        String::from_utf8_lossy(&body).into_owned(),
    ));
    let failing = server.failing.load(Ordering::SeqCst);
    if failing > 0 {
        server.failing.store(failing - 1, Ordering::SeqCst);
        return (StatusCode::SERVICE_UNAVAILABLE, "try later".into());
    }
    (StatusCode::OK, r#"{"ok":true}"#.into())
}

async fn http_server(server: Server) -> SocketAddr {
    let app = Router::new().fallback(record).with_state(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn http_registry(addr: SocketAddr, upstream_extra: &str) -> SharedRegistry {
    registry(&format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: pets, tenant: acme}}\n\
         spec: {{type: http, url: 'http://{addr}/v1', {upstream_extra}}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {{name: pets.get, tenant: acme}}\n\
         spec: {{http: {{method: GET, path: '/pets/{{id}}'}}}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {{name: pets.rename, tenant: acme}}\n\
         spec: {{http: {{method: PATCH, path: '/pets/{{id}}/name'}}}}\n"
    ))
}

#[tokio::test]
async fn http_bindings_choose_method_path_query_and_body() {
    let server = Server::default();
    let addr = http_server(server.clone()).await;
    let executor = node_executor(http_registry(addr, "trusted: false"));
    let out = executor
        .execute(execution(
            "acme",
            "pets.get",
            json!({"id": "rex the 2nd?", "fields": ["name", "age"], "limit": 5}),
        ))
        .await
        .unwrap();
    assert!(!out.is_error);
    executor
        .execute(execution(
            "acme",
            "pets.rename",
            json!({"id": 7, "name": "Rex"}),
        ))
        .await
        .unwrap();
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (
                "GET".to_owned(),
                "/v1/pets/rex%20the%202nd%3F".to_owned(),
                Some("fields=name&fields=age&limit=5".to_owned()),
                String::new()
            ),
            (
                "PATCH".to_owned(),
                "/v1/pets/7/name".to_owned(),
                None,
                r#"{"name":"Rex"}"#.to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn a_path_argument_reaches_the_listener_as_one_segment_or_not_at_all() {
    let server = Server::default();
    let addr = http_server(server.clone()).await;
    let executor = NodeExecutor::new(http_registry(addr, "trusted: false"), Default::default());
    for id in [
        "..",
        ".",
        "%2e%2e",
        ".%2E",
        "%252e%252e",
        "a/../..",
        "a%2Fb",
        "a\\b",
        "",
    ] {
        let refused = executor
            .execute(execution("acme", "pets.rename", json!({"id": id})))
            .await
            .unwrap_err();
        assert!(refused.message.contains("argument id"), "{id:?}: {refused}");
    }
    assert!(server.seen.lock().unwrap().is_empty(), "nothing was sent");
    for id in ["...", "a.b", "%41"] {
        executor
            .execute(execution("acme", "pets.rename", json!({"id": id})))
            .await
            .unwrap();
    }
    // The request line carries the path exactly as built: nothing resolved, nothing decoded.
    let paths: Vec<String> = server
        .seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.1.clone())
        .collect();
    assert_eq!(
        paths,
        [
            "/v1/pets/.../name",
            "/v1/pets/a.b/name",
            "/v1/pets/%2541/name"
        ]
    );
}

#[tokio::test]
async fn only_retry_safe_calls_are_retried_after_a_5xx() {
    let server = Server::default();
    let addr = http_server(server.clone()).await;
    let executor = node_executor(http_registry(addr, "retries: {attempts: 2, backoffMs: 1}"));

    server.failing.store(1, Ordering::SeqCst);
    let out = executor
        .execute(execution("acme", "pets.get", json!({"id": 1})))
        .await
        .unwrap();
    assert!(out.is_error, "not retry-safe: the 503 is the answer");
    assert_eq!(server.hits.load(Ordering::SeqCst), 1);

    server.failing.store(1, Ordering::SeqCst);
    let mut safe = execution("acme", "pets.get", json!({"id": 1}));
    safe.retry_safe = true;
    let out = executor.execute(safe.clone()).await.unwrap();
    assert!(!out.is_error, "the retry succeeded");
    assert_eq!(server.hits.load(Ordering::SeqCst), 3);

    // Retries run out: one attempt and two retries, and the last answer stands.
    server.failing.store(10, Ordering::SeqCst);
    let out = executor.execute(safe).await.unwrap();
    assert!(out.is_error);
    assert_eq!(server.hits.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn the_breaker_fails_fast_after_consecutive_failures_and_recovers_after_cooldown() {
    let server = Server::default();
    let addr = http_server(server.clone()).await;
    let executor = node_executor(http_registry(
        addr,
        "circuitBreaker: {failures: 3, cooldownMs: 200}",
    ));
    server.failing.store(3, Ordering::SeqCst);
    for _ in 0..3 {
        let out = executor
            .execute(execution("acme", "pets.get", json!({"id": 1})))
            .await
            .unwrap();
        assert!(out.is_error);
    }
    let err = executor
        .execute(execution("acme", "pets.get", json!({"id": 1})))
        .await
        .unwrap_err();
    assert!(
        err.message
            .starts_with("upstream pets is failing; circuit open for"),
        "{err}"
    );
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        3,
        "the open breaker sent nothing"
    );

    // After the cooldown a probe goes through; it succeeds, and the breaker closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let recovered = loop {
        match executor
            .execute(execution("acme", "pets.get", json!({"id": 1})))
            .await
        {
            Ok(out) => break out,
            Err(e) => {
                assert!(e.message.contains("circuit open"), "{e}");
                assert!(
                    Instant::now() < deadline,
                    "the breaker never let a probe through"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(!recovered.is_error);
    assert_eq!(server.hits.load(Ordering::SeqCst), 4);
    let out = executor
        .execute(execution("acme", "pets.get", json!({"id": 1})))
        .await
        .unwrap();
    assert!(!out.is_error);
}

/// A hostile MCP upstream: `initialize` is answered, and every `tools/call` gets an event
/// stream that never ends and never answers, a ping and a notification every 20 ms. Counts the
/// calls it took and the streams that ended because their connection went away.
async fn endless_stream_upstream(calls: Arc<AtomicUsize>, ended: Arc<AtomicUsize>) -> SocketAddr {
    /// Counts the stream as ended when axum drops it: its connection is gone.
    struct Ends(Arc<AtomicUsize>);
    impl Drop for Ends {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let answer = move |request: Request| {
        let (calls, ended) = (calls.clone(), ended.clone());
        async move {
            let body = axum::body::to_bytes(request.into_body(), 1 << 20)
                .await
                .unwrap();
            let message: Value = serde_json::from_slice(&body).unwrap();
            let id = message["id"].clone();
            match message["method"].as_str() {
                Some("initialize") => axum::response::Response::builder()
                    .header("content-type", "application/json")
                    .header("mcp-session-id", "s1")
                    .body(axum::body::Body::from(
                        json!({"jsonrpc": "2.0", "id": id, "result": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {"tools": {}},
                            "serverInfo": {"name": "endless", "version": "0"},
                        }})
                        .to_string(),
                    ))
                    .unwrap(),
                Some("tools/call") => {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let events = futures::stream::unfold(Ends(ended), |ends| async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let event = ": ping\n\ndata: {\"jsonrpc\":\"2.0\",\"method\":\
                                     \"notifications/progress\",\"params\":{}}\n\n";
                        Some((Ok::<_, std::convert::Infallible>(event), ends))
                    });
                    axum::response::Response::builder()
                        .header("content-type", "text/event-stream")
                        .header("mcp-session-id", "s1")
                        .body(axum::body::Body::from_stream(events))
                        .unwrap()
                }
                _ => axum::response::Response::builder()
                    .status(StatusCode::ACCEPTED)
                    .header("mcp-session-id", "s1")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            }
        }
    };
    serve_mcp(answer).await
}

#[tokio::test]
async fn an_upstream_stream_that_never_answers_ends_at_the_timeout_and_its_connection_is_closed() {
    let (calls, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let addr = endless_stream_upstream(calls.clone(), ended.clone()).await;
    let executor = node_executor(registry(&mcp_upstream(
        addr,
        "trusted: true, timeoutMs: 300",
    )));
    for round in 1..=2 {
        let started = Instant::now();
        let err = executor
            .execute(execution("acme", "kb.echo", json!({})))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(err.message.contains("did not answer within"), "{err}");
        // The upstream's pings and notifications keep coming: only the deadline ends the call.
        assert!(took >= Duration::from_millis(300), "ended after {took:?}");
        assert!(took < Duration::from_secs(5), "held for {took:?}");
        // The connection that carried the stream is closed, not kept for the next call (where
        // the rest of the stream would be read as its answer): the upstream sees its stream
        // end once for every call it took.
        let deadline = Instant::now() + Duration::from_secs(5);
        while ended.load(Ordering::SeqCst) < calls.load(Ordering::SeqCst)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let taken = calls.load(Ordering::SeqCst);
        assert!(
            taken >= round,
            "round {round}: {taken} calls reached the upstream"
        );
        assert_eq!(ended.load(Ordering::SeqCst), taken, "round {round}");
    }
}
