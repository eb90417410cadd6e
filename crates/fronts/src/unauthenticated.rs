//! What the MCP and A2A fronts answer an HTTP request that did not authenticate.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_gateway::auth::{AuthError, NotAuthenticated};
use gatehouse_gateway::pipeline::GatewayError;

/// [`unauthorized`] for a refused credential; for one this node could not check (it is behind
/// and could not catch up), 503 with `Retry-After: 1` and a JSON body of code `unavailable`.
pub fn refusal(e: NotAuthenticated) -> Response {
    match e {
        NotAuthenticated::Refused(e) => unauthorized(e),
        NotAuthenticated::Unsure(_) => {
            let error = GatewayError::from(e);
            let body = serde_json::json!({
                "error": {"code": error.code.as_str(), "message": error.message}
            });
            let mut response = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

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

    #[tokio::test]
    async fn a_key_the_node_could_not_check_is_a_503_to_retry_not_a_401() {
        let response = refusal(NotAuthenticated::Unsure(
            "unknown API key, and this node could not catch up; retry".into(),
        ));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert!(!response.headers().contains_key(header::WWW_AUTHENTICATE));
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "unavailable");
    }
}
