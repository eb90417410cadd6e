//! Call records as a proposal would fix them, for tests that need one without a registry.

use gatehouse_registry::ApprovalMode;
use gatehouse_registry::call::{CallId, NewCall, PrincipalChain};

/// A destructive call of `tenant`'s `tool` by the agent `agent`, needing `required` approvals,
/// with arguments `arguments` (canonical JSON) and expiring at `expires_at`.
pub fn destructive(
    id: &str,
    tenant: &str,
    tool: &str,
    agent: &str,
    arguments: &str,
    required: u32,
    expires_at: u64,
) -> NewCall {
    NewCall {
        id: CallId(id.into()),
        tenant: tenant.into(),
        tool: tool.into(),
        arguments: arguments.into(),
        args_sha256: gatehouse_registry::canonical::sha256_hex(arguments.as_bytes()),
        chain: PrincipalChain {
            end_user: None,
            agent: agent.into(),
            a2a_peer: None,
            people: vec![],
        },
        requested_mode: None,
        effective_mode: ApprovalMode::Destructive,
        highest_mode: ApprovalMode::Destructive,
        policy_decision_id: "decision".into(),
        tool_generation: 1,
        policy_generation: 0,
        idempotency_key: None,
        retry_safe: false,
        required_approvals: required,
        expires_at,
        approval_valid_ms: 60_000,
        context_id: None,
        trace_parent: None,
    }
}
