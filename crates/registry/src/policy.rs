//! Approval-mode policy: from a tool's declared maximum and the tenant's policies to the
//! effective mode of one call, with the rule that produced it. Rules only ever lower a mode:
//! the effective mode can never exceed the declared maximum, nor leave the taxonomy.

use crate::glob::tool_matches;
use crate::mode::ApprovalMode;
use crate::resource::{Budget, CompareOp, Condition, ModeSource, PolicySpec, Role, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How long a pending call waits for approvals when no policy says otherwise.
pub const DEFAULT_APPROVAL_TTL_SECONDS: u64 = 3_600;
/// How long an approval stays good for when no policy says otherwise.
pub const DEFAULT_APPROVAL_VALID_SECONDS: u64 = 900;

/// Everything a decision depends on, gathered by the caller from the registry.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    pub tenant: &'a str,
    pub tool_name: &'a str,
    pub tool: &'a ToolSpec,
    pub tool_generation: u64,
    pub upstream_trusted: bool,
    pub roles: &'a [Role],
    pub intent: Option<ApprovalMode>,
    pub args: &'a Value,
    pub args_sha256: &'a str,
    /// The tenant's policies as (name, spec); order does not matter.
    pub policies: &'a [(&'a str, &'a PolicySpec)],
    pub policy_generation: u64,
}

/// The rule that lowered a call's mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    pub policy: String,
    pub rule: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Stable for the same inputs: the same call decided twice gets the same id.
    pub id: String,
    pub declared: ApprovalMode,
    pub declared_source: ModeSource,
    pub effective: ApprovalMode,
    /// `None` when the declared maximum stands.
    pub rule: Option<RuleRef>,
    pub required_approvals: u32,
    pub approval_ttl_seconds: u64,
    pub approval_valid_seconds: u64,
    pub budget: Option<Budget>,
    pub tool_generation: u64,
    pub policy_generation: u64,
}

impl Decision {
    pub fn needs_approval(&self) -> bool {
        self.effective.needs_approval()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("tool {tool:?} is denied by policy {policy:?} (pattern {pattern:?})")]
    Denied {
        tool: String,
        policy: String,
        pattern: String,
    },
    #[error("tool {tool:?} is not in any allow list of the tenant's policies")]
    NotAllowed { tool: String },
    /// The principal declared an intent (e.g. `read_only`) and the call's effective mode is
    /// above it.
    #[error(
        "the principal declared a {} intent, and this call of {tool:?} is {}",
        intent.as_str(),
        effective.as_str()
    )]
    AboveIntent {
        tool: String,
        effective: ApprovalMode,
        intent: ApprovalMode,
    },
    /// A delegated call's end user holds no role in the tenant.
    #[error("{user}, on whose behalf the call is made, holds no role in tenant {tenant}")]
    UnknownUser { user: String, tenant: String },
    /// The tenant's policies let the delegating peer call the tool, but not its end user.
    #[error("{user}, on whose behalf the call is made, may not call it: {why}")]
    UserNotPermitted { user: String, why: Box<Refusal> },
}

/// The tenant's policies that apply to a caller holding `roles`, by name.
pub fn applicable<'a>(
    policies: &'a [(&'a str, &'a PolicySpec)],
    roles: &[Role],
) -> Vec<&'a (&'a str, &'a PolicySpec)> {
    let mut policies: Vec<&(&str, &PolicySpec)> = policies
        .iter()
        .filter(|(_, p)| p.roles.is_empty() || p.roles.iter().any(|r| roles.contains(r)))
        .collect();
    policies.sort_by_key(|(name, _)| *name);
    policies
}

/// Whether the applicable policies let the tool be called at all: a deny anywhere wins; allow
/// lists, where there are any, must name it.
pub fn permitted(policies: &[&(&str, &PolicySpec)], tool_name: &str) -> Result<(), Refusal> {
    for (name, policy) in policies {
        if let Some(pattern) = policy.deny.iter().find(|p| tool_matches(p, tool_name)) {
            return Err(Refusal::Denied {
                tool: tool_name.to_owned(),
                policy: (*name).to_owned(),
                pattern: pattern.clone(),
            });
        }
    }
    let allow_lists: Vec<&String> = policies.iter().flat_map(|(_, p)| &p.allow).collect();
    if !allow_lists.is_empty() && !allow_lists.iter().any(|p| tool_matches(p, tool_name)) {
        return Err(Refusal::NotAllowed {
            tool: tool_name.to_owned(),
        });
    }
    Ok(())
}

pub fn decide(input: &PolicyInput<'_>) -> Result<Decision, Refusal> {
    let policies = applicable(input.policies, input.roles);
    permitted(&policies, input.tool_name)?;

    let (declared, declared_source) = input.tool.declared_mode(input.upstream_trusted);
    let mut effective = declared;
    let mut rule = None;
    for (name, policy) in &policies {
        for r in &policy.rules {
            let applies = r.mode < effective
                && tool_matches(&r.tools, input.tool_name)
                && r.when.iter().all(|c| condition_holds(c, input.args));
            if applies {
                effective = r.mode;
                rule = Some(RuleRef {
                    policy: (*name).to_owned(),
                    rule: r.name.clone(),
                });
            }
        }
    }

    // An intent is the most the principal means to do: a call above it is refused whatever
    // the tool's class, before anything is proposed. Compared with the effective mode, so a
    // rule that lowers this call to within the intent lets it through.
    if let Some(intent) = input.intent
        && effective > intent
    {
        return Err(Refusal::AboveIntent {
            tool: input.tool_name.to_owned(),
            effective,
            intent,
        });
    }

    let approvals = policies.iter().filter_map(|(_, p)| p.approvals.as_ref());
    let required_approvals = approvals.clone().map(|a| a.required).max().unwrap_or(1);
    let approval_ttl_seconds = approvals
        .clone()
        .filter_map(|a| a.ttl_seconds)
        .min()
        .unwrap_or(DEFAULT_APPROVAL_TTL_SECONDS);
    let approval_valid_seconds = approvals
        .filter_map(|a| a.valid_seconds)
        .min()
        .unwrap_or(DEFAULT_APPROVAL_VALID_SECONDS);
    // The strictest budget that covers the tool: fewest calls per second allowed.
    let budget = policies
        .iter()
        .flat_map(|(_, p)| &p.budgets)
        .filter(|b| tool_matches(&b.tools, input.tool_name))
        .min_by(|a, b| (a.calls * b.per_seconds).cmp(&(b.calls * a.per_seconds)))
        .cloned();

    let id = decision_id(&DecisionIdInput {
        args: input.args_sha256,
        effective,
        policy_generation: input.policy_generation,
        roles: input.roles,
        rule: &rule,
        tenant: input.tenant,
        tool: input.tool_name,
        tool_generation: input.tool_generation,
    });
    Ok(Decision {
        id,
        declared,
        declared_source,
        effective,
        rule,
        required_approvals,
        approval_ttl_seconds,
        approval_valid_seconds,
        budget,
        tool_generation: input.tool_generation,
        policy_generation: input.policy_generation,
    })
}

/// What a decision's id is the hash of: its inputs and its outcome. Serialised, it is the JSON
/// object serde_json writes for them as a `Value` (members in name order, no white space), so
/// ids stay what they were when they were hashed from one.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DecisionIdInput<'a> {
    args: &'a str,
    effective: ApprovalMode,
    policy_generation: u64,
    roles: &'a [Role],
    rule: &'a Option<RuleRef>,
    tenant: &'a str,
    tool: &'a str,
    tool_generation: u64,
}

/// `pd_` and the first 24 hex digits of the SHA-256 of the input's JSON. The JSON is written
/// into a buffer and hashed at once: written straight into the hash, each of serde_json's small
/// writes (a quote, a key, a colon) went through the hash's buffering, about 2 thousand
/// instructions more a decision.
fn decision_id(input: &DecisionIdInput<'_>) -> String {
    let mut json = Vec::with_capacity(DECISION_INPUT_ROOM);
    // Serialising these fields into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut json, input);
    let mut id = String::with_capacity(3 + 24);
    id.push_str("pd_");
    id.push_str(&crate::canonical::hex_lower(&Sha256::digest(&json)[..12]));
    id
}

/// Room for a decision's input as JSON: its fixed keys and the argument digest take about 170
/// bytes, names and roles the rest.
const DECISION_INPUT_ROOM: usize = 384;

/// A condition on an argument absent from the call does not hold, so the mode stays higher.
fn condition_holds(cond: &Condition, args: &Value) -> bool {
    let actual = if cond.arg.starts_with('/') {
        args.pointer(&cond.arg)
    } else {
        args.get(&cond.arg)
    };
    let Some(actual) = actual else {
        return false;
    };
    match cond.op {
        CompareOp::Eq => json_eq(actual, &cond.value),
        CompareOp::Ne => !json_eq(actual, &cond.value),
        ordered => {
            let (Some(a), Some(b)) = (actual.as_f64(), cond.value.as_f64()) else {
                return false;
            };
            match ordered {
                CompareOp::Lt => a < b,
                CompareOp::Le => a <= b,
                CompareOp::Gt => a > b,
                CompareOp::Ge => a >= b,
                CompareOp::Eq | CompareOp::Ne => unreachable!("handled above"),
            }
        }
    }
}

/// Equality where `1` and `1.0` are the same number.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
