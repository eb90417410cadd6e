//! The node's HTTP listener: liveness and readiness for load balancers and supervisors,
//! Prometheus metrics at `/metrics` (see `crate::metrics`), the MCP front at `/mcp` (see
//! `crate::mcp`), and the A2A front's card and JSON-RPC binding (see `crate::a2a`).

use crate::config::McpSettings;
use crate::metrics::{self, Metrics};
use crate::pipeline::Pipeline;
use crate::readiness::Readiness;
use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `stop` ends the MCP front's sessions and both fronts' streams when the node stops.
pub fn router(
    readiness: Readiness,
    metrics: Metrics,
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
                let readiness = readiness.clone();
                async move {
                    match readiness.check().await {
                        Ok(line) => (StatusCode::OK, line + "\n"),
                        Err(line) => (StatusCode::SERVICE_UNAVAILABLE, line + "\n"),
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
                        metrics.render().await,
                    )
                }
            }),
        )
}
