//! The node's HTTP listener: liveness and readiness for load balancers and supervisors, the MCP
//! front at `/mcp` (see `crate::mcp`), and the A2A front's card and JSON-RPC binding (see
//! `crate::a2a`).

use crate::config::McpSettings;
use crate::pipeline::Pipeline;
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use gatehouse_actors::Health;
use gatehouse_raft_store::Raft;
use std::sync::Arc;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// `stop` ends the MCP front's sessions and both fronts' streams when the node stops.
pub fn router(
    raft: Raft,
    health: watch::Receiver<Health>,
    pipeline: Pipeline,
    mcp: McpSettings,
    a2a: Arc<crate::a2a::Front>,
    stop: CancellationToken,
) -> Router {
    crate::mcp::router(pipeline, mcp, stop)
        .merge(crate::a2a::router(a2a))
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let raft = raft.clone();
                let health = health.borrow().clone();
                async move {
                    // Ready once the node knows a leader (writes and linearizable reads can go
                    // somewhere) and its supervision tree has given up on nothing.
                    if let Health::NotReady { reason } = health {
                        return (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {reason}\n"),
                        );
                    }
                    match raft.current_leader().await {
                        Some(leader) => (StatusCode::OK, format!("ready, leader {leader}\n")),
                        None => (StatusCode::SERVICE_UNAVAILABLE, "no leader\n".to_owned()),
                    }
                }
            }),
        )
}
