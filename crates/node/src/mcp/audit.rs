//! Context pulls (`prompts/get`, `resources/read`) are audited like tool calls; `prompts/list`
//! and the other listings are not. Until the node's audit log is wired in, a pull is recorded
//! as a structured `gatehouse::audit` event.

use super::guard::Agent;

/// Records one context pull: who, for which tenant, what, and whether it was found.
pub fn context_pull(agent: &Agent, method: &str, target: &str, found: bool) {
    tracing::info!(
        target: "gatehouse::audit",
        kind = "context_pull",
        method,
        target_name = target,
        principal = %agent.caller.name,
        end_user = agent.caller.spec.user.as_deref().unwrap_or(""),
        tenant = agent.tenant.as_deref().unwrap_or(""),
        outcome = if found { "ok" } else { "not_found" },
    );
}
