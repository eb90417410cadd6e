//! `McpUpstream`: a real MCP server for tests (rmcp's streamable HTTP service on axum), on
//! 127.0.0.1 with a port of its own, that records every `tools/call` it receives: the tool, its
//! arguments and the request's `_meta`, where the gateway puts the resolved skill context and
//! the trace context. Tests count side effects here, at the far end of the wire.
//!
//! It serves statelessly with JSON responses, so a client may speak either revision: 2025-11-25
//! (an `initialize`, then requests without a session) or 2026-07-28 (per-request metadata).
//! Its tools:
//! - `echo {text}`, read-only: answers the text, and as structured content the
//!   `dev.gatehouse/skill-context` and `traceparent` it found in `_meta`;
//! - `transfer {from, to, amount}`, destructive: the side effect, counted by `transfers()`;
//! - `add {a, b}`, read-only and idempotent: answers the sum.
//!
//! Like `RecordingUpstream` it runs on its own thread and runtime, so it outlives any node a
//! test kills.

use std::net::SocketAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Where the gateway puts the resolved skill context in an MCP request.
pub const SKILL_CONTEXT_META: &str = "dev.gatehouse/skill-context";

/// One `tools/call` the upstream received, recorded when it arrived, valid or not.
#[derive(Debug, Clone, PartialEq)]
pub struct McpCall {
    pub tool: String,
    /// The call's arguments; `null` if it had none.
    pub arguments: Value,
    /// The request's `_meta`, as received (an empty object if it had none).
    pub meta: JsonObject,
    /// The HTTP `Authorization` header of the request, if any.
    pub authorization: Option<String>,
    /// Unix milliseconds, comparable with the registry's timestamps.
    pub at_unix_ms: u64,
}

impl McpCall {
    /// `_meta["dev.gatehouse/skill-context"]` as text, if it was a string.
    pub fn skill_context(&self) -> Option<&str> {
        self.meta.get(SKILL_CONTEXT_META).and_then(Value::as_str)
    }

    /// `_meta["traceparent"]`, if it was a string.
    pub fn traceparent(&self) -> Option<&str> {
        self.meta.get("traceparent").and_then(Value::as_str)
    }
}

#[derive(Debug, Default)]
struct Log {
    calls: Vec<McpCall>,
    /// The arguments of every `transfer` that ran.
    transfers: Vec<Value>,
    /// Tools that answer an error result from now on, with its text.
    failing: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Shared {
    log: Mutex<Log>,
    changed: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct McpUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for McpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl McpUpstream {
    /// Binds 127.0.0.1:0 and serves MCP at `/mcp` on a thread of its own.
    pub fn start() -> McpUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let addr = listener.local_addr().expect("the bound address");
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop.child_token());
        let server = Server {
            shared: shared.clone(),
        };
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mcp-upstream".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("mcp-upstream")
                    .enable_all()
                    .build()
                    .expect("the MCP upstream's runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped.cancelled() => {}
                    }
                });
                runtime.shutdown_background();
            })
            .expect("the MCP upstream's thread");
        McpUpstream {
            addr,
            shared,
            stop,
            thread: Some(thread),
        }
    }

    /// The MCP endpoint, to declare as an `mcp` upstream's URL.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every `tools/call` received so far, in order of arrival.
    pub fn calls(&self) -> Vec<McpCall> {
        lock(&self.shared.log).calls.clone()
    }

    /// How many `tools/call`s named `tool` were received.
    pub fn count_for(&self, tool: &str) -> usize {
        lock(&self.shared.log)
            .calls
            .iter()
            .filter(|c| c.tool == tool)
            .count()
    }

    /// The arguments of every `transfer` that ran: the side effects.
    pub fn transfers(&self) -> Vec<Value> {
        lock(&self.shared.log).transfers.clone()
    }

    /// From now on, `tool` answers an error result (`isError: true`) with this text and runs
    /// nothing.
    pub fn fail(&self, tool: &str, text: &str) {
        lock(&self.shared.log)
            .failing
            .push((tool.to_owned(), text.to_owned()));
    }

    /// Waits until the recorded calls satisfy `done`, up to `timeout`; whether they did.
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(&[McpCall]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut log = lock(&self.shared.log);
        loop {
            if done(&log.calls) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            log = self
                .shared
                .changed
                .wait_timeout(log, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until `tool` has received at least `n` calls.
    pub fn wait_for_count(&self, tool: &str, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |all| {
            all.iter().filter(|c| c.tool == tool).count() >= n
        })
    }
}

impl Drop for McpUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Debug, Clone)]
struct Server {
    shared: Arc<Shared>,
}

/// The tools as `tools/list` answers them.
fn tools() -> Vec<Tool> {
    let specs = [
        json!({
            "name": "echo",
            "description": "Answers the text, and the skill context and trace context it received.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }),
        json!({
            "name": "transfer",
            "description": "Moves an amount from one account to another.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "from": {"type": "string"},
                    "to": {"type": "string"},
                    "amount": {"type": "number", "minimum": 0},
                },
                "required": ["from", "to", "amount"],
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true},
        }),
        json!({
            "name": "add",
            "description": "Adds two numbers.",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            "annotations": {"readOnlyHint": true, "idempotentHint": true, "openWorldHint": false},
        }),
    ];
    specs
        .into_iter()
        .map(|spec| serde_json::from_value(spec).expect("a valid tool"))
        .collect()
}

fn invalid(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

fn text_argument(arguments: &JsonObject, name: &str) -> Result<String, ErrorData> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("`{name}` must be a string")))
}

fn number_argument(arguments: &JsonObject, name: &str) -> Result<f64, ErrorData> {
    arguments
        .get(name)
        .and_then(Value::as_f64)
        .ok_or_else(|| invalid(format!("`{name}` must be a number")))
}

impl Server {
    fn record(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> McpCall {
        // The service moves `_meta` into the context; keep both, the request's last.
        let mut meta = context.meta.0.0.clone();
        if let Some(own) = &request.meta {
            meta.extend(own.0.0.clone());
        }
        let authorization = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(http::header::AUTHORIZATION))
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let call = McpCall {
            tool: request.name.to_string(),
            arguments: request.arguments.clone().map_or(Value::Null, Value::Object),
            meta,
            authorization,
            at_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        lock(&self.shared.log).calls.push(call.clone());
        self.shared.changed.notify_all();
        call
    }

    fn run(&self, call: &McpCall) -> Result<CallToolResult, ErrorData> {
        let failing = lock(&self.shared.log)
            .failing
            .iter()
            .rev()
            .find(|(tool, _)| *tool == call.tool)
            .map(|(_, text)| text.clone());
        if let Some(text) = failing {
            return Ok(CallToolResult::error(vec![ContentBlock::text(text)]));
        }
        let empty = JsonObject::new();
        let arguments = call.arguments.as_object().unwrap_or(&empty);
        match call.tool.as_str() {
            "echo" => {
                let text = text_argument(arguments, "text")?;
                let seen = json!({
                    "text": text,
                    "skill_context": call.meta.get(SKILL_CONTEXT_META),
                    "traceparent": call.meta.get("traceparent"),
                });
                let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
                result.structured_content = Some(seen);
                Ok(result)
            }
            "transfer" => {
                let from = text_argument(arguments, "from")?;
                let to = text_argument(arguments, "to")?;
                let amount = number_argument(arguments, "amount")?;
                let executed = {
                    let mut log = lock(&self.shared.log);
                    log.transfers.push(call.arguments.clone());
                    log.transfers.len()
                };
                self.shared.changed.notify_all();
                Ok(CallToolResult::structured(json!({
                    "from": from, "to": to, "amount": amount, "transfer": executed,
                })))
            }
            "add" => {
                let sum = number_argument(arguments, "a")? + number_argument(arguments, "b")?;
                let mut result = CallToolResult::success(vec![ContentBlock::text(sum.to_string())]);
                result.structured_content = Some(json!({"sum": sum}));
                Ok(result)
            }
            other => Err(invalid(format!("unknown tool `{other}`"))),
        }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = self.record(&request, &context);
        self.run(&call).map(Into::into)
    }
}
