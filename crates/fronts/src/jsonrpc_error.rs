//! Gateway errors as JSON-RPC 2.0 error objects: the one map from a [`GatewayError`] to a
//! JSON-RPC error, which both JSON-RPC fronts answer through: MCP (as `rmcp::ErrorData`) and
//! A2A (as `a2a::A2AError`, which the A2A crates carry over their gRPC binding as well). The
//! message reads `code: message`, and `data` carries the code, whether trying again can help and
//! the hint, as an MCP error result's `structuredContent.error` does.
//!
//! Errors of JSON-RPC itself (bytes that are not JSON, JSON that is not one message) come
//! before any gateway work; they are [`JsonRpcError::new`] with the spec's code, so that every
//! error body either front writes has this one shape.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use gatehouse_gateway::pipeline::{ErrorCode, GatewayError};
use serde_json::{Value, json};
use std::collections::HashMap;

pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;
pub const INTERNAL_ERROR: i32 = -32603;

/// A JSON-RPC 2.0 error object.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonRpcError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

/// The JSON-RPC error a caller gets for `error`. A request refused as a whole (no credential, no
/// permission) is an invalid request; what the caller asked for and can change is invalid
/// params; the gateway's own trouble is an internal error.
pub fn jsonrpc_error(error: &GatewayError) -> JsonRpcError {
    let code = match error.code {
        ErrorCode::Unauthenticated | ErrorCode::PermissionDenied => INVALID_REQUEST,
        ErrorCode::NotFound
        | ErrorCode::UnknownTool
        | ErrorCode::InvalidArguments
        | ErrorCode::InvalidRequest
        | ErrorCode::Denied
        | ErrorCode::RateLimited
        | ErrorCode::ApprovalPending
        | ErrorCode::Rejected
        | ErrorCode::Expired
        | ErrorCode::Cancelled
        | ErrorCode::OutcomeUnknown
        | ErrorCode::Conflict
        | ErrorCode::AlreadyExists => INVALID_PARAMS,
        ErrorCode::UpstreamFailed
        | ErrorCode::Unavailable
        | ErrorCode::Misconfigured
        | ErrorCode::DeadlineExceeded
        | ErrorCode::Internal => INTERNAL_ERROR,
    };
    JsonRpcError {
        code,
        message: format!("{}: {}", error.code.as_str(), error.message),
        data: Some(json!({
            "code": error.code.as_str(),
            "retryable": error.retryable,
            "hint": error.hint,
        })),
    }
}

impl JsonRpcError {
    /// An error of JSON-RPC itself, with the spec's `code`.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        JsonRpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// An HTTP answer carrying the error as the JSON-RPC response to request `id`.
    pub fn into_response(self, id: Value, status: StatusCode) -> Response {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = self.data {
            error["data"] = data;
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

impl From<JsonRpcError> for rmcp::ErrorData {
    fn from(e: JsonRpcError) -> Self {
        rmcp::ErrorData::new(rmcp::model::ErrorCode(e.code), e.message, e.data)
    }
}

/// A2A's error carries typed details where JSON-RPC has `data`: the data goes as a
/// `google.protobuf.Struct` detail.
impl From<JsonRpcError> for a2a::A2AError {
    fn from(e: JsonRpcError) -> Self {
        let error = a2a::A2AError::new(e.code, e.message);
        match e.data {
            Some(Value::Object(fields)) => {
                let fields: HashMap<String, Value> = fields.into_iter().collect();
                error.with_details(vec![a2a::errordetails::TypedDetail::from_struct(fields)])
            }
            _ => error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_jsonrpc_code() {
        let expected = [
            (ErrorCode::Unauthenticated, INVALID_REQUEST),
            (ErrorCode::PermissionDenied, INVALID_REQUEST),
            (ErrorCode::NotFound, INVALID_PARAMS),
            (ErrorCode::UnknownTool, INVALID_PARAMS),
            (ErrorCode::InvalidArguments, INVALID_PARAMS),
            (ErrorCode::Denied, INVALID_PARAMS),
            (ErrorCode::RateLimited, INVALID_PARAMS),
            (ErrorCode::ApprovalPending, INVALID_PARAMS),
            (ErrorCode::Rejected, INVALID_PARAMS),
            (ErrorCode::Expired, INVALID_PARAMS),
            (ErrorCode::Cancelled, INVALID_PARAMS),
            (ErrorCode::UpstreamFailed, INTERNAL_ERROR),
            (ErrorCode::OutcomeUnknown, INVALID_PARAMS),
            (ErrorCode::Conflict, INVALID_PARAMS),
            (ErrorCode::Unavailable, INTERNAL_ERROR),
            (ErrorCode::Misconfigured, INTERNAL_ERROR),
            (ErrorCode::InvalidRequest, INVALID_PARAMS),
            (ErrorCode::AlreadyExists, INVALID_PARAMS),
            (ErrorCode::DeadlineExceeded, INTERNAL_ERROR),
            (ErrorCode::Internal, INTERNAL_ERROR),
        ];
        assert_eq!(expected.len(), ErrorCode::ALL.len());
        for (code, jsonrpc) in expected {
            let error = jsonrpc_error(&GatewayError::new(code, "the words", "a hint"));
            assert_eq!(error.code, jsonrpc, "{code:?}");
            assert_eq!(
                error.message,
                format!("{}: the words", code.as_str()),
                "{code:?}"
            );
            let data = error.data.expect("data");
            assert_eq!(data["code"], code.as_str());
            assert_eq!(data["hint"], "a hint");
        }
    }

    #[test]
    fn both_fronts_carry_the_same_error() {
        let error = jsonrpc_error(&GatewayError::unavailable("the audit log takes no entry"));
        let mcp = rmcp::ErrorData::from(error.clone());
        assert_eq!(mcp.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
        assert_eq!(mcp.message, error.message);
        assert_eq!(mcp.data.as_ref().unwrap()["code"], "unavailable");
        let a2a = a2a::A2AError::from(error.clone());
        assert_eq!(a2a.code, a2a::error_code::INTERNAL_ERROR);
        assert_eq!(a2a.message, error.message);
        let details = a2a.details.expect("details");
        assert_eq!(details[0].value["code"], "unavailable");
        assert_eq!(details[0].value["retryable"], true);
    }

    #[tokio::test]
    async fn over_http_it_is_a_jsonrpc_response() {
        let response = JsonRpcError::new(PARSE_ERROR, "parse error: EOF")
            .into_response(Value::Null, StatusCode::BAD_REQUEST);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": null,
                   "error": {"code": -32700, "message": "parse error: EOF"}})
        );
    }
}
