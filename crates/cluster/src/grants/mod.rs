//! What the operator lets tenants' upstreams use on this node: named credentials (where each
//! secret is, and which tenants may name it) and built-in tools (which ones, for which tenants).
//!
//! Both are declared in the node's configuration, never in the registry: a tenant's admin writes
//! Upstreams, and an Upstream that could name any file or variable of the node would read the
//! cluster's own keys. The registry holds only names. Two places consult the grants: a proposal
//! that puts an Upstream or Tool is refused before it is proposed when it names what its tenant
//! was not granted ([`Grants::check`]), and the executor asks again at call time for the calling
//! tenant ([`Grants::credential_for`], [`Grants::builtin_enabled`]), so a registry written by an
//! earlier version, or by a node configured otherwise, never gets more than this node allows.

mod builtin;
mod config;
#[cfg(test)]
mod tests;

pub use config::inside;
pub use config::{CredentialConfig, builtin_grant, grants_from_config};

pub use builtin::BuiltinTool;
use gatehouse_registry::resource::{
    CredentialRef, Kind, Problem, Resource, ResourceKey, UpstreamKind, UpstreamSpec,
};
use gatehouse_registry::{ApplyError, Command, Registry};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A credential's tenants: `*` grants it to every tenant.
pub const EVERY_TENANT: &str = "*";

/// Where an operator's credential is read from, on each call (a rotated secret is used from the
/// next call on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// An environment variable of the node process.
    Env(String),
    /// A file; its content, trimmed, is the secret.
    File(PathBuf),
}

/// One credential the operator declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorCredential {
    pub source: CredentialSource,
    /// The tenants whose Upstreams may name it; [`EVERY_TENANT`] for all.
    pub tenants: BTreeSet<String>,
}

impl OperatorCredential {
    pub fn granted_to(&self, tenant: &str) -> bool {
        self.tenants.contains(EVERY_TENANT) || self.tenants.contains(tenant)
    }
}

/// The node's grants. Empty by default: no credential, no built-in tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    credentials: BTreeMap<String, OperatorCredential>,
    builtins: BTreeMap<String, BTreeSet<BuiltinTool>>,
    /// The node's data directory: no credential file may be in it.
    guarded: Option<PathBuf>,
}

impl Grants {
    /// Adds (or replaces) the credential `name`.
    pub fn with_credential(
        mut self,
        name: &str,
        source: CredentialSource,
        tenants: &[&str],
    ) -> Self {
        self.credentials.insert(
            name.to_owned(),
            OperatorCredential {
                source,
                tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
            },
        );
        self
    }

    /// Enables built-in tools for `tenant`.
    pub fn with_builtins(
        mut self,
        tenant: &str,
        tools: impl IntoIterator<Item = BuiltinTool>,
    ) -> Self {
        self.builtins
            .entry(tenant.to_owned())
            .or_default()
            .extend(tools);
        self
    }

    /// The directory no credential file may be in (the node's data directory: its keys).
    pub fn guarding(mut self, data_dir: &Path) -> Self {
        self.guarded = Some(data_dir.to_owned());
        self
    }

    pub fn guarded_dir(&self) -> Option<&Path> {
        self.guarded.as_deref()
    }

    /// Every credential, by name.
    pub fn credentials(&self) -> &BTreeMap<String, OperatorCredential> {
        &self.credentials
    }

    /// The built-in tools enabled per tenant.
    pub fn builtins(&self) -> &BTreeMap<String, BTreeSet<BuiltinTool>> {
        &self.builtins
    }

    /// Where the credential `name` is, when `tenant` may use it. `tenant` is `None` for work no
    /// tenant asked for (listing a shared upstream's tools): only a credential granted to every
    /// tenant serves it.
    pub fn credential_for(&self, tenant: Option<&str>, name: &str) -> Option<&CredentialSource> {
        let credential = self.credentials.get(name)?;
        let granted = match tenant {
            Some(tenant) => credential.granted_to(tenant),
            None => credential.tenants.contains(EVERY_TENANT),
        };
        granted.then_some(&credential.source)
    }

    pub fn builtin_enabled(&self, tenant: &str, tool: BuiltinTool) -> bool {
        self.builtins
            .get(tenant)
            .is_some_and(|tools| tools.contains(&tool))
    }

    /// Whether [`Grants::check`] has anything to look at in `command`: only puts name
    /// credentials and built-in tools. Every other proposal skips the registry lock.
    pub fn concerns(command: &Command) -> bool {
        matches!(command, Command::Put { .. } | Command::Batch { .. })
    }

    /// Refuses a command that puts an Upstream or Tool using what its tenant was not granted on
    /// this node, naming the field; the checks `Command::validate` cannot make, since they
    /// depend on the node's configuration. `registry` resolves a Tool's upstream when the
    /// command does not carry it.
    pub fn check(&self, command: &Command, registry: &Registry) -> Result<(), ApplyError> {
        match command {
            Command::Put { resources } => {
                for resource in resources {
                    let problems = self.problems(resource, resources, registry);
                    if !problems.is_empty() {
                        return Err(ApplyError::Invalid {
                            key: resource.key(),
                            problems,
                        });
                    }
                }
                Ok(())
            }
            Command::Batch { proposals } => proposals
                .iter()
                .try_for_each(|p| self.check(&p.command, registry)),
            _ => Ok(()),
        }
    }

    fn problems(
        &self,
        resource: &Resource,
        batch: &[Resource],
        registry: &Registry,
    ) -> Vec<Problem> {
        let mut problems = Vec::new();
        match resource {
            Resource::Upstream(upstream) => {
                self.upstream_problems(
                    upstream.metadata.tenant.as_deref(),
                    &upstream.spec,
                    &mut problems,
                );
            }
            Resource::Tool(tool) => {
                let tenant = tool.metadata.tenant.as_deref();
                let Some((upstream, own_name)) = tool.metadata.name.split_once('.') else {
                    return problems;
                };
                let builtin = upstream_of(tenant, upstream, batch, registry)
                    .is_some_and(|spec| spec.kind == UpstreamKind::Builtin);
                if builtin {
                    let enabled = match (tenant, BuiltinTool::parse(own_name)) {
                        (Some(tenant), Some(builtin)) => self.builtin_enabled(tenant, builtin),
                        _ => false,
                    };
                    if !enabled {
                        problems.push(Problem::new(
                            "metadata.name",
                            format!(
                                "{own_name} is not a built-in tool this node enables for tenant \
                                 {}: the operator enables built-in tools per tenant in the \
                                 nodes' configuration (builtins = [\"TENANT:TOOL\"])",
                                tenant.unwrap_or("(shared)")
                            ),
                        ));
                    }
                }
            }
            Resource::Webhook(webhook) => {
                let tenant = webhook.metadata.tenant.as_deref().unwrap_or("(none)");
                let name = &webhook.spec.credential;
                if self.credential_for(Some(tenant), name).is_none() {
                    // Worded alike whether the credential is missing or another tenant's.
                    problems.push(Problem::new(
                        "spec.credential",
                        format!(
                            "{name:?} is not a credential this node grants to tenant {tenant}: \
                             the operator declares the secrets webhooks are signed with, and \
                             the tenants that may use each, in the nodes' configuration"
                        ),
                    ));
                }
            }
            Resource::Tenant(_)
            | Resource::Principal(_)
            | Resource::Skill(_)
            | Resource::Policy(_) => {}
        }
        problems
    }

    fn upstream_problems(
        &self,
        tenant: Option<&str>,
        spec: &UpstreamSpec,
        problems: &mut Vec<Problem>,
    ) {
        if spec.kind == UpstreamKind::Builtin {
            match tenant {
                None => problems.push(Problem::new(
                    "metadata.tenant",
                    "a built-in upstream belongs to one tenant: built-in tools are enabled, \
                     and keep their state, per tenant",
                )),
                Some(tenant) if self.builtins.get(tenant).is_none_or(BTreeSet::is_empty) => {
                    problems.push(Problem::new(
                        "spec.type",
                        format!(
                            "this node enables no built-in tools for tenant {tenant}: the \
                             operator enables them per tenant in the nodes' configuration \
                             (builtins = [\"{tenant}:echo\"])"
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        let Some(CredentialRef::Named(name)) = &spec.credential else {
            // The old form is refused by `Command::validate`, with the new form shown.
            return;
        };
        let usable = match tenant {
            Some(tenant) => self.credential_for(Some(tenant), name).is_some(),
            // A shared upstream is a cluster admin's; each call checks its caller's tenant.
            None => self.credentials.contains_key(name),
        };
        if !usable {
            // Worded alike whether the credential is missing or another tenant's: the answer
            // must not tell a tenant which credentials exist.
            problems.push(Problem::new(
                "spec.credential",
                match tenant {
                    Some(tenant) => format!(
                        "{name:?} is not a credential this node grants to tenant {tenant}: the \
                         operator declares credentials and the tenants that may use them in \
                         the nodes' configuration"
                    ),
                    None => format!(
                        "{name:?} is not a credential this node declares: the operator \
                         declares credentials in the nodes' configuration"
                    ),
                },
            ));
        }
    }
}

/// The upstream a tenant's tool names: the command's own resources first (an Upstream and its
/// Tools are often applied together), then the registry; the tenant's own before a shared one.
fn upstream_of<'a>(
    tenant: Option<&str>,
    name: &str,
    batch: &'a [Resource],
    registry: &'a Registry,
) -> Option<&'a UpstreamSpec> {
    let in_batch = |scope: Option<&str>| {
        batch.iter().find_map(|r| match r {
            Resource::Upstream(u)
                if u.metadata.name == name && u.metadata.tenant.as_deref() == scope =>
            {
                Some(&u.spec)
            }
            _ => None,
        })
    };
    let stored = |scope: Option<&str>| {
        let key = ResourceKey {
            kind: Kind::Upstream,
            tenant: scope.map(str::to_owned),
            name: name.to_owned(),
        };
        match registry.get(&key).map(|s| &s.resource) {
            Some(Resource::Upstream(u)) => Some(&u.spec),
            _ => None,
        }
    };
    let own = tenant.and_then(|t| in_batch(Some(t)).or_else(|| stored(Some(t))));
    own.or_else(|| in_batch(None)).or_else(|| stored(None))
}
