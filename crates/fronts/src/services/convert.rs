//! Between the registry's types and the wire's.

use gatehouse_gateway::pipeline::GatewayError;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::cascade::{Resolution, TraceEntry};
use gatehouse_registry::classify::{ResolvedTool, ToolSource};
use gatehouse_registry::registry::Stored;
use gatehouse_registry::resource::{API_VERSION, Level, Metadata, Object};
use gatehouse_registry::{Kind, Resource, ResourceKey};
use serde::de::DeserializeOwned;

pub fn kind(text: &str) -> Result<Kind, GatewayError> {
    Kind::parse(text).ok_or_else(|| {
        GatewayError::invalid_request(format!(
            "unknown kind {text:?}: one of Tenant, Principal, Upstream, Tool, Skill, Policy, Webhook"
        ))
    })
}

pub fn key_from(key: Option<pb::ResourceKey>) -> Result<ResourceKey, GatewayError> {
    let key = key.ok_or_else(|| GatewayError::invalid_request("key is required"))?;
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

/// A wire resource as the registry's, with errors that name the field (`spec.displayName`).
/// The spec is read into its kind's type directly: read through the tagged `Resource` from a
/// document whose `kind` is not first, serde collects the map before it reads it and reports every
/// error at the root.
pub fn resource_from(r: pb::Resource) -> Result<Resource, GatewayError> {
    let kind = kind(&r.kind)?;
    let spec: serde_json::Value = serde_json::from_str(&r.spec_json).map_err(|e| {
        GatewayError::invalid_request(format!("{kind}/{}: spec_json is not JSON: {e}", r.name))
    })?;
    let metadata = Metadata {
        name: r.name,
        tenant: r.tenant.filter(|t| !t.is_empty()),
        labels: r.labels.into_iter().collect(),
    };
    let resource = match kind {
        Kind::Tenant => Resource::Tenant(object(kind, metadata, spec)?),
        Kind::Principal => Resource::Principal(object(kind, metadata, spec)?),
        Kind::Upstream => Resource::Upstream(object(kind, metadata, spec)?),
        Kind::Tool => Resource::Tool(object(kind, metadata, spec)?),
        Kind::Skill => Resource::Skill(object(kind, metadata, spec)?),
        Kind::Policy => Resource::Policy(object(kind, metadata, spec)?),
        Kind::Webhook => Resource::Webhook(object(kind, metadata, spec)?),
    };
    Ok(resource.normalized())
}

/// One kind's object, its spec read with the path of any error.
fn object<S: DeserializeOwned>(
    kind: Kind,
    metadata: Metadata,
    spec: serde_json::Value,
) -> Result<Object<S>, GatewayError> {
    let spec = serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = match e.path().to_string() {
            root if root == "." => "spec".to_owned(),
            index if index.starts_with('[') => format!("spec{index}"),
            field => format!("spec.{field}"),
        };
        GatewayError::invalid_request(format!("{kind}/{}: {path}: {}", metadata.name, e.inner()))
    })?;
    Ok(Object {
        api_version: API_VERSION.to_owned(),
        metadata,
        spec,
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

pub fn page_after(token: &str) -> Result<Option<ResourceKey>, GatewayError> {
    if token.is_empty() {
        return Ok(None);
    }
    hex::decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .map(Some)
        .ok_or_else(|| GatewayError::invalid_request("page_token is not one this service issued"))
}

/// A call as the approval and gateway services show it.
pub fn call_record_to(call: &gatehouse_registry::Call) -> pb::CallRecord {
    use gatehouse_registry::call::Verdict;
    use gatehouse_registry::{CallState, Outcome};
    let action = |v: &Verdict| pb::ApprovalAction {
        person: v.person().to_owned(),
        principal: v.principal.clone(),
        at_unix_ms: v.at as i64,
        reason: v.note.clone(),
    };
    // Cancel and Resolve record who and why in the note, as "<verb> by <principal>: <text>".
    let noted = |prefix: &str| {
        let (principal, note) = call
            .note
            .as_deref()?
            .strip_prefix(prefix)?
            .split_once(": ")?;
        Some(pb::ApprovalAction {
            principal: principal.to_owned(),
            at_unix_ms: call.updated_at as i64,
            reason: note.to_owned(),
            person: String::new(),
        })
    };
    let spec = &call.spec;
    let (result_json, error) = match &call.outcome {
        Some(Outcome::Succeeded { result, .. }) => (result.clone(), None),
        Some(Outcome::Failed { error }) => (None, Some(error.clone())),
        None if call.state == CallState::Failed => (None, call.note.clone()),
        None => (None, None),
    };
    pb::CallRecord {
        call_id: spec.id.0.clone(),
        tenant: spec.tenant.clone(),
        tool: spec.tool.clone(),
        args_json: spec.arguments.clone(),
        args_sha256: spec.args_sha256.clone(),
        principals: Some(pb::PrincipalChain {
            end_user: spec.chain.end_user.clone(),
            agent: spec.chain.agent.clone(),
            a2a_peer: spec.chain.a2a_peer.clone(),
        }),
        requested_mode: approval_mode_to(spec.requested_mode.unwrap_or(spec.highest_mode)) as i32,
        effective_mode: approval_mode_to(spec.effective_mode) as i32,
        highest_mode: approval_mode_to(spec.highest_mode) as i32,
        policy_decision_id: spec.policy_decision_id.clone(),
        tool_generation: spec.tool_generation,
        policy_generation: spec.policy_generation,
        idempotency_key: spec.idempotency_key.clone(),
        required_approvals: spec.required_approvals,
        approvals: call.approvals.iter().map(action).collect(),
        rejections: call.rejections.iter().map(action).collect(),
        proposed_at_unix_ms: call.created_at as i64,
        expires_at_unix_ms: spec.expires_at as i64,
        approval_valid_until_unix_ms: call.approval_valid_until.map(|t| t as i64),
        state: call_state_to(call.state) as i32,
        claim: call.claim.as_ref().map(|c| pb::Claim {
            claim_id: c.claim_id.clone(),
            node_id: c.node,
            epoch: c.epoch,
        }),
        cancellation: noted("cancelled by ").filter(|_| call.state == CallState::Cancelled),
        resolution: noted("resolved by "),
        result_json,
        error,
    }
}

pub fn approval_mode_to(mode: gatehouse_registry::ApprovalMode) -> pb::ApprovalMode {
    use gatehouse_registry::ApprovalMode as M;
    match mode {
        M::ReadOnly => pb::ApprovalMode::ReadOnly,
        M::LocalWrite => pb::ApprovalMode::LocalWrite,
        M::Network => pb::ApprovalMode::Network,
        M::Delegated => pb::ApprovalMode::Delegated,
        M::Destructive => pb::ApprovalMode::Destructive,
    }
}

/// A mode from the wire; `None` for UNSPECIFIED.
pub fn approval_mode_from(
    value: i32,
) -> Result<Option<gatehouse_registry::ApprovalMode>, GatewayError> {
    use gatehouse_registry::ApprovalMode as M;
    let mode = pb::ApprovalMode::try_from(value)
        .map_err(|_| GatewayError::invalid_request(format!("unknown approval mode {value}")))?;
    Ok(match mode {
        pb::ApprovalMode::Unspecified => None,
        pb::ApprovalMode::ReadOnly => Some(M::ReadOnly),
        pb::ApprovalMode::LocalWrite => Some(M::LocalWrite),
        pb::ApprovalMode::Network => Some(M::Network),
        pb::ApprovalMode::Delegated => Some(M::Delegated),
        pb::ApprovalMode::Destructive => Some(M::Destructive),
    })
}

pub fn call_state_to(state: gatehouse_registry::CallState) -> pb::CallState {
    use gatehouse_registry::CallState as S;
    match state {
        S::Pending => pb::CallState::Pending,
        S::Approved => pb::CallState::Approved,
        S::Rejected => pb::CallState::Rejected,
        S::Cancelled => pb::CallState::Cancelled,
        S::Expired => pb::CallState::Expired,
        S::Executing => pb::CallState::Executing,
        S::Succeeded => pb::CallState::Succeeded,
        S::Failed => pb::CallState::Failed,
        S::OutcomeUnknown => pb::CallState::OutcomeUnknown,
    }
}

/// A state from the wire; `None` for UNSPECIFIED.
pub fn call_state_from(value: i32) -> Result<Option<gatehouse_registry::CallState>, GatewayError> {
    use gatehouse_registry::CallState as S;
    let state = pb::CallState::try_from(value)
        .map_err(|_| GatewayError::invalid_request(format!("unknown call state {value}")))?;
    Ok(match state {
        pb::CallState::Unspecified => None,
        pb::CallState::Pending => Some(S::Pending),
        pb::CallState::Approved => Some(S::Approved),
        pb::CallState::Rejected => Some(S::Rejected),
        pb::CallState::Cancelled => Some(S::Cancelled),
        pb::CallState::Expired => Some(S::Expired),
        pb::CallState::Executing => Some(S::Executing),
        pb::CallState::Succeeded => Some(S::Succeeded),
        pb::CallState::Failed => Some(S::Failed),
        pb::CallState::OutcomeUnknown => Some(S::OutcomeUnknown),
    })
}

#[cfg(test)]
mod tests;
