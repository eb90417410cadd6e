//! Read-side lookups the call path needs: a tenant's view of tools and upstreams (its own first,
//! then the shared ones), and the tools a skill resolves to.

use super::Registry;
use crate::classify::{self, ResolvedTool};
use crate::glob::tool_matches;
use crate::resource::{Kind, Resource, ResourceKey, SkillSpec, ToolSpec, UpstreamSpec};

impl Registry {
    /// The tool as `tenant` sees it, with its generation: the tenant's own declaration wins over
    /// a shared one of the same name.
    pub fn tool(&self, tenant: &str, name: &str) -> Option<(&ToolSpec, u64)> {
        self.scoped(Kind::Tool, tenant, name)
            .and_then(|s| match &s.resource {
                Resource::Tool(t) => Some((&t.spec, s.generation)),
                _ => None,
            })
    }

    pub fn upstream(&self, tenant: &str, name: &str) -> Option<&UpstreamSpec> {
        self.scoped(Kind::Upstream, tenant, name)
            .and_then(|s| match &s.resource {
                Resource::Upstream(u) => Some(&u.spec),
                _ => None,
            })
    }

    /// Every tool `tenant` can see, by name; its own shadow shared ones of the same name.
    pub fn tools_for<'a>(&'a self, tenant: &'a str) -> Vec<(&'a str, &'a ToolSpec)> {
        let mut tools: std::collections::BTreeMap<&str, &ToolSpec> = self
            .list(Kind::Tool, Some(None), None)
            .filter_map(|s| match &s.resource {
                Resource::Tool(t) => Some((t.metadata.name.as_str(), &t.spec)),
                _ => None,
            })
            .collect();
        for s in self.list(Kind::Tool, Some(Some(tenant)), None) {
            if let Resource::Tool(t) = &s.resource {
                tools.insert(&t.metadata.name, &t.spec);
            }
        }
        tools.into_iter().collect()
    }

    pub fn skill(&self, tenant: &str, name: &str) -> Option<&SkillSpec> {
        self.scoped(Kind::Skill, tenant, name)
            .and_then(|s| match &s.resource {
                Resource::Skill(o) => Some(&o.spec),
                _ => None,
            })
    }

    /// Whether the tenant's policies keep a tool out whatever the caller's role: a deny pattern
    /// matches, or allow lists exist and none matches.
    pub fn tool_denied(&self, tenant: &str, tool: &str) -> bool {
        let policies = self.policies(tenant);
        let denied = policies
            .iter()
            .any(|(_, p)| p.deny.iter().any(|d| tool_matches(d, tool)));
        let allows: Vec<&String> = policies.iter().flat_map(|(_, p)| &p.allow).collect();
        denied || (!allows.is_empty() && !allows.iter().any(|a| tool_matches(a, tool)))
    }

    /// The tools a skill of the tenant (or a global one) resolves to, filtered by the tenant's
    /// policy. `None` when there is no such skill.
    pub fn resolve_skill_tools(&self, tenant: &str, skill: &str) -> Option<Vec<ResolvedTool>> {
        let spec = self.skill(tenant, skill)?;
        Some(classify::resolve_skill_tools(
            spec,
            self.tools_for(tenant),
            |tool| self.tool_denied(tenant, tool),
        ))
    }

    fn scoped(&self, kind: Kind, tenant: &str, name: &str) -> Option<&super::Stored> {
        let own = ResourceKey {
            kind,
            tenant: Some(tenant.to_owned()),
            name: name.to_owned(),
        };
        self.get(&own).or_else(|| {
            self.get(&ResourceKey {
                tenant: None,
                ..own
            })
        })
    }
}
