//! The declarative resources an admin manages: their shapes, their keys in the registry, and
//! the checks every one of them passes before it may be proposed.

mod by_kind;
mod names;
mod policy;
mod principal;
mod skill;
mod tenant;
mod tool;
mod upstream;
mod webhook;

pub use names::{is_valid_name, is_valid_tool_name};
pub use policy::{
    ApprovalRequirement, Budget, CompareOp, Condition, ModeRule, PolicySpec, ToolsetRef,
};
pub use principal::{JwtSubject, PrincipalSpec, Role};
pub use skill::{Level, SkillScope, SkillSpec, ToolOverrides};
pub use tenant::TenantSpec;
pub use tool::{
    ArgConstraint, DISCOVERED_FROM, HttpBinding, ModeSource, ToolAnnotations, ToolSpec,
};
pub use upstream::{
    BreakerPolicy, CredentialRef, LEGACY_CREDENTIAL, LegacyCredential, RetryPolicy, UpstreamKind,
    UpstreamSpec,
};
pub use webhook::{NotifyEvent, WebhookFormat, WebhookSpec};

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub const API_VERSION: &str = "gatehouse.dev/v1";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A resource as written in a declarative file, less its `kind`, which the enum carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Object<S> {
    pub api_version: String,
    pub metadata: Metadata,
    pub spec: S,
}

/// Written as its object with `kind` first; read the same way without buffering (`by_kind`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind")]
pub enum Resource {
    Tenant(Object<TenantSpec>),
    Principal(Object<PrincipalSpec>),
    Upstream(Object<UpstreamSpec>),
    Tool(Object<ToolSpec>),
    Skill(Object<SkillSpec>),
    Policy(Object<PolicySpec>),
    Webhook(Object<WebhookSpec>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    Tenant,
    Principal,
    Upstream,
    Tool,
    Skill,
    Policy,
    Webhook,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Tenant,
        Kind::Principal,
        Kind::Upstream,
        Kind::Tool,
        Kind::Skill,
        Kind::Policy,
        Kind::Webhook,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tenant => "Tenant",
            Kind::Principal => "Principal",
            Kind::Upstream => "Upstream",
            Kind::Tool => "Tool",
            Kind::Skill => "Skill",
            Kind::Policy => "Policy",
            Kind::Webhook => "Webhook",
        }
    }

    /// Case-insensitive, singular or plural, as an operator types it on a command line.
    pub fn parse(text: &str) -> Option<Kind> {
        let lower = text.to_ascii_lowercase();
        let singular = match lower.strip_suffix("ies") {
            Some(stem) => format!("{stem}y"),
            None => lower.strip_suffix('s').unwrap_or(&lower).to_owned(),
        };
        Kind::ALL.into_iter().find(|k| {
            k.as_str().eq_ignore_ascii_case(&singular) || k.as_str().eq_ignore_ascii_case(&lower)
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a resource lives in the registry. `tenant` is `None` for cluster-wide resources:
/// tenants, principals, global skills, and upstreams or tools shared by every tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceKey {
    pub kind: Kind,
    pub tenant: Option<String>,
    pub name: String,
}

impl ResourceKey {
    /// What [`Display`](fmt::Display) writes, into a string made its full length up front:
    /// `to_string` grows its string three times on the way, which showed in a read-only call's
    /// profile (every call to an upstream names its upstream's key).
    pub fn text(&self) -> String {
        let tenant = self.tenant.as_deref().map_or(0, |t| t.len() + 1);
        let mut text =
            String::with_capacity(self.kind.as_str().len() + tenant + 1 + self.name.len());
        // Writing into a String cannot fail.
        let _ = fmt::Write::write_fmt(&mut text, format_args!("{self}"));
        text
    }
}

impl fmt::Display for ResourceKey {
    /// `kind/tenant/name`, or `kind/name` for a cluster-wide resource.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        if let Some(tenant) = &self.tenant {
            f.write_str("/")?;
            f.write_str(tenant)?;
        }
        f.write_str("/")?;
        f.write_str(&self.name)
    }
}

/// One thing wrong with a resource: the field it concerns (a dotted path) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl Problem {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Resource {
    pub fn kind(&self) -> Kind {
        match self {
            Resource::Tenant(_) => Kind::Tenant,
            Resource::Principal(_) => Kind::Principal,
            Resource::Upstream(_) => Kind::Upstream,
            Resource::Tool(_) => Kind::Tool,
            Resource::Skill(_) => Kind::Skill,
            Resource::Policy(_) => Kind::Policy,
            Resource::Webhook(_) => Kind::Webhook,
        }
    }

    pub fn metadata(&self) -> &Metadata {
        match self {
            Resource::Tenant(o) => &o.metadata,
            Resource::Principal(o) => &o.metadata,
            Resource::Upstream(o) => &o.metadata,
            Resource::Tool(o) => &o.metadata,
            Resource::Skill(o) => &o.metadata,
            Resource::Policy(o) => &o.metadata,
            Resource::Webhook(o) => &o.metadata,
        }
    }

    pub fn name(&self) -> &str {
        &self.metadata().name
    }

    /// The tenant the resource belongs to. A skill's tenant is its scope's; everything else
    /// takes `metadata.tenant`, which tenants and principals never have.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Resource::Skill(o) => o.spec.scope.tenant.as_deref(),
            Resource::Tenant(_) | Resource::Principal(_) => None,
            _ => self.metadata().tenant.as_deref(),
        }
    }

    /// The stored form: a skill's `metadata.tenant` is filled in from its scope, so a resource
    /// read back and applied again is unchanged.
    pub fn normalized(mut self) -> Self {
        if let Resource::Skill(o) = &mut self
            && o.metadata.tenant.is_none()
        {
            o.metadata.tenant = o.spec.scope.tenant.clone();
        }
        self
    }

    pub fn key(&self) -> ResourceKey {
        ResourceKey {
            kind: self.kind(),
            tenant: self.tenant().map(str::to_owned),
            name: self.name().to_owned(),
        }
    }

    /// Every problem with the resource at once; empty when it may be proposed.
    pub fn validate(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let meta = self.metadata();
        let api_version = match self {
            Resource::Tenant(o) => &o.api_version,
            Resource::Principal(o) => &o.api_version,
            Resource::Upstream(o) => &o.api_version,
            Resource::Tool(o) => &o.api_version,
            Resource::Skill(o) => &o.api_version,
            Resource::Policy(o) => &o.api_version,
            Resource::Webhook(o) => &o.api_version,
        };
        if api_version != API_VERSION {
            problems.push(Problem::new(
                "apiVersion",
                format!("must be {API_VERSION}, not {api_version:?}"),
            ));
        }
        let name_ok = match self {
            Resource::Tool(_) => is_valid_tool_name(&meta.name),
            _ => is_valid_name(&meta.name),
        };
        if !name_ok {
            problems.push(Problem::new(
                "metadata.name",
                match self {
                    Resource::Tool(_) => format!(
                        "{:?} is not a tool name: `upstream.tool`, letters, digits, '-', '_' and '.'",
                        meta.name
                    ),
                    _ => format!(
                        "{:?} is not a name: 1 to 128 of a-z, 0-9, '-', '_' and '.', starting with a letter or digit",
                        meta.name
                    ),
                },
            ));
        }
        if let Some(tenant) = &meta.tenant
            && !is_valid_name(tenant)
        {
            problems.push(Problem::new(
                "metadata.tenant",
                format!("{tenant:?} is not a tenant name"),
            ));
        }
        match self {
            Resource::Tenant(o) => {
                if o.metadata
                    .tenant
                    .as_ref()
                    .is_some_and(|t| *t != o.metadata.name)
                {
                    problems.push(Problem::new(
                        "metadata.tenant",
                        "a Tenant names itself: leave metadata.tenant out",
                    ));
                }
                o.spec.validate(&mut problems);
            }
            Resource::Principal(o) => {
                if o.metadata.tenant.is_some() {
                    problems.push(Problem::new(
                        "metadata.tenant",
                        "a Principal is cluster-wide: give its tenants under spec.roles",
                    ));
                }
                o.spec.validate(&mut problems);
            }
            Resource::Upstream(o) => o.spec.validate(&mut problems),
            Resource::Tool(o) => o.spec.validate(&mut problems),
            Resource::Skill(o) => o.spec.validate(o.metadata.tenant.as_deref(), &mut problems),
            Resource::Policy(o) => {
                if o.metadata.tenant.is_none() {
                    problems.push(Problem::new(
                        "metadata.tenant",
                        "required: a Policy belongs to one tenant",
                    ));
                }
                o.spec.validate(&mut problems);
            }
            Resource::Webhook(o) => {
                if o.metadata.tenant.is_none() {
                    problems.push(Problem::new(
                        "metadata.tenant",
                        "required: a Webhook announces the calls of one tenant",
                    ));
                }
                o.spec.validate(&mut problems);
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_as_operators_type_them() {
        assert_eq!(Kind::parse("skills"), Some(Kind::Skill));
        assert_eq!(Kind::parse("Policy"), Some(Kind::Policy));
        assert_eq!(Kind::parse("policies"), Some(Kind::Policy));
        assert_eq!(Kind::parse("Upstreams"), Some(Kind::Upstream));
        assert_eq!(Kind::parse("TENANT"), Some(Kind::Tenant));
        assert_eq!(Kind::parse("gadget"), None);
    }

    #[test]
    fn a_key_is_written_kind_tenant_name_and_a_shared_one_without_tenant() {
        let key = |kind, tenant: Option<&str>, name: &str| ResourceKey {
            kind,
            tenant: tenant.map(str::to_owned),
            name: name.to_owned(),
        };
        assert_eq!(
            key(Kind::Upstream, Some("acme"), "files").to_string(),
            "Upstream/acme/files"
        );
        assert_eq!(
            key(Kind::Upstream, None, "files").to_string(),
            "Upstream/files"
        );
        assert_eq!(
            key(Kind::Tool, Some("acme"), "files.read").to_string(),
            "Tool/acme/files.read"
        );
        for k in [
            key(Kind::Upstream, Some("acme"), "files"),
            key(Kind::Upstream, None, "files"),
            key(Kind::Skill, Some("a/b"), ""),
            key(Kind::Tenant, None, "ünïcode"),
        ] {
            let text = k.text();
            assert_eq!(text, k.to_string());
            assert_eq!(
                text.capacity(),
                text.len(),
                "{text}: made its length up front"
            );
        }
    }
}
