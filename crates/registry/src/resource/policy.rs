use super::{Problem, Role};
use crate::mode::ApprovalMode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tenant's rules for its calls. Several policies of a tenant combine: a deny anywhere wins,
/// allow lists are joined, the strictest approval requirement applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// The roles the policy applies to; empty means every role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,
    /// Tool globs the roles may call; empty places no restriction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<ModeRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalRequirement>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<Budget>,
    /// The toolsets the roles see in `tools/list` before they load any. When no policy of the
    /// tenant names any, every permitted tool is listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_toolsets: Vec<ToolsetRef>,
}

/// A toolset loaded for a caller: its read-only tools, and its other tools only when
/// `includeWriteTools` says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsetRef {
    pub name: String,
    #[serde(default)]
    pub include_write_tools: bool,
}

/// Lowers a call's mode to `mode` when the tool matches and every condition holds. A rule can
/// never raise a mode: the effective mode is the lower of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModeRule {
    pub name: String,
    #[serde(default = "any_tool")]
    pub tools: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<Condition>,
    pub mode: ApprovalMode,
}

fn any_tool() -> String {
    "*".to_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub arg: String,
    pub op: CompareOp,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareOp {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequirement {
    /// N of the tenant's approvers must approve.
    #[serde(default = "one")]
    pub required: u32,
    /// How long a call may wait for its approvals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// How long an approval stays good for before the call must be claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_seconds: Option<u64>,
}

fn one() -> u32 {
    1
}

/// At most `calls` calls per `perSeconds` for each matching tool of the tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Budget {
    pub tools: String,
    pub calls: u64,
    pub per_seconds: u64,
}

impl PolicySpec {
    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        for (field, patterns) in [("spec.allow", &self.allow), ("spec.deny", &self.deny)] {
            for (i, p) in patterns.iter().enumerate() {
                if p.is_empty() {
                    problems.push(Problem::new(format!("{field}[{i}]"), "must not be empty"));
                }
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let field = format!("spec.rules[{i}]");
            if rule.name.trim().is_empty() {
                problems.push(Problem::new(format!("{field}.name"), "must not be empty"));
            }
            if self.rules[..i].iter().any(|r| r.name == rule.name) {
                problems.push(Problem::new(
                    format!("{field}.name"),
                    format!("{:?} is used by an earlier rule", rule.name),
                ));
            }
            for (j, cond) in rule.when.iter().enumerate() {
                let ordered = matches!(
                    cond.op,
                    CompareOp::Lt | CompareOp::Le | CompareOp::Gt | CompareOp::Ge
                );
                if ordered && !cond.value.is_number() {
                    problems.push(Problem::new(
                        format!("{field}.when[{j}].value"),
                        "an ordering comparison needs a number",
                    ));
                }
                if cond.arg.is_empty() {
                    problems.push(Problem::new(
                        format!("{field}.when[{j}].arg"),
                        "must not be empty",
                    ));
                }
            }
        }
        if let Some(a) = &self.approvals {
            if a.required == 0 {
                problems.push(Problem::new(
                    "spec.approvals.required",
                    "at least 1: to skip approval, lower the mode with a rule",
                ));
            }
            if a.ttl_seconds == Some(0) || a.valid_seconds == Some(0) {
                problems.push(Problem::new("spec.approvals", "durations must be above 0"));
            }
        }
        for (i, t) in self.default_toolsets.iter().enumerate() {
            if !super::is_valid_name(&t.name) {
                problems.push(Problem::new(
                    format!("spec.defaultToolsets[{i}].name"),
                    "not a valid toolset name",
                ));
            }
        }
        for (i, b) in self.budgets.iter().enumerate() {
            if b.calls == 0 || b.per_seconds == 0 {
                problems.push(Problem::new(
                    format!("spec.budgets[{i}]"),
                    "calls and perSeconds must be above 0",
                ));
            }
        }
    }
}
