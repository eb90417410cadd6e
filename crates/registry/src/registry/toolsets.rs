//! Toolsets: what a principal sees in `tools/list`. Tools belong to toolsets (their own
//! `toolset`, else their upstream's name); a tenant's policies name the toolsets listed by
//! default, and a principal widens its view by loading more. A toolset is a view, not a
//! permission: policy alone decides whether a tool may be called.

use super::Registry;
use crate::error::ApplyError;
use crate::identity::Owner;
use crate::mode::ApprovalMode;
use crate::policy::{applicable, permitted};
use crate::resource::{Role, ToolSpec};
use std::collections::BTreeMap;

/// A toolset of a tenant, as `gatehouse.load_toolset` offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsetInfo {
    pub name: String,
    pub read_tools: usize,
    pub write_tools: usize,
}

impl Registry {
    /// The toolset a tool of the tenant belongs to.
    pub fn toolset_of<'a>(tool_name: &'a str, tool: &'a ToolSpec) -> &'a str {
        tool.toolset
            .as_deref()
            .unwrap_or_else(|| tool_name.split_once('.').map_or(tool_name, |(u, _)| u))
    }

    /// Whether the tool only reads: its declared maximum mode is `read_only`.
    fn reads_only(&self, tenant: &str, tool_name: &str, tool: &ToolSpec) -> bool {
        let upstream = tool_name.split_once('.').map_or(tool_name, |(u, _)| u);
        let trusted = self.upstream(tenant, upstream).is_some_and(|u| u.trusted);
        tool.declared_mode(trusted).0 == ApprovalMode::ReadOnly
    }

    /// The tools `principal` may call in `tenant`, as policy permits them to its roles.
    fn permitted_tools<'a>(
        &'a self,
        tenant: &'a str,
        roles: &[Role],
    ) -> Vec<(&'a str, &'a ToolSpec)> {
        let policies = self.policies(tenant);
        let applicable = applicable(&policies, roles);
        self.tools_for(tenant)
            .into_iter()
            .filter(|(name, _)| permitted(&applicable, name).is_ok())
            .collect()
    }

    /// What `principal`, acting for no end user, sees in `tools/list` for `tenant`.
    pub fn visible_tools<'a>(
        &'a self,
        tenant: &'a str,
        principal: &str,
    ) -> Vec<(&'a str, &'a ToolSpec)> {
        self.visible_tools_for(
            tenant,
            Owner {
                principal,
                end_user: None,
            },
        )
    }

    /// What `owner` sees in `tools/list` for `tenant`, in name order: the tools its principal's
    /// roles may call, narrowed to the toolsets loaded (by this principal for this end user) when
    /// the tenant's policies name default ones. Empty for a principal that is not an agent of
    /// the tenant.
    pub fn visible_tools_for<'a>(
        &'a self,
        tenant: &'a str,
        owner: Owner<'_>,
    ) -> Vec<(&'a str, &'a ToolSpec)> {
        let principal = owner.principal;
        let Some(spec) = self.principal(principal) else {
            return Vec::new();
        };
        if !spec.has_role(tenant, Role::Agent) {
            return Vec::new();
        }
        let roles = spec.roles.get(tenant).cloned().unwrap_or_default();
        let permitted = self.permitted_tools(tenant, &roles);
        let policies = self.policies(tenant);
        let mut loaded: BTreeMap<&str, bool> = BTreeMap::new();
        for (_, policy) in applicable(&policies, &roles) {
            for t in &policy.default_toolsets {
                *loaded.entry(t.name.as_str()).or_default() |= t.include_write_tools;
            }
        }
        let defaults_named = !loaded.is_empty();
        if let Some(own) = self.state.toolsets.get(&(tenant.to_owned(), owner.slot())) {
            for (name, write) in own {
                *loaded.entry(name.as_str()).or_default() |= *write;
            }
        }
        if !defaults_named && loaded.is_empty() {
            return permitted;
        }
        permitted
            .into_iter()
            .filter(
                |(name, tool)| match loaded.get(Self::toolset_of(name, tool)) {
                    Some(true) => true,
                    Some(false) => self.reads_only(tenant, name, tool),
                    None => false,
                },
            )
            .collect()
    }

    /// The toolsets of the tenant's tools that `principal` may call, by name.
    pub fn toolsets(&self, tenant: &str, principal: &str) -> Vec<ToolsetInfo> {
        let roles = self
            .principal(principal)
            .and_then(|p| p.roles.get(tenant).cloned())
            .unwrap_or_default();
        let mut sets: BTreeMap<&str, ToolsetInfo> = BTreeMap::new();
        for (name, tool) in self.permitted_tools(tenant, &roles) {
            let set = Self::toolset_of(name, tool);
            let info = sets.entry(set).or_insert_with(|| ToolsetInfo {
                name: set.to_owned(),
                read_tools: 0,
                write_tools: 0,
            });
            if self.reads_only(tenant, name, tool) {
                info.read_tools += 1;
            } else {
                info.write_tools += 1;
            }
        }
        sets.into_values().collect()
    }

    /// Loads a toolset for `principal` acting for `user`: another end user behind the same
    /// principal keeps its own view.
    pub(super) fn load_toolset(
        &mut self,
        tenant: &str,
        principal: &str,
        user: Option<&str>,
        toolset: &str,
        include_write_tools: bool,
    ) -> Result<crate::command::Response, ApplyError> {
        if !self
            .principal(principal)
            .is_some_and(|p| p.has_role(tenant, Role::Agent))
        {
            return Err(ApplyError::NotFound {
                what: format!("agent {principal} of tenant {tenant}"),
            });
        }
        if !self
            .toolsets(tenant, principal)
            .iter()
            .any(|t| t.name == toolset)
        {
            return Err(ApplyError::NotFound {
                what: format!("toolset {toolset} in tenant {tenant}"),
            });
        }
        let write = self
            .state
            .toolsets
            .entry((
                tenant.to_owned(),
                Owner {
                    principal,
                    end_user: user,
                }
                .slot(),
            ))
            .or_default()
            .entry(toolset.to_owned())
            .or_default();
        *write |= include_write_tools;
        Ok(crate::command::Response::ToolsetLoaded {
            toolset: toolset.to_owned(),
            include_write_tools: *write,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Proposal};
    use crate::documents;
    use uuid::Uuid;

    const TENANT: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: bot}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000001"
  roles: {acme: [agent]}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: other}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000002"
  roles: {acme: [agent]}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: crm.search, tenant: acme}
spec: {approvalMode: read_only}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: crm.delete, tenant: acme}
spec: {approvalMode: destructive}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: billing.invoices, tenant: acme}
spec: {approvalMode: read_only, toolset: finance}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: billing.internal, tenant: acme}
spec: {approvalMode: read_only}
"#;

    struct Fixture {
        registry: Registry,
        index: u64,
    }

    impl Fixture {
        fn new(extra: &str) -> Fixture {
            let mut f = Fixture {
                registry: Registry::new(),
                index: 0,
            };
            let text = format!("{TENANT}{extra}");
            let resources = documents::parse("toolsets.yaml", &text).into_resources();
            f.apply(Command::Put { resources }).unwrap();
            f
        }

        fn apply(&mut self, command: Command) -> Result<crate::command::Response, ApplyError> {
            self.index += 1;
            self.registry.apply(
                self.index,
                &Proposal {
                    request_id: Uuid::from_u128(self.index as u128),
                    at: 1_000,
                    command,
                },
            )
        }

        fn load(&mut self, principal: &str, toolset: &str, write: bool) -> Result<(), ApplyError> {
            self.load_for(principal, None, toolset, write)
        }

        fn load_for(
            &mut self,
            principal: &str,
            user: Option<&str>,
            toolset: &str,
            write: bool,
        ) -> Result<(), ApplyError> {
            self.apply(Command::LoadToolset {
                tenant: "acme".into(),
                principal: principal.into(),
                user: user.map(str::to_owned),
                toolset: toolset.into(),
                include_write_tools: write,
            })
            .map(|_| ())
        }

        fn visible(&self, principal: &str) -> Vec<&str> {
            self.registry
                .visible_tools("acme", principal)
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        }
    }

    const DEFAULTS: &str = r#"
---
apiVersion: gatehouse.dev/v1
kind: Policy
metadata: {name: lean, tenant: acme}
spec:
  defaultToolsets: [{name: crm}]
  deny: [billing.internal]
"#;

    #[test]
    fn without_default_toolsets_every_permitted_tool_is_listed_in_name_order() {
        let f = Fixture::new("");
        assert_eq!(
            f.visible("bot"),
            [
                "billing.internal",
                "billing.invoices",
                "crm.delete",
                "crm.search"
            ]
        );
        assert!(f.registry.visible_tools("acme", "nobody").is_empty());
    }

    #[test]
    fn a_toolset_loaded_for_one_end_user_leaves_another_users_list_alone() {
        let mut f = Fixture::new(DEFAULTS);
        f.load_for("bot", Some("alice"), "finance", false).unwrap();
        let seen = |f: &Fixture, user| -> Vec<String> {
            let owner = Owner {
                principal: "bot",
                end_user: Some(user),
            };
            let visible = f.registry.visible_tools_for("acme", owner);
            visible.into_iter().map(|(n, _)| n.to_owned()).collect()
        };
        assert_eq!(seen(&f, "alice"), ["billing.invoices", "crm.search"]);
        assert_eq!(seen(&f, "bob"), ["crm.search"]);
        assert_eq!(f.visible("bot"), ["crm.search"]);
    }

    #[test]
    fn default_toolsets_list_their_read_tools_and_policy_still_denies() {
        let f = Fixture::new(DEFAULTS);
        assert_eq!(f.visible("bot"), ["crm.search"]);
        let sets = f.registry.toolsets("acme", "bot");
        let names: Vec<_> = sets
            .iter()
            .map(|t| (t.name.as_str(), t.read_tools, t.write_tools))
            .collect();
        // billing.internal is denied, so the `billing` toolset has nothing to offer.
        assert_eq!(names, [("crm", 1, 1), ("finance", 1, 0)]);
    }

    #[test]
    fn loading_widens_one_principal_only_and_never_narrows() {
        let mut f = Fixture::new(DEFAULTS);
        f.load("bot", "finance", false).unwrap();
        assert_eq!(f.visible("bot"), ["billing.invoices", "crm.search"]);
        f.load("bot", "crm", true).unwrap();
        assert_eq!(
            f.visible("bot"),
            ["billing.invoices", "crm.delete", "crm.search"]
        );
        f.load("bot", "crm", false).unwrap();
        assert!(f.visible("bot").contains(&"crm.delete"));
        assert_eq!(f.visible("other"), ["crm.search"]);
    }

    #[test]
    fn loading_an_unknown_or_denied_toolset_is_refused_without_change() {
        let mut f = Fixture::new(DEFAULTS);
        assert!(matches!(
            f.load("bot", "nope", false),
            Err(ApplyError::NotFound { .. })
        ));
        assert!(matches!(
            f.load("bot", "billing", false),
            Err(ApplyError::NotFound { .. })
        ));
        assert!(matches!(
            f.load("ghost", "crm", false),
            Err(ApplyError::NotFound { .. })
        ));
        // A refused command leaves the state as it was, but for its applied index.
        let mut g = f.registry.clone();
        g.applied_index = 0;
        let mut h = Fixture::new(DEFAULTS).registry;
        h.applied_index = 0;
        assert_eq!(g.digest(), h.digest());
    }

    #[test]
    fn loaded_toolsets_survive_a_snapshot() {
        let mut f = Fixture::new(DEFAULTS);
        f.load("bot", "finance", false).unwrap();
        let restored = Registry::from_bytes(&f.registry.to_bytes()).unwrap();
        assert_eq!(restored, f.registry);
        assert_eq!(
            restored.visible_tools("acme", "bot").len(),
            f.visible("bot").len()
        );
    }
}
