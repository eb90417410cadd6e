//! The gateway's own tools, listed beside the upstreams' ones: `gatehouse.call_status` and
//! `gatehouse.load_toolset`.

use gatehouse_registry::ToolsetInfo;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::json;
use std::sync::Arc;

pub const CALL_STATUS: &str = "gatehouse.call_status";
pub const LOAD_TOOLSET: &str = "gatehouse.load_toolset";

/// The longest `gatehouse.call_status` waits for a call to finish when asked to.
pub const MAX_STATUS_WAIT_MS: u64 = 10_000;

/// Names under `gatehouse.` are the gateway's: an upstream of that name is not listed.
pub fn is_gateway_tool(name: &str) -> bool {
    name.starts_with("gatehouse.")
}

/// The gateway's tools; `gatehouse.load_toolset` names the toolsets the agent may load.
pub fn gateway_tools(toolsets: &[ToolsetInfo]) -> Vec<Tool> {
    let listed = if toolsets.is_empty() {
        "Your tenant has no toolsets for you.".to_owned()
    } else {
        let sets: Vec<String> = toolsets
            .iter()
            .map(|t| {
                format!(
                    "{} ({} read, {} write)",
                    t.name, t.read_tools, t.write_tools
                )
            })
            .collect();
        format!("Toolsets: {}.", sets.join(", "))
    };
    let load_description = format!(
        "Adds a toolset of your tenant to the tools you see (kept for you across sessions). \
         Write tools come along only with include_write_tools. The tool list changes \
         afterwards: list the tools again. {listed}"
    );
    vec![
        tool(
            CALL_STATUS,
            "Where a call stands that answered approval_pending: its state while it waits, its \
             result once it ran, or why it ended (rejected, expired, cancelled, failed). Poll it \
             with the call_id the pending answer gave; wait_ms (up to 10000) waits for the call \
             to finish before answering.",
            json!({
                "type": "object",
                "properties": {
                    "call_id": {"type": "string", "description": "the call id from the approval_pending answer"},
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_STATUS_WAIT_MS,
                                "description": "wait up to this long for the call to finish"}
                },
                "required": ["call_id"],
                "additionalProperties": false
            }),
            true,
        ),
        tool(
            LOAD_TOOLSET,
            load_description,
            json!({
                "type": "object",
                "properties": {
                    "toolset": {"type": "string", "description": "the toolset's name"},
                    "include_write_tools": {"type": "boolean", "default": false}
                },
                "required": ["toolset"],
                "additionalProperties": false
            }),
            false,
        ),
    ]
}

fn tool(
    name: &'static str,
    description: impl Into<String>,
    schema: serde_json::Value,
    read_only: bool,
) -> Tool {
    let schema: JsonObject = match schema {
        serde_json::Value::Object(o) => o,
        _ => JsonObject::new(),
    };
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(read_only);
    annotations.destructive_hint = Some(false);
    annotations.idempotent_hint = Some(true);
    annotations.open_world_hint = Some(false);
    Tool::new(name, Into::<String>::into(description), Arc::new(schema))
        .with_annotations(annotations)
}
