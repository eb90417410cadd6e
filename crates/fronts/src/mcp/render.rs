//! Envelopes and gateway errors as MCP results: the upstream's `CallToolResult` passed through,
//! other JSON wrapped, every result's `_meta` carrying the call's envelope, and every refusal a
//! tool-level error result (`isError: true`) whose `structuredContent.error` an agent can branch
//! on and whose text says the same in words. The methods that answer with a JSON-RPC error
//! instead take it from `crate::jsonrpc_error`.

use crate::jsonrpc_error::jsonrpc_error;
use gatehouse_gateway::pipeline::{Envelope, ErrorCode, GatewayError, trace_id};
use gatehouse_registry::{CallId, CallState};
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, JsonRpcVersion2_0, MetaObject, RequestId, ResultType,
};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

pub const META_CALL_ID: &str = "dev.gatehouse/call-id";
pub const META_EFFECTIVE_MODE: &str = "dev.gatehouse/effective-mode";
pub const META_POLICY_DECISION: &str = "dev.gatehouse/policy-decision-id";
pub const META_TRACE_ID: &str = "dev.gatehouse/trace-id";
pub const META_IDEMPOTENCY_KEY: &str = "dev.gatehouse/idempotency-key";

/// The envelope of a call, as `_meta` (the keys [`EnvelopeMeta`] writes).
pub fn envelope_meta(envelope: &Envelope) -> MetaObject {
    match serde_json::to_value(EnvelopeMeta(envelope)) {
        Ok(Value::Object(meta)) => MetaObject(meta),
        _ => MetaObject::default(),
    }
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

/// The JSON-RPC response of `tools/call` request `id` for a settled call whose result an
/// executor just made (`Envelope::fresh_result`): what [`settled`] answers, written with the
/// result's `content` and `structuredContent` copied as they are rather than read into values
/// and written again. `None` when the answer needs [`settled`]: a refusal, a result read back
/// from a record, a result of another shape.
pub fn passed_through(id: &RequestId, envelope: &Envelope) -> Option<Vec<u8>> {
    let json = envelope.result_json.as_deref()?;
    if !envelope.fresh_result || refusal(envelope).is_some() {
        return None;
    }
    let read: ToolResult<'_> = serde_json::from_str(json).ok()?;
    let fits = read.content.get().starts_with('[')
        && read
            .result_type
            .as_ref()
            .is_none_or(ResultType::is_complete)
        && read.meta.is_none_or(|meta| meta.get().starts_with('{'));
    if !fits {
        return None;
    }
    let response = PassedResponse {
        jsonrpc: JsonRpcVersion2_0,
        id,
        result: PassedResult {
            result_type: ResultType::COMPLETE,
            content: read.content,
            structured_content: read.structured_content,
            is_error: if envelope.is_error {
                Some(true)
            } else {
                read.is_error
            },
            meta: EnvelopeMeta(envelope),
        },
    };
    // Room for the result and the envelope's `_meta` around it, so the answer is written
    // without growing its buffer.
    let mut body = Vec::with_capacity(json.len() + 512);
    serde_json::to_writer(&mut body, &response).ok()?;
    Some(body)
}

/// A `CallToolResult` as far as passing it on needs: its parts as JSON text, and nothing else
/// in it (an object with other keys is wrapped as text by [`upstream_result`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolResult<'a> {
    #[serde(borrow)]
    content: &'a RawValue,
    /// Any JSON, `null` included (kept apart from an absent field, as rmcp does).
    #[serde(default, borrow, deserialize_with = "present")]
    structured_content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    /// Replaced by the envelope's.
    #[serde(rename = "_meta", default, borrow)]
    meta: Option<&'a RawValue>,
    #[serde(default)]
    result_type: Option<ResultType>,
}

fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

#[derive(Serialize)]
struct PassedResponse<'a> {
    jsonrpc: JsonRpcVersion2_0,
    id: &'a RequestId,
    result: PassedResult<'a>,
}

/// Keys in the order rmcp writes a `CallToolResult`'s.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PassedResult<'a> {
    result_type: ResultType,
    content: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_content: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    is_error: Option<bool>,
    #[serde(rename = "_meta")]
    meta: EnvelopeMeta<'a>,
}

/// The envelope of a call as `_meta`'s keys, written straight from the envelope.
struct EnvelopeMeta<'a>(&'a Envelope);

impl Serialize for EnvelopeMeta<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let envelope = self.0;
        let mut meta = serializer.serialize_map(Some(4))?;
        meta.serialize_entry(META_CALL_ID, &envelope.call_id)?;
        meta.serialize_entry(META_EFFECTIVE_MODE, &envelope.effective_mode)?;
        meta.serialize_entry(META_POLICY_DECISION, &envelope.policy_decision_id)?;
        meta.serialize_entry(META_TRACE_ID, &envelope.trace_id)?;
        meta.end()
    }
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
    match refusal(envelope) {
        Some(error) => error_result(&error, Some(envelope)),
        None => call_result(envelope),
    }
}

/// Why a call answers without its result; `None` when it answers with it: a success, or a tool
/// that ran and reported its own error (its result says what went wrong).
fn refusal(envelope: &Envelope) -> Option<GatewayError> {
    let error = envelope.as_error()?;
    let tool_error = envelope.state == CallState::Failed && envelope.result_json.is_some();
    (!tool_error).then_some(error)
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

    fn ran(state: CallState, result: &str, fresh_result: bool) -> Envelope {
        let failed = state == CallState::Failed;
        Envelope {
            call_id: "call_1".into(),
            tenant: "acme".into(),
            tool: "demo.echo".into(),
            effective_mode: gatehouse_registry::ApprovalMode::ReadOnly,
            policy_decision_id: "pd_1".into(),
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            state,
            result_json: Some(result.into()),
            fresh_result,
            is_error: failed,
            error: failed.then(|| "the tool reported an error".into()),
            expires_at_ms: None,
            args_sha256: "00".into(),
            context_id: None,
            updated_at_ms: None,
        }
    }

    /// The response the typed path writes for the same request.
    fn typed(id: &RequestId, envelope: &Envelope) -> Value {
        let response = rmcp::model::CallToolResponse::from(settled(envelope));
        let message = rmcp::model::ServerJsonRpcMessage::response(
            rmcp::model::ServerResult::from(response),
            id.clone(),
        );
        serde_json::to_value(message).unwrap()
    }

    #[test]
    fn a_fresh_result_passed_through_reads_as_the_typed_answer() {
        let id = RequestId::String("req-9".into());
        for (state, result) in [
            (
                CallState::Succeeded,
                r#"{"content":[{"type":"text","text":"hi \u00e9\n"}],"isError":false}"#,
            ),
            (
                CallState::Succeeded,
                r#"{"content":[],"structuredContent":{"n":[1,2.5,null]},"_meta":{"up":1}}"#,
            ),
            (
                CallState::Succeeded,
                r#"{"resultType":"complete","content":[{"type":"text","text":"x"}],"structuredContent":null}"#,
            ),
            (
                CallState::Succeeded,
                r#"{"content":[{"type":"image","data":"aGk=","mimeType":"image/png"}]}"#,
            ),
            // The tool's own error, whatever the upstream put in `isError`.
            (
                CallState::Failed,
                r#"{"content":[{"type":"text","text":"no"}],"isError":true}"#,
            ),
            (
                CallState::Failed,
                r#"{"content":[{"type":"text","text":"no"}]}"#,
            ),
        ] {
            let envelope = ran(state, result, true);
            let body = passed_through(&id, &envelope)
                .unwrap_or_else(|| panic!("{result} was not passed through"));
            let passed: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(passed, typed(&id, &envelope), "{result}");
        }
        // An upstream cannot speak for the gateway: its `_meta` gives way to the envelope's.
        let numbered = RequestId::Number(7);
        let forged = r#"{"content":[],"_meta":{"dev.gatehouse/call-id":"call_forged"}}"#;
        let envelope = ran(CallState::Succeeded, forged, true);
        let passed: Value =
            serde_json::from_slice(&passed_through(&numbered, &envelope).unwrap()).unwrap();
        assert_eq!(passed, typed(&numbered, &envelope));
        assert_eq!(
            passed["result"]["_meta"],
            json!({
                META_CALL_ID: "call_1",
                META_EFFECTIVE_MODE: "read_only",
                META_POLICY_DECISION: "pd_1",
                META_TRACE_ID: "4bf92f3577b34da6a3ce929d0e0e4736",
            })
        );
    }

    #[test]
    fn only_a_fresh_result_of_a_tools_shape_is_passed_through() {
        let id = RequestId::Number(1);
        let shaped = r#"{"content":[{"type":"text","text":"hi"}]}"#;
        // Read back from a record: an earlier version may have stored another shape.
        assert_eq!(
            passed_through(&id, &ran(CallState::Succeeded, shaped, false)),
            None
        );
        for other in [
            // Another key: wrapped as text by the typed path.
            r#"{"content":[],"balance":12}"#,
            r#"{"content":"not a list"}"#,
            r#"{"structuredContent":{"n":1}}"#,
            r#"{"content":[],"resultType":"input_required"}"#,
            r#"{"content":[],"_meta":"not an object"}"#,
            r#"{"content":[],"_meta":{},"_meta":{}}"#,
            "[1]",
            "not json",
        ] {
            assert_eq!(
                passed_through(&id, &ran(CallState::Succeeded, other, true)),
                None,
                "{other}"
            );
        }
        // A call that did not end in a result answers with its error.
        let mut rejected = ran(CallState::Rejected, shaped, true);
        rejected.is_error = true;
        rejected.error = Some("rejected by alice: no".into());
        assert_eq!(passed_through(&id, &rejected), None);
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
