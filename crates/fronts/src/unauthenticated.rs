//! What the MCP and A2A fronts answer an HTTP request that did not authenticate.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_gateway::auth::AuthError;
use gatehouse_gateway::pipeline::GatewayError;

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
