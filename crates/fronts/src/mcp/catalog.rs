//! What `tools/list` shows one agent: the tools its tenant's policy lets its roles see and its
//! loaded toolsets include, named `upstream.tool`, plus the gateway's own tools, in name order, a page at a time.

use super::guard::Agent;
use super::tools::{gateway_tools, is_gateway_tool};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gatehouse_gateway::pipeline::Pipeline;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::resource::ToolSpec;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use std::borrow::Cow;
use std::sync::Arc;

/// Tools per `tools/list` page.
pub const PAGE_SIZE: usize = 100;

/// The whole list an agent sees, as MCP tools, in name order: what the registry lets it see
/// (policy for its roles, its loaded toolsets), and the gateway's own tools.
pub fn listing(pipeline: &Pipeline, agent: &Agent) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Vec::new();
    let mut toolsets = Vec::new();
    if let Some(tenant) = agent.tenant.as_deref() {
        let visible = pipeline.visible_tools(&agent.caller, tenant);
        toolsets = pipeline.toolsets(&agent.caller, tenant);
        tools = visible
            .into_iter()
            .filter(|(name, _)| !is_gateway_tool(name))
            .map(|(name, spec)| {
                let upstream = name.split_once('.').map_or(name.as_str(), |(u, _)| u);
                let trusted = pipeline.upstream_trusted(tenant, upstream);
                to_mcp(name, &spec, trusted)
            })
            .collect();
    }
    tools.extend(gateway_tools(&toolsets));
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
}

/// A digest of the list, to tell a session when it changed.
pub fn digest(tools: &[Tool]) -> String {
    sha256_hex(&serde_json::to_vec(tools).unwrap_or_default())
}

/// One page of `tools` from `cursor` (the opaque cursor of the previous page), and the cursor of
/// the next page when there is one. The cursor names the last tool of the page it ended, so a
/// list that changes between pages neither repeats nor skips the tools that stayed.
pub fn page(tools: Vec<Tool>, cursor: Option<&str>) -> Result<(Vec<Tool>, Option<String>), ()> {
    let after = match cursor {
        None => None,
        Some(cursor) => {
            let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| ())?;
            Some(String::from_utf8(bytes).map_err(|_| ())?)
        }
    };
    let rest: Vec<Tool> = tools
        .into_iter()
        .filter(|t| after.as_deref().is_none_or(|after| t.name.as_ref() > after))
        .collect();
    let more = rest.len() > PAGE_SIZE;
    let page: Vec<Tool> = rest.into_iter().take(PAGE_SIZE).collect();
    let next = match (more, page.last()) {
        (true, Some(last)) => Some(URL_SAFE_NO_PAD.encode(last.name.as_bytes())),
        _ => None,
    };
    Ok((page, next))
}

fn to_mcp(name: String, spec: &ToolSpec, trusted: bool) -> Tool {
    let schema: JsonObject = match &spec.input_schema {
        serde_json::Value::Object(o) => o.clone(),
        _ => JsonObject::new(),
    };
    let description = (!spec.description.is_empty()).then(|| Cow::Owned(spec.description.clone()));
    let mut tool = Tool::new_with_raw(name, description, Arc::new(schema));
    if let Some(serde_json::Value::Object(output)) = &spec.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(output.clone()));
    }
    // An untrusted upstream's hints are not repeated as if the gateway vouched for them.
    if let Some(hints) = spec.annotations.as_ref().filter(|_| trusted) {
        let mut annotations = ToolAnnotations::new();
        annotations.title = hints.title.clone();
        annotations.read_only_hint = hints.read_only_hint;
        annotations.destructive_hint = hints.destructive_hint;
        annotations.idempotent_hint = hints.idempotent_hint;
        annotations.open_world_hint = hints.open_world_hint;
        tool = tool.with_annotations(annotations);
    }
    tool
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(n: usize) -> Vec<Tool> {
        (0..n)
            .map(|i| Tool::new_with_raw(format!("up.t{i:04}"), None, Arc::new(JsonObject::new())))
            .collect()
    }

    #[test]
    fn pages_cover_the_list_once_in_order() {
        let all = tools(PAGE_SIZE * 2 + 5);
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = page(all.clone(), cursor.as_deref()).unwrap();
            seen.extend(page.into_iter().map(|t| t.name.into_owned()));
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let expected: Vec<String> = all.into_iter().map(|t| t.name.into_owned()).collect();
        assert_eq!(seen, expected);
    }

    #[test]
    fn a_garbled_cursor_is_refused() {
        assert!(page(tools(3), Some("not base64!")).is_err());
    }

    #[test]
    fn a_short_list_has_no_next_page() {
        let (page, next) = page(tools(3), None).unwrap();
        assert_eq!(page.len(), 3);
        assert_eq!(next, None);
    }
}
