//! The node's HTTP listener: liveness and readiness for load balancers and supervisors (open to
//! all), Prometheus metrics at `/metrics` (see `gatehouse_gateway::metrics`; behind a token when the operator
//! sets one), the MCP front at `/mcp` (see `crate::mcp`), the A2A front's card and JSON-RPC
//! binding (see `crate::a2a`), and the approvals console at `/console` with its JSON API at
//! `/api/v1` (see `crate::console`).

use crate::mcp::McpSettings;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use gatehouse_cluster::readiness::Readiness;
use gatehouse_gateway::metrics::{self, Metrics, ScrapeToken};
use gatehouse_gateway::pipeline::Pipeline;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `stop` ends the MCP front's sessions and both fronts' streams when the node stops. `/metrics`
/// asks for `token` when there is one; `/healthz` and `/readyz` are always open.
// One argument per part of the listener, each passed once, at start.
#[allow(clippy::too_many_arguments)]
pub fn router(
    readiness: Readiness,
    metrics: Metrics,
    token: Option<ScrapeToken>,
    pipeline: Pipeline,
    mcp: McpSettings,
    a2a: Arc<crate::a2a::Front>,
    approvals: crate::services::approval::Approvals,
    stop: CancellationToken,
) -> Router {
    crate::mcp::router(pipeline, mcp, stop)
        .merge(crate::a2a::router(a2a))
        .merge(crate::console::router(approvals))
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
            get(move |headers: HeaderMap| {
                let metrics = metrics.clone();
                let token = token.clone();
                async move {
                    let presented = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    if token.as_ref().is_some_and(|t| !t.admits(presented)) {
                        return (
                            StatusCode::UNAUTHORIZED,
                            [(header::WWW_AUTHENTICATE, METRICS_CHALLENGE)],
                            "/metrics needs this node's metrics token as a bearer token\n",
                        )
                            .into_response();
                    }
                    (
                        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
                        metrics.render().await,
                    )
                        .into_response()
                }
            }),
        )
}

/// What a scrape without the metrics token is told (RFC 6750).
const METRICS_CHALLENGE: &str = "Bearer realm=\"gatehouse-metrics\"";
