use super::{Problem, is_valid_name};
use crate::secrets::find_secret;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Each skill's instructions are at most this many characters.
pub const MAX_INSTRUCTIONS_CHARS: usize = 2_000;

/// A cascade level, least to most specific; the derived order is the cascade's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Global,
    Tenant,
    Tool,
    User,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::Global, Level::Tenant, Level::Tool, Level::User];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Global => "global",
            Level::Tenant => "tenant",
            Level::Tool => "tool",
            Level::User => "user",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillScope {
    #[serde(rename = "type")]
    pub level: Level,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverrides {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl ToolOverrides {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkillSpec {
    pub scope: SkillScope,
    #[serde(default)]
    pub priority: i64,
    /// Skills with the same key conflict: only the winner is applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub instructions: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "ToolOverrides::is_empty")]
    pub tool_overrides: ToolOverrides,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

impl SkillSpec {
    pub(super) fn validate(&self, metadata_tenant: Option<&str>, problems: &mut Vec<Problem>) {
        let scope = &self.scope;
        match (scope.level, &scope.tenant) {
            (Level::Global, Some(_)) => problems.push(Problem::new(
                "spec.scope.tenant",
                "a global skill belongs to no tenant: leave it out",
            )),
            (Level::Tenant | Level::Tool | Level::User, None) => problems.push(Problem::new(
                "spec.scope.tenant",
                format!("required for a {} skill", scope.level),
            )),
            (_, Some(tenant)) if !is_valid_name(tenant) => problems.push(Problem::new(
                "spec.scope.tenant",
                format!("{tenant:?} is not a tenant name"),
            )),
            _ => {}
        }
        if let Some(meta) = metadata_tenant
            && scope.tenant.as_deref() != Some(meta)
        {
            problems.push(Problem::new(
                "metadata.tenant",
                format!(
                    "{meta:?} disagrees with spec.scope.tenant {:?}",
                    scope.tenant.as_deref().unwrap_or("(none)")
                ),
            ));
        }
        if scope.level == Level::Tool && scope.tool_pattern.is_none() {
            problems.push(Problem::new(
                "spec.scope.toolPattern",
                "required for a tool skill",
            ));
        }
        if scope.tool_pattern.as_ref().is_some_and(|p| p.is_empty()) {
            problems.push(Problem::new("spec.scope.toolPattern", "must not be empty"));
        }
        match (scope.level, &scope.user) {
            (Level::User, None) => {
                problems.push(Problem::new("spec.scope.user", "required for a user skill"))
            }
            (Level::Global | Level::Tenant | Level::Tool, Some(_)) => problems.push(Problem::new(
                "spec.scope.user",
                "only a user skill names a user",
            )),
            _ => {}
        }
        let chars = self.instructions.chars().count();
        if self.instructions.trim().is_empty() {
            problems.push(Problem::new("spec.instructions", "must not be empty"));
        } else if chars > MAX_INSTRUCTIONS_CHARS {
            problems.push(Problem::new(
                "spec.instructions",
                format!("{chars} characters, at most {MAX_INSTRUCTIONS_CHARS}"),
            ));
        }
        if let Some(kind) = find_secret(&self.instructions) {
            problems.push(Problem::new(
                "spec.instructions",
                format!("looks like it holds a credential ({kind}); skills must not carry secrets"),
            ));
        }
        if self.key.as_ref().is_some_and(|k| k.trim().is_empty()) {
            problems.push(Problem::new("spec.key", "must not be empty when given"));
        }
    }
}
