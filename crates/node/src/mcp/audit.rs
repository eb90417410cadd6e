//! Context pulls (`prompts/get`, `resources/read`) are audited like tool calls; `prompts/list`
//! and the other listings are not. [`context_pull`] is the one place they are recorded: it
//! builds the audit log's entry, and until the node hands its `AuditLog` to the fronts it emits
//! that entry as a structured `gatehouse::audit` event.

use super::guard::Agent;
use gatehouse_audit::{Entry, Kind};

/// What a context pull was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pull {
    PromptGet,
    ResourceRead,
}

/// The audit entry of one context pull: who (end user, agent), for which tenant, what, and
/// whether it was found.
pub fn entry(agent: &Agent, pull: Pull, target: &str, found: bool) -> Entry {
    let mut chain = Vec::new();
    if let Some(user) = &agent.caller.end_user {
        chain.push(format!("user:{user}"));
    }
    chain.push(format!("agent:{}", agent.caller.name));
    Entry {
        kind: match pull {
            Pull::PromptGet => Kind::PromptGet,
            Pull::ResourceRead => Kind::ResourceRead,
        },
        tenant: agent.tenant.clone(),
        chain,
        target: Some(target.to_owned()),
        outcome: if found {
            "succeeded"
        } else {
            "refused:not_found"
        }
        .to_owned(),
        ..Entry::default()
    }
}

/// Records one context pull.
pub fn context_pull(agent: &Agent, pull: Pull, target: &str, found: bool) {
    let entry = entry(agent, pull, target, found);
    tracing::info!(
        target: "gatehouse::audit",
        entry = %serde_json::to_string(&entry).unwrap_or_default(),
        "context pull"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Caller, Credential};

    #[test]
    fn a_pull_names_the_chain_the_tenant_and_what_was_read() {
        let agent = Agent {
            caller: Caller {
                name: "bot".into(),
                spec: Default::default(),
                end_user: Some("dana".into()),
                credential: Credential::ApiKey,
            },
            tenant: Some("acme".into()),
        };
        let entry = entry(&agent, Pull::ResourceRead, "gatehouse://guide", true);
        assert_eq!(entry.kind, Kind::ResourceRead);
        assert_eq!(entry.chain, ["user:dana", "agent:bot"]);
        assert_eq!(entry.tenant.as_deref(), Some("acme"));
        assert_eq!(entry.target.as_deref(), Some("gatehouse://guide"));
        assert_eq!(entry.outcome, "succeeded");
        let missing = super::entry(&agent, Pull::PromptGet, "nope", false);
        assert_eq!(missing.outcome, "refused:not_found");
    }
}
