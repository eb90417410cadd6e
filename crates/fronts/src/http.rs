//! The node's HTTP listener: liveness and readiness for load balancers and supervisors (open to
//! all), Prometheus metrics at `/metrics` (see `gatehouse_gateway::metrics`; behind a token when the operator
//! sets one), the MCP front at `/mcp` (see `crate::mcp`), and the A2A front's card and JSON-RPC
//! binding (see `crate::a2a`).

use crate::mcp::McpSettings;
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gatehouse_cluster::readiness::Readiness;
use gatehouse_gateway::auth::AuthError;
use gatehouse_gateway::metrics::{self, Metrics, ScrapeToken};
use gatehouse_gateway::pipeline::{GatewayError, Pipeline};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `stop` ends the MCP front's sessions and both fronts' streams when the node stops. `/metrics`
/// asks for `token` when there is one; `/healthz` and `/readyz` are always open.
pub fn router(
    readiness: Readiness,
    metrics: Metrics,
    token: Option<ScrapeToken>,
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

/// What the MCP and A2A fronts answer a request that did not authenticate, before any JSON-RPC:
/// 401 with the RFC 6750 challenge and a JSON body `{"error":{"code":"unauthenticated",
/// "message":...}}`.
pub fn unauthorized(e: AuthError) -> Response {
    let challenge = HeaderValue::from_str(&e.www_authenticate())
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"gatehouse\""));
    let error = GatewayError::from(e);
    let body = serde_json::json!({
        "error": {"code": error.code.as_str(), "message": error.message}
    });
    let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_gateway::auth::AuthErrorKind;
    use serde_json::{Value, json};

    #[tokio::test]
    async fn an_http_refusal_is_a_401_with_the_challenge_and_a_json_error() {
        let error = AuthError {
            kind: AuthErrorKind::UnknownPrincipal,
            message: "unknown API key".into(),
        };
        let response = unauthorized(error);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"gatehouse\", error=\"invalid_token\", error_description=\"unknown API key\""
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": "unauthenticated", "message": "unknown API key"}})
        );
    }
}
