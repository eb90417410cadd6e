//! The audit entries the pipeline writes: one per tool call (run, proposed or refused), one per
//! context pull, one per execution of an approved call on its home. Bodies are hashed here and
//! never reach the log.

use super::{CallInput, Envelope, GatewayError};
use crate::auth::Caller;
use gatehouse_audit::{Entry, Kind};
use gatehouse_registry::canonical::{canonical_json, sha256_hex};

/// The principal chain, outermost first: the end user, the agent, the A2A peer.
fn chain_of(end_user: Option<&str>, agent: &str, a2a_peer: Option<&str>) -> Vec<String> {
    let mut chain = Vec::with_capacity(3);
    if let Some(user) = end_user {
        chain.push(format!("user:{user}"));
    }
    chain.push(format!("agent:{agent}"));
    if let Some(peer) = a2a_peer {
        chain.push(format!("peer:{peer}"));
    }
    chain
}

fn chain(caller: &Caller, a2a_peer: Option<&str>) -> Vec<String> {
    chain_of(caller.end_user.as_deref(), &caller.name, a2a_peer)
}

/// A call the pipeline ran, proposed, or found recorded under the caller's idempotency key.
pub fn call_entry(caller: &Caller, input: &CallInput, envelope: &Envelope) -> Entry {
    let (output_sha256, output_len) = match &envelope.result_json {
        Some(output) => (
            Some(sha256_hex(output.as_bytes())),
            Some(output.len() as u64),
        ),
        None => (None, None),
    };
    Entry {
        kind: Kind::ToolCall,
        tenant: Some(envelope.tenant.clone()),
        chain: chain(caller, input.a2a_peer.as_deref()),
        target: Some(envelope.tool.clone()),
        mode: Some(envelope.effective_mode.as_str().to_owned()),
        decision: Some(envelope.policy_decision_id.clone()),
        call_id: Some(envelope.call_id.clone()),
        args_sha256: Some(envelope.args_sha256.clone()),
        output_sha256,
        output_len,
        outcome: envelope.state.as_str().to_owned(),
        trace_id: Some(envelope.trace_id.clone()),
    }
}

/// A decision the caller took on a call of its own chain (a cancellation).
pub fn decision_entry(caller: &Caller, call: &Envelope, decision: &str, outcome: String) -> Entry {
    Entry {
        kind: Kind::Approval,
        tenant: Some(call.tenant.clone()),
        chain: chain(caller, None),
        target: Some(call.tool.clone()),
        mode: Some(call.effective_mode.as_str().to_owned()),
        decision: Some(decision.to_owned()),
        call_id: Some(call.call_id.clone()),
        args_sha256: Some(call.args_sha256.clone()),
        outcome,
        trace_id: Some(call.trace_id.clone()),
        ..Entry::default()
    }
}

/// A call refused before it was run or proposed.
pub fn refusal_entry(caller: &Caller, input: &CallInput, error: &GatewayError) -> Entry {
    Entry {
        kind: Kind::ToolCall,
        tenant: Some(input.tenant.clone()),
        chain: chain(caller, input.a2a_peer.as_deref()),
        target: Some(input.tool.clone()),
        args_sha256: Some(sha256_hex(canonical_json(&input.arguments).as_bytes())),
        outcome: format!("refused:{}", error.code.as_str()),
        ..Entry::default()
    }
}

/// A `prompts/get` or `resources/read`: what was pulled, and a digest of what was answered.
pub fn pull_entry(
    caller: &Caller,
    tenant: Option<&str>,
    kind: Kind,
    target: &str,
    answer: Result<&[u8], &str>,
) -> Entry {
    let (output_sha256, output_len, outcome) = match answer {
        Ok(bytes) => (
            Some(sha256_hex(bytes)),
            Some(bytes.len() as u64),
            "succeeded".to_owned(),
        ),
        Err(code) => (None, None, format!("refused:{code}")),
    };
    Entry {
        kind,
        tenant: tenant.map(str::to_owned),
        chain: chain(caller, None),
        target: Some(target.to_owned()),
        output_sha256,
        output_len,
        outcome,
        ..Entry::default()
    }
}

/// The executor the tenant actors use, auditing each execution of a replicated call on this
/// node (its home) durably before the outcome is reported, so a recorded `Complete` always
/// has its audit line.
pub struct Audited {
    inner: std::sync::Arc<dyn gatehouse_actors::Executor>,
    registry: gatehouse_raft_store::SharedRegistry,
    audit: gatehouse_audit::AuditLog,
}

impl std::fmt::Debug for Audited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audited").finish_non_exhaustive()
    }
}

impl Audited {
    pub fn new(
        inner: std::sync::Arc<dyn gatehouse_actors::Executor>,
        registry: gatehouse_raft_store::SharedRegistry,
        audit: gatehouse_audit::AuditLog,
    ) -> Self {
        Audited {
            inner,
            registry,
            audit,
        }
    }
}

impl gatehouse_actors::Executor for Audited {
    fn execute(
        &self,
        execution: gatehouse_actors::Execution,
    ) -> futures::future::BoxFuture<
        'static,
        Result<gatehouse_actors::ToolOutput, gatehouse_actors::ExecError>,
    > {
        use futures::FutureExt;
        let mut entry = {
            let registry = self
                .registry
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let call = registry.call(&execution.call_id);
            Entry {
                kind: Kind::ToolCall,
                tenant: Some(execution.tenant.clone()),
                chain: call.map_or_else(Vec::new, |c| {
                    let chain = &c.spec.chain;
                    chain_of(
                        chain.end_user.as_deref(),
                        &chain.agent,
                        chain.a2a_peer.as_deref(),
                    )
                }),
                target: Some(execution.tool.clone()),
                mode: call.map(|c| c.spec.effective_mode.as_str().to_owned()),
                decision: Some("execute".to_owned()),
                call_id: Some(execution.call_id.to_string()),
                args_sha256: call.map(|c| c.spec.args_sha256.clone()),
                trace_id: Some(super::trace_id(
                    &execution.call_id,
                    execution.trace_parent.as_deref(),
                )),
                ..Entry::default()
            }
        };
        let run = self.inner.execute(execution);
        let audit = self.audit.clone();
        async move {
            let result = run.await;
            match &result {
                Ok(output) => {
                    entry.output_sha256 = Some(sha256_hex(output.result_json.as_bytes()));
                    entry.output_len = Some(output.result_json.len() as u64);
                    entry.outcome = if output.is_error {
                        "failed"
                    } else {
                        "succeeded"
                    }
                    .into();
                }
                Err(_) => entry.outcome = "failed".into(),
            }
            if let Err(e) = audit.record_durable(entry).await {
                tracing::error!(error = %e, "an execution could not be audited");
            }
            result
        }
        .boxed()
    }
}
