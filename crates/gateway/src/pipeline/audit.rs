//! The audit entries the node writes, and the rule for writing them: a record of what is about
//! to happen is accepted before it happens (`write_ahead`), so a node that cannot write its
//! audit log does nothing it would have to record. Bodies are hashed here and never reach the
//! log.
//!
//! One per tool call (run, proposed or refused), one per context pull, an execution-start and
//! an outcome per upstream request, and a `requested` record plus its outcome for every change
//! to a call or a principal's tool list the node proposes.

use super::{CallInput, Envelope, GatewayError};
use crate::auth::Caller;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use gatehouse_audit::{AuditLog, Entry, Kind};
use gatehouse_cluster::cluster::{Cluster, WriteError};
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::canonical::{canonical_json, sha256_hex};
use gatehouse_registry::{Call, CallId, Command, NewCall, Response};
use std::future::Future;
use std::io;

/// The outcome of a record written before its action.
pub const REQUESTED: &str = "requested";
/// The outcome of an execution-start record: the upstream request is about to be made.
pub const STARTED: &str = "started";

/// Writes `intent` durably, then runs `act`, then durably writes what `after` makes of the
/// result (given the intent to amend). Nothing is acted on unless the intent is on disk: an
/// error here before `act` means it never ran. An error after it means it ran and its outcome
/// is not recorded; the intent record and the act's own evidence (the Raft log) remain.
pub async fn write_ahead<T, E>(
    log: &AuditLog,
    intent: Entry,
    act: impl Future<Output = Result<T, E>>,
    after: impl FnOnce(&Result<T, E>, Entry) -> Entry,
) -> Result<Result<T, E>, io::Error> {
    log.record_durable(intent.clone()).await?;
    let result = act.await;
    log.record_durable(after(&result, intent)).await?;
    Ok(result)
}

/// `write_ahead` for a command proposed through the cluster: the outcome record says what
/// `done` makes of the applied command, or `refused:<why>`.
pub async fn propose_written_ahead(
    log: &AuditLog,
    cluster: &Cluster,
    intent: Entry,
    command: Command,
    done: impl FnOnce() -> String,
) -> Result<Result<(Response, u64), WriteError>, io::Error> {
    write_ahead(
        log,
        intent,
        cluster.propose(command),
        |written, mut entry| {
            entry.outcome = match written {
                Ok(_) => done(),
                Err(e) => format!("refused:{e}"),
            };
            entry
        },
    )
    .await
}

/// How a call stands in this node's registry now, for an outcome record.
pub fn call_state_now(registry: &SharedRegistry, call_id: &CallId) -> String {
    registry
        .read()
        .call(call_id)
        .map_or_else(|| "gone".to_owned(), |c| c.state.to_string())
}

/// What a caller is told when the audit log refused a record: the action did not happen (or,
/// after it, its outcome is not recorded).
pub fn unavailable(e: &io::Error) -> GatewayError {
    GatewayError::new(
        super::ErrorCode::Unavailable,
        format!("the audit log could not be written: {e}"),
        "nothing is done without its audit record; try another node, and tell its operator",
    )
}

/// The message of an audit refusal, for fronts that answer with their own error types.
pub fn refusal_message(e: &io::Error) -> String {
    unavailable(e).message
}

/// The principal chain, outermost first: the end user, the agent, the A2A peer.
pub fn chain_of(end_user: Option<&str>, agent: &str, a2a_peer: Option<&str>) -> Vec<String> {
    let mut chain = Vec::with_capacity(3);
    if let Some(user) = end_user {
        chain.push(["user:", user].concat());
    }
    chain.push(["agent:", agent].concat());
    if let Some(peer) = a2a_peer {
        chain.push(["peer:", peer].concat());
    }
    chain
}

pub fn chain(caller: &Caller, a2a_peer: Option<&str>) -> Vec<String> {
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
        ..Entry::default()
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

/// A decision on a call's record, before it is taken (outcome `requested`): an approver's, a
/// canceller's, or the home's own (expire, mark unknown). `chain` is who decides.
pub fn call_decision(call: &Call, chain: Vec<String>, decision: &str) -> Entry {
    Entry {
        kind: Kind::Approval,
        tenant: Some(call.spec.tenant.clone()),
        chain,
        target: Some(call.spec.tool.clone()),
        mode: Some(call.spec.effective_mode.as_str().to_owned()),
        decision: Some(decision.to_owned()),
        call_id: Some(call.spec.id.to_string()),
        args_sha256: Some(call.spec.args_sha256.clone()),
        outcome: REQUESTED.to_owned(),
        trace_id: Some(super::trace_id(
            &call.spec.id,
            call.spec.trace_parent.as_deref(),
        )),
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

/// A replicated call about to be proposed.
pub fn proposal_entry(caller: &Caller, input: &CallInput, call: &NewCall) -> Entry {
    Entry {
        kind: Kind::ToolCall,
        tenant: Some(call.tenant.clone()),
        chain: chain(caller, input.a2a_peer.as_deref()),
        target: Some(call.tool.clone()),
        mode: Some(call.effective_mode.as_str().to_owned()),
        decision: Some(call.policy_decision_id.clone()),
        call_id: Some(call.id.to_string()),
        args_sha256: Some(call.args_sha256.clone()),
        outcome: REQUESTED.to_owned(),
        trace_id: Some(super::trace_id(&call.id, call.trace_parent.as_deref())),
        ..Entry::default()
    }
}

/// A principal widening its own tool list by a toolset, before and after.
pub fn toolset_entry(caller: &Caller, tenant: &str, toolset: &str, write_tools: bool) -> Entry {
    Entry {
        kind: Kind::ToolsetLoad,
        tenant: Some(tenant.to_owned()),
        chain: chain(caller, None),
        target: Some(toolset.to_owned()),
        decision: Some(
            if write_tools {
                "load_toolset:include_write_tools"
            } else {
                "load_toolset"
            }
            .to_owned(),
        ),
        outcome: REQUESTED.to_owned(),
        ..Entry::default()
    }
}

/// The upstream request of an execution, about to be made: the call, the claim it runs under
/// (none for a call run at once), its argument hash and who it is for. `spec` is the call as
/// proposed, when this node has it.
pub fn execution_entry(execution: &Execution, spec: Option<&NewCall>) -> Entry {
    let trace_id = super::trace_id(&execution.call_id, execution.trace_parent.as_deref());
    execution_entry_in(execution, spec, trace_id)
}

/// [`execution_entry`] with the call's trace id (see [`super::trace_id`]) already in hand: a
/// call run at once gives the same to its envelope, and reading it again from the call's
/// `traceparent` cost a parse and a hex encoding on every call.
pub fn execution_entry_in(
    execution: &Execution,
    spec: Option<&NewCall>,
    trace_id: String,
) -> Entry {
    Entry {
        kind: Kind::ToolCall,
        tenant: Some(execution.tenant.clone()),
        chain: spec.map_or_else(Vec::new, |c| {
            chain_of(
                c.chain.end_user.as_deref(),
                &c.chain.agent,
                c.chain.a2a_peer.as_deref(),
            )
        }),
        target: Some(execution.tool.clone()),
        mode: spec.map(|c| c.effective_mode.as_str().to_owned()),
        decision: Some("execute".to_owned()),
        call_id: Some(execution.call_id.to_string()),
        claim_id: execution.claim_id.clone(),
        args_sha256: Some(spec.map_or_else(
            || sha256_hex(execution.arguments.as_bytes()),
            |c| c.args_sha256.clone(),
        )),
        outcome: STARTED.to_owned(),
        trace_id: Some(trace_id),
        ..Entry::default()
    }
}

/// The execution-start record amended with what the upstream answered.
pub fn execution_outcome(mut entry: Entry, result: &Result<ToolOutput, ExecError>) -> Entry {
    match result {
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
    entry
}
