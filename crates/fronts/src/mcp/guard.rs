//! What `/mcp` checks before the MCP layer sees a request: who is calling (a bearer API key or
//! JWT; 401 with `WWW-Authenticate` otherwise, never a JSON-RPC answer), for which tenant (its
//! only agent tenant, or the one the `Gatehouse-Tenant` header names; 400 when that is unclear), that the body is
//! no bigger than allowed (413), and that it is JSON-RPC at all (-32700 for bytes that are not
//! JSON, -32600 for JSON that is not a JSON-RPC message, -32602 for a known method whose params
//! do not fit). The caller goes into the request's extensions, where rmcp hands it to the
//! handler inside `http::request::Parts`. A stateless `tools/call` the direct path takes
//! (direct.rs) is answered here, without rmcp.

use super::{Front, direct};
use crate::jsonrpc_error::{INVALID_PARAMS, INVALID_REQUEST, JsonRpcError, PARSE_ERROR};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gatehouse_gateway::auth::{Caller, TENANT_HEADER, TenantChoice, agent_tenant};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonRpcVersion2_0,
    RequestId,
};
use serde_json::{Value, json};
use std::sync::Arc;

/// The request methods of MCP, whose params rmcp parses.
const MCP_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
];

/// The authenticated caller of one `/mcp` request and the tenant it acts for.
#[derive(Debug, Clone)]
pub struct Agent {
    pub caller: Caller,
    /// `None` when the caller is an agent of no tenant (it sees only the gateway's own tools).
    pub tenant: Option<String>,
}

pub async fn guard(State(front): State<Arc<Front>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let caller = match front.pipeline.authenticate_http(&parts.headers).await {
        Ok(caller) => caller,
        Err(e) => return crate::unauthenticated::refusal(e),
    };
    let requested = parts
        .headers
        .get(TENANT_HEADER)
        .and_then(|v| v.to_str().ok());
    let tenant = match agent_tenant(&caller, requested) {
        Ok(tenant) => Some(tenant),
        // It sees only the gateway's own tools, and its calls find no tool.
        Err(TenantChoice::NoAgentRole { .. }) => None,
        Err(choice @ (TenantChoice::Ambiguous { .. } | TenantChoice::NotAgentOf { .. })) => {
            return (StatusCode::BAD_REQUEST, format!("{choice}\n")).into_response();
        }
    };
    parts.extensions.insert(Agent { caller, tenant });
    if parts.method != Method::POST {
        return next.run(Request::from_parts(parts, body)).await;
    }

    let max = front.settings.max_body_bytes;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_large(max);
    }
    let mut bytes = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if bytes.len() + chunk.len() > max => return too_large(max),
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(e) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("reading the request body: {e}\n"),
                )
                    .into_response();
            }
        }
    }
    let message = match check_jsonrpc(&bytes) {
        Ok(message) => message,
        Err(response) => return *response,
    };
    if let Some(call) = direct::take(&front, &parts, message)
        && let Some(agent) = parts.extensions.get::<Agent>()
    {
        front.pipeline.metrics().count_direct_mcp_call();
        return direct::answer(&front, agent, &parts.headers, call).await;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn too_large(max: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {max} bytes\n"),
    )
        .into_response()
}

/// The message, or the spec's JSON-RPC codes for what rmcp would otherwise refuse with a bare
/// HTTP status.
fn check_jsonrpc(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Box<Response>> {
    // The request agents send most, read as what it is.
    if let Some(call) = tools_call(bytes) {
        return Ok(call);
    }
    // Most messages are well formed: an object, read once as rmcp's type (which would also
    // take an array for a message). Whatever that refuses, or takes for a method of its own, is
    // read again to tell the caller what is wrong.
    if bytes.trim_ascii_start().starts_with(b"{") {
        match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
            Ok(ClientJsonRpcMessage::Request(request))
                if matches!(&request.request, ClientRequest::CustomRequest(c)
                    if MCP_METHODS.contains(&c.method.as_str())) => {}
            Ok(message) => return Ok(message),
            Err(_) => {}
        }
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| refused(Value::Null, PARSE_ERROR, format!("parse error: {e}")))?;
    let Value::Object(message) = &value else {
        return Err(refused(
            Value::Null,
            INVALID_REQUEST,
            "invalid request: send one JSON-RPC message as a JSON object (batches are not \
             supported)"
                .into(),
        ));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    // A number rmcp cannot carry as an id (beyond i64, or a fraction) is the request's fault,
    // not its params'.
    let id_ok = id.is_null() || serde_json::from_value::<RequestId>(id.clone()).is_ok();
    let is_request_or_notification = message.get("method").is_some_and(Value::is_string);
    let is_response = message.contains_key("id")
        && (message.contains_key("result") || message.contains_key("error"));
    if message.get("jsonrpc") != Some(&json!("2.0"))
        || !id_ok
        || !(is_request_or_notification || is_response)
    {
        let id = if id_ok { id } else { Value::Null };
        return Err(refused(
            id,
            INVALID_REQUEST,
            "invalid request: not a JSON-RPC 2.0 message".into(),
        ));
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Err(e) => Err(refused(id, INVALID_PARAMS, format!("invalid params: {e}"))),
        // rmcp takes a known method whose params do not fit for a method of its own.
        Ok(ClientJsonRpcMessage::Request(request))
            if matches!(&request.request, ClientRequest::CustomRequest(c)
                if MCP_METHODS.contains(&c.method.as_str())) =>
        {
            Err(refused(
                id,
                INVALID_PARAMS,
                "invalid params: they do not fit the method".into(),
            ))
        }
        Ok(message) => Ok(message),
    }
}

/// A well-formed `tools/call` request, read straight into rmcp's types: the message rmcp's own
/// reading makes of it (untagged enums tried in turn, `_meta` split off through a flattened
/// struct; about a twentieth of a read-only call's CPU), or `None` for anything else, which
/// rmcp then reads. `the_tools_call_reading_is_rmcps` holds the two to the same result.
fn tools_call(bytes: &[u8]) -> Option<ClientJsonRpcMessage> {
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[allow(dead_code)]
        jsonrpc: JsonRpcVersion2_0,
        id: RequestId,
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        params: CallToolRequestParams,
        // rmcp takes a message with either key, even `null`, for no request at all.
        #[serde(default)]
        result: Present,
        #[serde(default)]
        error: Present,
    }
    /// Whether a key was given, whatever its value.
    #[derive(Default)]
    struct Present(bool);
    impl<'de> serde::Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            serde::de::IgnoredAny::deserialize(d).map(|_| Present(true))
        }
    }
    let Call {
        id,
        method,
        mut params,
        result,
        error,
        ..
    } = serde_json::from_slice::<Call<'_>>(bytes).ok()?;
    if method != "tools/call" || result.0 || error.0 {
        return None;
    }
    // rmcp keeps a request's `_meta` beside its params, not in them.
    let meta = params.meta.take();
    let mut request = CallToolRequest::new(params);
    if let Some(meta) = meta {
        request.extensions.insert(meta);
    }
    Some(ClientJsonRpcMessage::request(
        ClientRequest::CallToolRequest(request),
        id,
    ))
}

/// A message JSON-RPC itself refuses, answered with HTTP 400.
fn refused(id: Value, code: i32, message: String) -> Box<Response> {
    Box::new(JsonRpcError::new(code, message).into_response(id, StatusCode::BAD_REQUEST))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn code(body: &str) -> Option<i64> {
        check_jsonrpc(body.as_bytes()).err().map(|response| {
            let response = *response;
            assert_eq!(response.status(), StatusCode::BAD_REQUEST);
            let (_, body) = response.into_parts();
            let bytes = futures::executor::block_on(axum::body::to_bytes(body, 1 << 20)).unwrap();
            let value: Value = serde_json::from_slice(&bytes).unwrap();
            value["error"]["code"].as_i64().unwrap()
        })
    }

    #[test]
    fn each_kind_of_malformed_message_gets_its_code() {
        assert_eq!(code("{not json"), Some(-32700));
        assert_eq!(code("[]"), Some(-32600));
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            Some(-32600)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1}"#), Some(-32600));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}"#),
            Some(-32602)
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#), None);
    }
}
