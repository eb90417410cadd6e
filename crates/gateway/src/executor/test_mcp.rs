//! A real MCP server for tests: streamable HTTP on 127.0.0.1, a tool list the test can change
//! while it runs (served two to a page), and tools that show what arrived.

use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What the test controls and observes.
#[derive(Clone, Default)]
pub(crate) struct Upstream {
    /// The listing, as MCP `Tool` JSON objects.
    pub tools: Arc<Mutex<Vec<Value>>>,
    /// `tools/call` requests received.
    pub calls: Arc<AtomicUsize>,
    /// `tools/list` requests received.
    pub lists: Arc<AtomicUsize>,
    /// TCP connections accepted.
    pub connections: Arc<AtomicUsize>,
    /// The server's sessions, which a test may make it forget.
    pub sessions: Arc<LocalSessionManager>,
}

impl Upstream {
    /// Forgets every session, as a restarted server would.
    pub async fn forget_sessions(&self) {
        self.sessions.sessions.write().await.clear();
    }
}

#[derive(Clone)]
struct Handler(Upstream);

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.lists.fetch_add(1, Ordering::SeqCst);
        let start: usize = request
            .and_then(|r| r.cursor)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let tools = self.0.tools.lock().unwrap().clone();
        let page: Vec<Value> = tools.iter().skip(start).take(2).cloned().collect();
        let mut result = json!({"tools": page});
        if start + 2 < tools.len() {
            result["nextCursor"] = json!((start + 2).to_string());
        }
        Ok(serde_json::from_value(result).expect("a tools/list result"))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        let header = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get("authorization"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let result = match request.name.as_ref() {
            // Answers with what came besides the arguments.
            "whoami" => CallToolResult::structured(json!({
                "meta": serde_json::to_value(&context.meta).unwrap(),
                "id": context.id.to_string(),
                "arguments": request.arguments,
                "authorization": header,
            })),
            "refuse" => CallToolResult::structured_error(json!({"why": "no"})),
            "broken" => return Err(ErrorData::internal_error("broken on purpose", None)),
            other => CallToolResult::structured(json!({"called": other})),
        };
        Ok(result.into())
    }
}

/// Serves `upstream` on a fresh port; its MCP endpoint is `http://{addr}/mcp`.
pub(crate) async fn serve(upstream: Upstream) -> SocketAddr {
    let connections = upstream.connections.clone();
    let sessions = upstream.sessions.clone();
    let service: StreamableHttpService<Handler, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(Handler(upstream.clone())),
        sessions,
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = Counting {
        listener,
        accepted: connections,
    };
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// A listener that counts the connections it accepts.
struct Counting {
    listener: tokio::net::TcpListener,
    accepted: Arc<AtomicUsize>,
}

impl axum::serve::Listener for Counting {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let accepted = axum::serve::Listener::accept(&mut self.listener).await;
        self.accepted.fetch_add(1, Ordering::SeqCst);
        accepted
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
