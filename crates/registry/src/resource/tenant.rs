use super::Problem;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

impl TenantSpec {
    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        if self
            .display_name
            .as_ref()
            .is_some_and(|n| n.chars().count() > 200)
        {
            problems.push(Problem::new("spec.displayName", "at most 200 characters"));
        }
    }
}
