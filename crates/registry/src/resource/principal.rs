use super::{Problem, is_valid_name};
use crate::mode::ApprovalMode;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a principal may do in a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Agent,
    Approver,
    Admin,
    Operator,
}

/// A caller of the gateway. Its API key is kept only as a SHA-256 digest: the key itself is
/// shown once, when it is made, and never stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrincipalSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtSubject>,
    /// Tenant name to the roles held there.
    #[serde(default)]
    pub roles: BTreeMap<String, Vec<Role>>,
    /// Roles over the whole cluster: `admin` (every tenant, membership) and `operator`
    /// (status, membership).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_roles: Vec<Role>,
    /// The end user an API key principal acts for; a JWT principal's user is its `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A declared intent: the most this principal means to do. A call whose effective mode is
    /// above it (under `read_only`: anything but a read-only call) is refused before it is
    /// proposed, whatever the tool's capability class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<ApprovalMode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSubject {
    pub issuer: String,
    pub subject: String,
}

impl PrincipalSpec {
    pub fn has_role(&self, tenant: &str, role: Role) -> bool {
        self.roles.get(tenant).is_some_and(|r| r.contains(&role))
    }

    pub fn has_cluster_role(&self, role: Role) -> bool {
        self.cluster_roles.contains(&role)
    }

    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        for (i, role) in self.cluster_roles.iter().enumerate() {
            if !matches!(role, Role::Admin | Role::Operator) {
                problems.push(Problem::new(
                    format!("spec.clusterRoles[{i}]"),
                    "only admin and operator are cluster-wide roles",
                ));
            }
        }
        match (&self.api_key_sha256, &self.jwt) {
            (None, None) => problems.push(Problem::new(
                "spec",
                "a Principal needs apiKeySha256 or jwt to authenticate by",
            )),
            (Some(_), Some(_)) => {
                problems.push(Problem::new("spec", "give apiKeySha256 or jwt, not both"))
            }
            _ => {}
        }
        if let Some(digest) = &self.api_key_sha256 {
            let lower_hex = digest.len() == 64
                && digest
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
            if !lower_hex {
                problems.push(Problem::new(
                    "spec.apiKeySha256",
                    "must be the 64 lower-case hex digits of the key's SHA-256, never the key itself",
                ));
            }
        }
        if let Some(jwt) = &self.jwt {
            if jwt.issuer.trim().is_empty() {
                problems.push(Problem::new("spec.jwt.issuer", "must not be empty"));
            }
            if jwt.subject.trim().is_empty() {
                problems.push(Problem::new("spec.jwt.subject", "must not be empty"));
            }
        }
        for (tenant, roles) in &self.roles {
            if !is_valid_name(tenant) {
                problems.push(Problem::new(
                    format!("spec.roles.{tenant}"),
                    "not a tenant name",
                ));
            }
            if roles.is_empty() {
                problems.push(Problem::new(
                    format!("spec.roles.{tenant}"),
                    "lists no role: remove the tenant or name a role",
                ));
            }
        }
        if self.user.as_ref().is_some_and(|u| u.trim().is_empty()) {
            problems.push(Problem::new("spec.user", "must not be empty when given"));
        }
    }
}
