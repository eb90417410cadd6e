//! A tool's result kept as the upstream wrote it. Reading a result into rmcp's
//! `CallToolResult` and writing it out again cost about a tenth of a read-only call's
//! instructions (its content blocks are an internally tagged enum, which serde buffers item by
//! item, and structured content becomes a `serde_json::Value`), only to hand on the same JSON.
//!
//! [`plain`] takes the upstream's text as it is when it is plainly a tool's result: the keys a
//! `CallToolResult` has and no other, text blocks only (`type` and `text`, nothing else), and
//! every string, number and object in it read as `serde_json` reads them into a `Value`, without
//! keeping any of it. Such a text reads back, through rmcp's own reading, as the very result
//! the typed path would have written, so what the call record, the audit digest and the agent
//! get means the same either way. Anything else (another kind of block, annotations, a key rmcp
//! would drop, a value rmcp would refuse) goes the typed way, as before.

use gatehouse_actors::ToolOutput;
use rmcp::model::ResultType;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// `result` (the `result` member of the upstream's answer) as the call's output, as it is;
/// `None` when it is not plainly a tool's result.
pub(super) fn plain(result: &str) -> Option<ToolOutput> {
    let read: Plain = serde_json::from_str(result).ok()?;
    if read.result_type.is_some_and(|t| !t.is_complete()) {
        return None;
    }
    Some(ToolOutput {
        result_json: result.to_owned(),
        is_error: read.is_error == Some(true),
    })
}

/// A `CallToolResult` with only text blocks and no key it does not know.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Plain {
    #[serde(default)]
    result_type: Option<ResultType>,
    /// Required here, though rmcp takes an absent one as empty: an absent one goes the typed way.
    #[allow(dead_code)]
    content: Vec<TextBlock>,
    #[allow(dead_code)]
    #[serde(default)]
    structured_content: Option<Valid>,
    #[serde(default)]
    is_error: Option<bool>,
    #[allow(dead_code)]
    #[serde(rename = "_meta", default)]
    meta: Option<ValidObject>,
}

/// `{"type": "text", "text": "..."}` and nothing else. Zero-sized, so a list of them is never
/// allocated.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextBlock {
    #[allow(dead_code)]
    #[serde(rename = "type")]
    kind: TextKind,
    #[allow(dead_code)]
    text: Text,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum TextKind {
    Text,
}

/// A JSON string, decoded as a `String` would be (escapes checked, lone surrogates refused),
/// not kept. serde_json refuses anything else before the visitor sees it.
struct Text;

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(Checks).map(|_| Text)
    }
}

/// Any JSON value, read as `serde_json::Value` reads it (strings decoded, numbers in range, keys
/// strings), not kept.
struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checks)
    }
}

/// A JSON object read as [`Valid`] reads a value; serde_json refuses anything else.
struct ValidObject;

impl<'de> Deserialize<'de> for ValidObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(Checks).map(|_| ValidObject)
    }
}

/// Accepts whatever serde_json hands it, keeping nothing: what it is handed is what the
/// `deserialize_*` asked for, read as serde_json reads it.
struct Checks;

impl<'de> Visitor<'de> for Checks {
    type Value = Valid;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Valid, E> {
        Ok(Valid)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Valid, A::Error> {
        while seq.next_element::<Valid>()?.is_some() {}
        Ok(Valid)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Valid, A::Error> {
        while map.next_key::<Text>()?.is_some() {
            map.next_value::<Valid>()?;
        }
        Ok(Valid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::CallToolResult;
    use serde_json::json;

    /// What rmcp's own reading makes of `text`, when it reads it as a tool's result.
    fn rmcp_reads(text: &str) -> Option<CallToolResult> {
        serde_json::from_str(text).ok()
    }

    #[test]
    fn a_plain_result_is_kept_byte_for_byte_and_reads_back_as_rmcp_reads_it() {
        for text in [
            r#"{"content":[{"type":"text","text":"hi"}]}"#,
            r#"{"content":[{"type":"text","text":"no"}],"isError":true}"#,
            r#"{"resultType":"complete","content":[{"type":"text","text":"\u00e9 \ud83d\ude00"}],"structuredContent":{"n":2.5e-7,"list":[1,-2,null,true,"s"]},"isError":false}"#,
            r#"{"content":[],"structuredContent":null,"_meta":{"k":{"deep":[1]}}}"#,
            r#"{ "content" : [ { "text" : "spaced", "type" : "text" } ] , "isError" : null }"#,
            r#"{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"structuredContent":"just text"}"#,
        ] {
            let kept = plain(text).unwrap_or_else(|| panic!("{text} was not kept"));
            assert_eq!(kept.result_json, text, "kept as sent");
            let rmcp = rmcp_reads(text).unwrap_or_else(|| panic!("rmcp refuses {text}"));
            assert_eq!(kept.is_error, rmcp.is_error == Some(true), "{text}");
            // The typed path wrote rmcp's reading out again; the kept text reads as the same.
            let typed = serde_json::to_string(&rmcp).unwrap();
            assert_eq!(rmcp_reads(&kept.result_json), rmcp_reads(&typed), "{text}");
        }
    }

    #[test]
    fn anything_but_a_plain_result_goes_the_typed_way() {
        let other_blocks = [
            json!({"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]}),
            json!({"content": [{"type": "text", "text": "hi", "annotations": {"priority": 0.5}}]}),
            json!({"content": [{"type": "text", "text": "hi", "_meta": {"k": 1}}]}),
            json!({"content": [{"type": "resource_link", "uri": "file:///x", "name": "x"}]}),
        ];
        // rmcp reads these (dropping the extra key, or filling the absent content); kept as
        // sent they would carry what the typed path does not.
        let rmcp_differs = [
            json!({"content": [{"type": "text", "text": "hi"}], "stuffed": "x".repeat(64)}),
            json!({"content": [{"type": "text", "text": "hi", "stuffed": 1}]}),
            json!({"structuredContent": {"n": 1}}),
            json!({"isError": true}),
        ];
        for result in other_blocks.iter().chain(&rmcp_differs) {
            let text = result.to_string();
            assert!(rmcp_reads(&text).is_some(), "rmcp reads {text}");
            assert_eq!(plain(&text), None, "{text} was kept");
        }
    }

    #[test]
    fn what_rmcp_refuses_is_never_kept() {
        for text in [
            // A lone surrogate, in a text block, a key and a value.
            r#"{"content":[{"type":"text","text":"\ud800"}]}"#,
            r#"{"content":[],"structuredContent":{"\udc00":1}}"#,
            r#"{"content":[],"_meta":{"k":"\ud800x"}}"#,
            // A number no f64 holds.
            r#"{"content":[],"structuredContent":{"n":1e400}}"#,
            // Not an object where one belongs, or the wrong type.
            r#"{"content":[],"_meta":[1]}"#,
            r#"{"content":[],"_meta":"m"}"#,
            r#"{"content":{"type":"text","text":"hi"}}"#,
            r#"{"content":[{"type":"text","text":7}]}"#,
            r#"{"content":[{"type":"text"}]}"#,
            r#"{"content":[],"isError":"yes"}"#,
            // Another result type, a key twice, not an object, not JSON.
            r#"{"resultType":"input_required","content":[]}"#,
            r#"{"content":[],"isError":true,"isError":false}"#,
            r#"[{"type":"text","text":"hi"}]"#,
            r#"{"content":[{"type":"text","text":"hi"}]"#,
        ] {
            assert_eq!(rmcp_reads(text), None, "rmcp refuses {text}");
            assert_eq!(plain(text), None, "{text} was kept");
        }
    }

    #[test]
    fn structured_content_nested_past_serde_jsons_limit_is_refused_without_overflowing() {
        // serde_json stops at 128 levels, for the check as for rmcp's reading; a hostile
        // upstream's nesting is a refusal, not a deep recursion.
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let text = format!(r#"{{"content":[],"structuredContent":{deep}}}"#);
        assert_eq!(rmcp_reads(&text), None);
        assert_eq!(plain(&text), None);
        let within = format!("{}{}", "[".repeat(100), "]".repeat(100));
        let text = format!(r#"{{"content":[],"structuredContent":{within}}}"#);
        assert!(rmcp_reads(&text).is_some());
        assert_eq!(plain(&text).map(|kept| kept.result_json), Some(text));
    }
}
