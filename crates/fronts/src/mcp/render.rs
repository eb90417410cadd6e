//! Envelopes and gateway errors as MCP results: the upstream's `CallToolResult` passed through,
//! other JSON wrapped, every result's `_meta` carrying the call's envelope, and every refusal a
//! tool-level error result (`isError: true`) whose `structuredContent.error` an agent can branch
//! on and whose text says the same in words. The methods that answer with a JSON-RPC error
//! instead take it from `crate::jsonrpc_error`.

use crate::jsonrpc_error::jsonrpc_error;
use gatehouse_gateway::pipeline::{Envelope, ErrorCode, GatewayError, trace_id};
use gatehouse_registry::{CallId, CallState};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject};
use serde_json::{Value, json};

pub const META_CALL_ID: &str = "dev.gatehouse/call-id";
pub const META_EFFECTIVE_MODE: &str = "dev.gatehouse/effective-mode";
pub const META_POLICY_DECISION: &str = "dev.gatehouse/policy-decision-id";
pub const META_TRACE_ID: &str = "dev.gatehouse/trace-id";
pub const META_IDEMPOTENCY_KEY: &str = "dev.gatehouse/idempotency-key";

/// The envelope of a call, as `_meta`.
pub fn envelope_meta(envelope: &Envelope) -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert(META_CALL_ID.into(), envelope.call_id.clone().into());
    meta.insert(
        META_EFFECTIVE_MODE.into(),
        serde_json::to_value(envelope.effective_mode).unwrap_or(Value::Null),
    );
    meta.insert(
        META_POLICY_DECISION.into(),
        envelope.policy_decision_id.clone().into(),
    );
    meta.insert(META_TRACE_ID.into(), envelope.trace_id.clone().into());
    MetaObject(meta)
}

/// The `_meta` of an answer no call stands behind (a refusal before any call existed): a trace id
/// of its own, so even a refusal can be found in the node's logs.
pub fn bare_meta() -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert(
        META_TRACE_ID.into(),
        trace_id(&CallId(String::new()), None).into(),
    );
    MetaObject(meta)
}

/// The result of a call that succeeded (or whose tool reported its own error), envelope in
/// `_meta`.
pub fn call_result(envelope: &Envelope) -> CallToolResult {
    let mut result = match envelope.result_json.as_deref() {
        Some(json) => upstream_result(json, envelope.is_error),
        None => CallToolResult::success(vec![ContentBlock::text(format!(
            "call {} succeeded with no output",
            envelope.call_id
        ))]),
    };
    result.meta = Some(envelope_meta(envelope));
    result
}

/// What an upstream answered, as a `CallToolResult`. An MCP upstream's answer is one already
/// (an object of `content`, `structuredContent`, `isError`, `_meta` and `resultType` only);
/// anything else is
/// JSON of an HTTP or built-in tool, given as text and, when it is an object, as
/// `structuredContent`.
pub fn upstream_result(json: &str, is_error: bool) -> CallToolResult {
    let value = match serde_json::from_str::<Value>(json).ok() {
        Some(Value::Object(object)) if is_tool_result(&object) => {
            // The value moves into the result: a result is passed through on every read-only
            // call. One that does not fit after all is read again for the wrapped answer.
            match serde_json::from_value::<CallToolResult>(Value::Object(object)) {
                Ok(mut result) => {
                    // The upstream's own _meta is its business; the gateway's envelope
                    // replaces it. The upstream may speak an older revision: a 2026-07-28
                    // client needs `resultType` (rmcp strips it again for older clients).
                    result.meta = None;
                    result.result_type = Some(rmcp::model::ResultType::COMPLETE);
                    if is_error {
                        result.is_error = Some(true);
                    }
                    return result;
                }
                Err(_) => serde_json::from_str(json).ok(),
            }
        }
        other => other,
    };
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(json.to_owned())])
    } else {
        CallToolResult::success(vec![ContentBlock::text(json.to_owned())])
    };
    if let Some(object @ Value::Object(_)) = value {
        result.structured_content = Some(object);
    }
    result
}

/// An object of `content` (a list), `structuredContent`, `isError`, `_meta` and `resultType`
/// only.
fn is_tool_result(object: &JsonObject) -> bool {
    object.get("content").is_some_and(Value::is_array)
        && object.keys().all(|k| {
            matches!(
                k.as_str(),
                "content" | "structuredContent" | "isError" | "_meta" | "resultType"
            )
        })
}

/// A refusal or a call that cannot give its result (yet), as an error result.
pub fn error_result(error: &GatewayError, envelope: Option<&Envelope>) -> CallToolResult {
    let mut detail = json!({
        "code": error.code.as_str(),
        "message": error.message,
        "retryable": error.retryable,
        "hint": error.hint,
    });
    if let Some(after) = error.retry_after {
        detail["retry_after_ms"] = (after.as_millis() as u64).into();
    }
    let mut words = format!("{}: {}", error.code.as_str(), error.message);
    if let Some(envelope) = envelope {
        detail["call_id"] = envelope.call_id.clone().into();
        detail["state"] = envelope.state.as_str().into();
        if let Some(at) = envelope.expires_at_ms {
            detail["expires_at"] = rfc3339(at).into();
            detail["expires_at_ms"] = at.into();
            if error.code == ErrorCode::ApprovalPending {
                words.push_str(&format!(" (approvers may act until {})", rfc3339(at)));
            }
        }
    }
    if !error.hint.is_empty() {
        words.push_str(&format!(". What to do: {}", error.hint));
    }
    let mut result = CallToolResult::error(vec![ContentBlock::text(words)]);
    result.structured_content = Some(json!({ "error": detail }));
    result.meta = Some(envelope.map_or_else(bare_meta, envelope_meta));
    result
}

/// A gateway error for the methods that answer with a JSON-RPC error (`tasks/*`,
/// `prompts/get`, `resources/read`, listings), through the map both JSON-RPC fronts share.
pub fn refused(error: GatewayError) -> rmcp::ErrorData {
    jsonrpc_error(&error).into()
}

/// The answer to a `tools/call` (or a `call_status` poll) once the call's envelope is known:
/// its result once it succeeded, else why it has none.
pub fn settled(envelope: &Envelope) -> CallToolResult {
    match (envelope.state, envelope.as_error()) {
        // A tool that ran and reported its own error: its result says what went wrong.
        (CallState::Failed, Some(_)) if envelope.result_json.is_some() => call_result(envelope),
        (_, Some(error)) => error_result(&error, Some(envelope)),
        (_, None) => call_result(envelope),
    }
}

/// `gatehouse.call_status` for a call still under way: not an error of the status call itself,
/// but the state in words and as structured content.
pub fn in_progress(envelope: &Envelope) -> CallToolResult {
    let state = envelope.state.as_str();
    let mut words = format!("call {} is {state}", envelope.call_id);
    let mut detail = json!({
        "call_id": envelope.call_id,
        "state": state,
        "tool": envelope.tool,
    });
    if let Some(at) = envelope.expires_at_ms {
        detail["expires_at"] = rfc3339(at).into();
        detail["expires_at_ms"] = at.into();
        words.push_str(&format!(" until {}", rfc3339(at)));
    }
    words.push_str("; poll gatehouse.call_status again for its result");
    let mut result = CallToolResult::success(vec![ContentBlock::text(words)]);
    result.structured_content = Some(detail);
    result.meta = Some(envelope_meta(envelope));
    result
}

pub use crate::time::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_result_passes_through_and_other_json_is_wrapped() {
        let mcp = upstream_result(
            r#"{"content":[{"type":"text","text":"hi"}],"isError":false,"_meta":{"x":1}}"#,
            false,
        );
        assert_eq!(mcp.content[0].as_text().unwrap().text, "hi");
        assert_eq!(mcp.meta, None);
        // Whatever revision the upstream spoke, a 2026-07-28 client gets `resultType`.
        assert_eq!(mcp.result_type, Some(rmcp::model::ResultType::COMPLETE));
        let newer = upstream_result(
            r#"{"content":[{"type":"text","text":"hi"}],"resultType":"complete"}"#,
            false,
        );
        assert_eq!(newer.content[0].as_text().unwrap().text, "hi");
        assert_eq!(
            newer.structured_content, None,
            "passed through, not wrapped"
        );

        let other = upstream_result(r#"{"balance": 12, "content": "not a list"}"#, false);
        assert_eq!(
            other.structured_content,
            Some(json!({"balance": 12, "content": "not a list"}))
        );
        assert_eq!(
            other.content[0].as_text().unwrap().text,
            r#"{"balance": 12, "content": "not a list"}"#
        );

        // Shaped like a result but not one (a content block of no known type): wrapped, its
        // object still structured.
        let odd = r#"{"content":[{"type":"hologram"}]}"#;
        let wrapped = upstream_result(odd, false);
        assert_eq!(wrapped.content[0].as_text().unwrap().text, odd);
        assert_eq!(
            wrapped.structured_content,
            Some(json!({"content": [{"type": "hologram"}]}))
        );
    }

    #[test]
    fn an_error_result_is_structured_and_says_it_in_words() {
        let error = GatewayError::rate_limited("up.t", std::time::Duration::from_millis(1500));
        let result = error_result(&error, None);
        assert_eq!(result.is_error, Some(true));
        let detail = &result.structured_content.as_ref().unwrap()["error"];
        assert_eq!(detail["code"], "rate_limited");
        assert_eq!(detail["retryable"], true);
        assert_eq!(detail["retry_after_ms"], 1500);
        let text = &result.content[0].as_text().unwrap().text;
        assert!(text.starts_with("rate_limited: "), "{text}");
        assert!(
            result.meta.as_ref().unwrap().contains_key(META_TRACE_ID),
            "every result carries a trace id"
        );
    }
}
