//! Between the registry's types and the wire's.

use gatehouse_proto::v1 as pb;
use gatehouse_registry::cascade::{Resolution, TraceEntry};
use gatehouse_registry::classify::{ResolvedTool, ToolSource};
use gatehouse_registry::registry::Stored;
use gatehouse_registry::resource::{API_VERSION, Level};
use gatehouse_registry::{Kind, Resource, ResourceKey};
use tonic::Status;

pub fn kind(text: &str) -> Result<Kind, Status> {
    Kind::parse(text).ok_or_else(|| {
        Status::invalid_argument(format!(
            "unknown kind {text:?}: one of Tenant, Principal, Upstream, Tool, Skill, Policy"
        ))
    })
}

pub fn key_from(key: Option<pb::ResourceKey>) -> Result<ResourceKey, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("key is required"))?;
    Ok(ResourceKey {
        kind: kind(&key.kind)?,
        tenant: key.tenant.filter(|t| !t.is_empty()),
        name: key.name,
    })
}

pub fn key_to(key: &ResourceKey) -> pb::ResourceKey {
    pb::ResourceKey {
        kind: key.kind.as_str().to_owned(),
        tenant: key.tenant.clone(),
        name: key.name.clone(),
    }
}

pub fn resource_to(stored: &Stored) -> pb::Resource {
    let r = &stored.resource;
    let spec = serde_json::to_value(r)
        .ok()
        .and_then(|mut v| v.get_mut("spec").map(serde_json::Value::take))
        .unwrap_or_default();
    pb::Resource {
        kind: r.kind().as_str().to_owned(),
        name: r.name().to_owned(),
        tenant: r.metadata().tenant.clone(),
        labels: r.metadata().labels.clone().into_iter().collect(),
        spec_json: spec.to_string(),
        generation: stored.generation,
    }
}

/// A wire resource as the registry's, with errors that name the field.
pub fn resource_from(r: pb::Resource) -> Result<Resource, Status> {
    let kind = kind(&r.kind)?;
    let spec: serde_json::Value = serde_json::from_str(&r.spec_json).map_err(|e| {
        Status::invalid_argument(format!("{kind}/{}: spec_json is not JSON: {e}", r.name))
    })?;
    let mut metadata = serde_json::json!({ "name": r.name });
    if let Some(tenant) = r.tenant.filter(|t| !t.is_empty()) {
        metadata["tenant"] = tenant.into();
    }
    if !r.labels.is_empty() {
        metadata["labels"] = serde_json::to_value(&r.labels).unwrap_or_default();
    }
    let document = serde_json::json!({
        "kind": kind.as_str(),
        "apiVersion": API_VERSION,
        "metadata": metadata,
        "spec": spec,
    });
    serde_path_to_error::deserialize(document)
        .map(Resource::normalized)
        .map_err(|e| {
            Status::invalid_argument(format!("{kind}/{}: {}: {}", r.name, e.path(), e.inner()))
        })
}

fn level(level: Level) -> pb::SkillLevel {
    match level {
        Level::Global => pb::SkillLevel::Global,
        Level::Tenant => pb::SkillLevel::Tenant,
        Level::Tool => pb::SkillLevel::Tool,
        Level::User => pb::SkillLevel::User,
    }
}

fn trace_entry(e: &TraceEntry) -> pb::TraceEntry {
    pb::TraceEntry {
        level: level(e.level) as i32,
        skill: e.skill.clone().unwrap_or_default(),
        priority: e.priority.unwrap_or_default(),
        matched: e.matched,
        reason: e.reason.clone(),
        overridden_by: e.overridden_by.clone(),
        truncated: e.truncated,
    }
}

pub fn resolution_to(r: &Resolution, applied_index: u64) -> pb::ResolveSkillsResponse {
    pb::ResolveSkillsResponse {
        resolved_context: r.resolved_context.clone(),
        trace: r.trace.iter().map(trace_entry).collect(),
        applied_index,
    }
}

pub fn resolved_tool_to(t: &ResolvedTool) -> pb::ResolvedTool {
    let source = match t.source {
        ToolSource::Declared => pb::ToolSource::Declared,
        ToolSource::Classified => pb::ToolSource::Classified,
        ToolSource::Override => pb::ToolSource::Override,
    };
    pb::ResolvedTool {
        tool: t.tool.clone(),
        source: source as i32,
        categories: t.categories.clone(),
    }
}

/// Page tokens are the last key served, as hex of its JSON: opaque to clients, stable across
/// nodes.
pub fn page_token(key: &ResourceKey) -> String {
    serde_json::to_vec(key).map(hex::encode).unwrap_or_default()
}

pub fn page_after(token: &str) -> Result<Option<ResourceKey>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    hex::decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .map(Some)
        .ok_or_else(|| Status::invalid_argument("page_token is not one this service issued"))
}
