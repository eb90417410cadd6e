//! The call pipeline's decisions before anything is proposed: the caller's standing in the
//! tenant, the tool, the arguments, policy. The result is a complete `NewCall` (and whether it
//! must go through Raft at all), so apply has nothing left to evaluate.

use crate::args::{ArgError, ArgValidator, SchemaError};
use crate::call::{CallId, NewCall, PrincipalChain, Timestamp};
use crate::canonical::canonical_json;
use crate::canonical::sha256_hex;
use crate::identity;
use crate::mode::ApprovalMode;
use crate::policy::{self, Decision, PolicyInput, Refusal};
use crate::registry::Registry;
use crate::resource::{PrincipalSpec, Role};
use serde_json::Value;

/// One authenticated request to call a tool.
#[derive(Debug, Clone)]
pub struct CallRequest<'a> {
    pub id: CallId,
    pub at: Timestamp,
    pub tenant: &'a str,
    /// The authenticated principal (the agent).
    pub principal: &'a str,
    /// The end user: a JWT's `sub`, or the user an API key is bound to.
    pub end_user: Option<&'a str>,
    pub a2a_peer: Option<&'a str>,
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub idempotency_key: Option<&'a str>,
    pub requested_mode: Option<ApprovalMode>,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub decision: Decision,
    pub call: NewCall,
    /// The call becomes a replicated record: it needs approval or carries an idempotency key.
    /// Otherwise it runs at once on the node the agent reached and never touches Raft.
    pub replicated: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown tenant {0}")]
    UnknownTenant(String),
    #[error("{principal} is not an agent of tenant {tenant}")]
    NotAnAgent { principal: String, tenant: String },
    #[error("unknown tool {0}")]
    UnknownTool(String),
    #[error("the tool's schema does not compile: {0}")]
    BadSchema(String),
    #[error("invalid arguments: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidArguments(Vec<ArgError>),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl From<SchemaError> for PlanError {
    fn from(e: SchemaError) -> Self {
        PlanError::BadSchema(e.to_string())
    }
}

/// Compiled argument validators per (tenant, tool, tool generation), so a tool's schema compiles
/// once rather than on every call. A changed tool has a new generation, so an entry is never
/// stale; old ones age out. Cheap to clone: clones share one cache.
#[derive(Clone)]
pub struct Validators {
    compiled: moka::sync::Cache<(String, String, u64), std::sync::Arc<ArgValidator>>,
}

impl std::fmt::Debug for Validators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validators")
            .field("entries", &self.compiled.entry_count())
            .finish()
    }
}

impl Validators {
    pub fn new(max_entries: u64) -> Self {
        Validators {
            compiled: moka::sync::Cache::new(max_entries),
        }
    }

    fn get(
        &self,
        tenant: &str,
        tool_name: &str,
        generation: u64,
        tool: &crate::resource::ToolSpec,
    ) -> Result<std::sync::Arc<ArgValidator>, SchemaError> {
        let key = (tenant.to_owned(), tool_name.to_owned(), generation);
        if let Some(found) = self.compiled.get(&key) {
            return Ok(found);
        }
        let compiled = std::sync::Arc::new(ArgValidator::new(tool)?);
        self.compiled.insert(key, compiled.clone());
        Ok(compiled)
    }
}

/// Plans a call, compiling the tool's argument validator afresh.
pub fn plan_call(registry: &Registry, req: &CallRequest<'_>) -> Result<Plan, PlanError> {
    plan(registry, req, None)
}

/// Plans a call with compiled validators from `validators`: what a node's call path uses.
pub fn plan_call_with(
    registry: &Registry,
    req: &CallRequest<'_>,
    validators: &Validators,
) -> Result<Plan, PlanError> {
    plan(registry, req, Some(validators))
}

fn plan(
    registry: &Registry,
    req: &CallRequest<'_>,
    validators: Option<&Validators>,
) -> Result<Plan, PlanError> {
    if !registry.tenant_exists(req.tenant) {
        return Err(PlanError::UnknownTenant(req.tenant.to_owned()));
    }
    let principal = registry
        .principal(req.principal)
        .filter(|p| p.has_role(req.tenant, Role::Agent))
        .ok_or_else(|| PlanError::NotAnAgent {
            principal: req.principal.to_owned(),
            tenant: req.tenant.to_owned(),
        })?;
    let (tool, tool_generation) = registry
        .tool(req.tenant, req.tool)
        .ok_or_else(|| PlanError::UnknownTool(req.tool.to_owned()))?;
    let problems = match validators {
        Some(cache) => cache
            .get(req.tenant, req.tool, tool_generation, tool)?
            .validate(req.arguments),
        None => ArgValidator::new(tool)?.validate(req.arguments),
    };
    if !problems.is_empty() {
        return Err(PlanError::InvalidArguments(problems));
    }
    let upstream_name = req.tool.split_once('.').map_or(req.tool, |(u, _)| u);
    let upstream = registry.upstream(req.tenant, upstream_name);
    let arguments = canonical_json(req.arguments);
    let args_sha256 = sha256_hex(arguments.as_bytes());
    let roles = principal.roles.get(req.tenant).cloned().unwrap_or_default();
    let policies = registry.policies(req.tenant);
    if req.a2a_peer.is_some()
        && let Some(user) = req.end_user
    {
        delegated_user_permitted(registry, req.tenant, user, req.tool, &policies)?;
    }
    let decision = policy::decide(&PolicyInput {
        tenant: req.tenant,
        tool_name: req.tool,
        tool,
        tool_generation,
        upstream_trusted: upstream.is_some_and(|u| u.trusted),
        roles: &roles,
        intent: principal.intent,
        args: req.arguments,
        args_sha256: &args_sha256,
        policies: &policies,
        policy_generation: registry.policy_generation(req.tenant),
    })?;
    let needs_approval = decision.needs_approval();
    let call = NewCall {
        id: req.id.clone(),
        tenant: req.tenant.to_owned(),
        tool: req.tool.to_owned(),
        arguments,
        args_sha256,
        chain: chain_of(registry, req, principal),
        requested_mode: req.requested_mode,
        effective_mode: decision.effective,
        highest_mode: decision.declared,
        policy_decision_id: decision.id.clone(),
        tool_generation,
        policy_generation: decision.policy_generation,
        idempotency_key: req.idempotency_key.map(str::to_owned),
        retry_safe: tool.idempotent(upstream.is_some_and(|u| u.trusted))
            || upstream.is_some_and(|u| u.honours_idempotency_key),
        required_approvals: if needs_approval {
            decision.required_approvals
        } else {
            0
        },
        expires_at: req.at + decision.approval_ttl_seconds * 1_000,
        approval_valid_ms: decision.approval_valid_seconds * 1_000,
        context_id: None,
        trace_parent: None,
    };
    Ok(Plan {
        replicated: needs_approval || req.idempotency_key.is_some(),
        decision,
        call,
    })
}

/// The call's principal chain with every person in it: the end user, and the agent and the
/// peer as the people they are (`identity::person`).
fn chain_of(registry: &Registry, req: &CallRequest<'_>, agent: &PrincipalSpec) -> PrincipalChain {
    let mut people: Vec<String> = req.end_user.map(str::to_owned).into_iter().collect();
    people.push(identity::person(req.principal, agent, None));
    if let Some(peer) = req.a2a_peer
        && let Some(spec) = registry.principal(peer)
    {
        people.push(identity::person(peer, spec, None));
    }
    people.sort();
    people.dedup();
    PrincipalChain {
        end_user: req.end_user.map(str::to_owned),
        agent: req.principal.to_owned(),
        a2a_peer: req.a2a_peer.map(str::to_owned),
        people,
    }
}

/// A task delegated by an A2A peer acts for its end user as much as for the peer: the user must
/// hold a role in the tenant, and the policies that apply to the user's roles must let it call
/// the tool as well.
fn delegated_user_permitted(
    registry: &Registry,
    tenant: &str,
    user: &str,
    tool: &str,
    policies: &[(&str, &crate::resource::PolicySpec)],
) -> Result<(), Refusal> {
    let roles = registry.user_roles(tenant, user);
    if roles.is_empty() {
        return Err(Refusal::UnknownUser {
            user: user.to_owned(),
            tenant: tenant.to_owned(),
        });
    }
    policy::permitted(&policy::applicable(policies, &roles), tool).map_err(|why| {
        Refusal::UserNotPermitted {
            user: user.to_owned(),
            why: Box::new(why),
        }
    })
}

#[cfg(test)]
mod tests;
