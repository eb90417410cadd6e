//! The MCP front: `/mcp` on the node's HTTP listener, streamable HTTP through rmcp, serving
//! clients of MCP 2025-11-25 (sessions opened by `initialize`) and 2026-07-28 (stateless).
//!
//! A request passes the guard (credential, tenant, body size, JSON-RPC shape), then rmcp (Host
//! and Origin checks, sessions, protocol versions), then the `Handler` (handler.rs), which turns
//! MCP requests into calls of the shared [`Pipeline`] and its envelopes back into MCP results.
//! A stateless `tools/call` that rmcp would pass to the handler as it is goes the direct path
//! instead (direct.rs): answered by the guard through the same handler code, without rmcp's
//! per-request service.
//! Nothing here decides whether a call may run: that is the pipeline's and the registry's.

mod catalog;
mod direct;
mod guard;
mod guide;
mod handler;
mod render;
mod settings;
mod tasks;
mod tools;

pub use guard::Agent;
pub use render::{
    META_CALL_ID, META_EFFECTIVE_MODE, META_IDEMPOTENCY_KEY, META_POLICY_DECISION, META_TRACE_ID,
};
pub use tools::{CALL_STATUS, LOAD_TOOLSET};

use axum::Router;
use gatehouse_gateway::pipeline::Pipeline;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
pub use settings::McpSettings;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;

/// Where the front is mounted.
pub const PATH: &str = "/mcp";

/// What every `/mcp` request shares.
#[derive(Debug)]
pub struct Front {
    pub pipeline: Pipeline,
    pub settings: McpSettings,
    /// `settings.allowed_hosts`, read once for the direct path.
    pub hosts: direct::AllowedHosts,
    /// Cancelled when the node stops: sessions, their streams and watchers end.
    pub stop: CancellationToken,
}

/// The `/mcp` route, guarded.
pub fn router(pipeline: Pipeline, settings: McpSettings, stop: CancellationToken) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_max_request_body_bytes(settings.max_body_bytes)
        // A stateless request that needs no stream is answered as plain JSON.
        .with_json_response(true)
        .with_allowed_origins(settings.allowed_origins.clone())
        .enforce_origin_validation();
    config = if settings.allowed_hosts.iter().any(|h| h == "*") {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(settings.allowed_hosts.clone())
    };
    let front = Arc::new(Front {
        pipeline,
        hosts: direct::AllowedHosts::new(&settings.allowed_hosts),
        settings,
        stop,
    });
    let for_sessions = front.clone();
    let service = StreamableHttpService::new(
        move || Ok(handler::Handler::new(for_sessions.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(PATH, Shared(Arc::new(service)))
        .route_layer(axum::middleware::from_fn_with_state(front, guard::guard))
}

/// rmcp's service behind an `Arc`. axum clones a route's service for every request, four times
/// on the way through the guard's layers, and rmcp's clone copies its whole configuration (the
/// allowed hosts and origins, a `String` each): allocations a direct call, which never reaches
/// rmcp, paid for nothing. rmcp's service is cloned only for a request it serves.
#[derive(Debug)]
struct Shared<S>(Arc<S>);

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<S, R> tower::Service<R> for Shared<S>
where
    S: tower::Service<R> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // rmcp's service is always ready: it takes each request on a clone of its own.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        S::clone(&self.0).call(request)
    }
}
