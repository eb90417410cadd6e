//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) for calls that wait: the task id is
//! the call id, and the task's status is read from the call's replicated record, so any node
//! answers `tasks/get` and a task outlives the session and the node that made it.
//!
//! pending, approved, executing -> `working`; succeeded, or failed with the tool's own error
//! result -> `completed` (with that result); rejected, expired, outcome unknown, or failed
//! without a result -> `failed` (with a JSON-RPC error whose data is the structured error);
//! cancelled -> `cancelled`.

use super::Front;
use super::guard::Agent;
use super::render::{self, refused, rfc3339};
use gatehouse_cluster::cluster::now_ms;
use gatehouse_gateway::pipeline::{Envelope, ErrorCode, GatewayError};
use gatehouse_registry::CallState;
use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use serde_json::{Value, json};
use std::sync::Arc;

/// How often a client should poll `tasks/get`.
const POLL_INTERVAL_MS: u64 = 1_000;

/// The JSON-RPC code of a task that failed: a server error of the implementation-defined range.
const TASK_FAILED: i64 = -32000;

/// The task first answered for a call that waits.
pub fn seed(front: &Arc<Front>, envelope: &Envelope) -> Task {
    let mut task = base(front, envelope, TaskStatus::Working);
    task.status_message = Some(status_message(envelope));
    task
}

/// The task of a call as its record now stands.
pub fn detailed(front: &Arc<Front>, envelope: &Envelope) -> DetailedTask {
    let payload = match envelope.state {
        CallState::Pending | CallState::Approved | CallState::Executing => TaskPayload::Working,
        CallState::Cancelled => TaskPayload::Cancelled,
        CallState::Succeeded => TaskPayload::Completed {
            result: object(render::settled(envelope)),
        },
        CallState::Failed if envelope.result_json.is_some() => TaskPayload::Completed {
            result: object(render::settled(envelope)),
        },
        CallState::Failed
        | CallState::Rejected
        | CallState::Expired
        | CallState::OutcomeUnknown => {
            let error = envelope.as_error();
            let detail = render::settled(envelope).structured_content;
            let message = error.map_or_else(|| "the call failed".to_owned(), |e| e.message);
            TaskPayload::Failed {
                error: object(json!({"code": TASK_FAILED, "message": message, "data": detail})),
            }
        }
    };
    let mut task = base(front, envelope, payload.status());
    task.status_message = Some(status_message(envelope));
    DetailedTask::new(task, payload)
}

/// `tasks/cancel`: cancels the call if it has not run yet, through the pipeline's one
/// cancellation path (audited before it is proposed).
pub async fn cancel(front: &Arc<Front>, agent: &Agent, task_id: &str) -> Result<(), McpError> {
    let envelope = front
        .pipeline
        .status(&agent.caller, task_id)
        .await
        .map_err(refused)?;
    if envelope.state.is_finished() || envelope.state == CallState::OutcomeUnknown {
        return Err(refused(GatewayError::new(
            ErrorCode::Conflict,
            format!("task {task_id} is already {}", envelope.state.as_str()),
            "only a call still waiting for approval can be cancelled",
        )));
    }
    front
        .pipeline
        .cancel(
            &agent.caller,
            task_id,
            "cancelled by the agent (tasks/cancel)",
        )
        .await
        .map(|_| ())
        .map_err(refused)
}

/// A call's envelope as JSON (the `gatehouse://calls/{call_id}` resource).
pub fn envelope_json(envelope: &Envelope) -> Value {
    let result = envelope
        .result_json
        .as_deref()
        .map(|r| serde_json::from_str::<Value>(r).unwrap_or_else(|_| r.into()));
    json!({
        "call_id": envelope.call_id,
        "tenant": envelope.tenant,
        "tool": envelope.tool,
        "state": envelope.state.as_str(),
        "effective_mode": envelope.effective_mode,
        "policy_decision_id": envelope.policy_decision_id,
        "trace_id": envelope.trace_id,
        "args_sha256": envelope.args_sha256,
        "expires_at": envelope.expires_at_ms.map(rfc3339),
        "is_error": envelope.is_error,
        "error": envelope.error,
        "result": result,
    })
}

fn base(front: &Arc<Front>, envelope: &Envelope, status: TaskStatus) -> Task {
    let (created, updated) = {
        front
            .pipeline
            .call_times(&envelope.call_id)
            .unwrap_or_else(|| (now_ms(), now_ms()))
    };
    let mut task = Task::new(
        envelope.call_id.clone(),
        status,
        rfc3339(created),
        rfc3339(updated),
    )
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    // A waiting call lives until its deadline; the task with it.
    if let Some(expires) = envelope.expires_at_ms {
        task = task.with_ttl_ms(expires.saturating_sub(created));
    }
    task
}

fn status_message(envelope: &Envelope) -> String {
    match envelope.state {
        CallState::Pending => format!(
            "waiting for approval{}",
            envelope
                .expires_at_ms
                .map(|at| format!(" until {}", rfc3339(at)))
                .unwrap_or_default()
        ),
        CallState::Approved => "approved, about to run".to_owned(),
        CallState::Executing => "running".to_owned(),
        other => other.as_str().to_owned(),
    }
}

fn object(value: impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}
