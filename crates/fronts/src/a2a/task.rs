//! A2A tasks as the gateway keeps them: what a peer's message asks for (one tool and its
//! arguments, as a data part), and a call's envelope as an A2A `Task`.
//!
//! States follow the call's record: pending approval is `TASK_STATE_AUTH_REQUIRED`; approved and
//! executing are `TASK_STATE_WORKING`; then completed (the tool's result as the `result`
//! artifact), failed (the tool's error, an upstream failure, or an expiry), rejected (by an
//! approver, or by policy before anything was recorded) or canceled. A call whose outcome is
//! unknown waits for an approver to resolve it, so it reads `TASK_STATE_AUTH_REQUIRED` too.

use a2a::{
    Artifact, Message, Part, PartContent, Role, Task, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use chrono::{DateTime, Utc};
use gatehouse_gateway::executor::a2a::{DATA_ARGUMENTS, DATA_TOOL};
use gatehouse_gateway::pipeline::{Envelope, GatewayError};
use gatehouse_registry::CallState;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

const META_PREFIX: &str = "dev.gatehouse/";

/// What one message asks the gateway to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub tool: String,
    pub arguments: Value,
}

/// The shape every refusal of a message's content names.
const EXPECTED: &str = "a Gatehouse task is one data part {\"tool\": \"upstream.tool\", \
                        \"arguments\": {...}} naming a tool the tenant lets you call (the extended \
                        agent card lists them)";

/// Reads the task a message asks for: its one data part naming a tool. A message of text only,
/// or with a data part of another shape, is refused with the shape that is expected.
pub fn request_of(message: &Message) -> Result<Request, GatewayError> {
    let data: Vec<&Value> = message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Data(value) => Some(value),
            _ => None,
        })
        .collect();
    let value = match data.as_slice() {
        [one] => *one,
        [] => {
            return Err(GatewayError::invalid_request(format!(
                "the message has no data part: {EXPECTED}"
            )));
        }
        _ => {
            return Err(GatewayError::invalid_request(format!(
                "the message has {} data parts: {EXPECTED}",
                data.len()
            )));
        }
    };
    let tool = value
        .get(DATA_TOOL)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            GatewayError::invalid_request(format!("the data part names no \"tool\": {EXPECTED}"))
        })?;
    let arguments = match value.get(DATA_ARGUMENTS) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => {
            return Err(GatewayError::invalid_request(format!(
                "the data part's \"arguments\" must be a JSON object: {EXPECTED}"
            )));
        }
    };
    Ok(Request {
        tool: tool.to_owned(),
        arguments,
    })
}

/// The A2A state of a call in `state`.
pub fn state_of(state: CallState) -> TaskState {
    match state {
        CallState::Pending | CallState::OutcomeUnknown => TaskState::AuthRequired,
        CallState::Approved | CallState::Executing => TaskState::Working,
        CallState::Succeeded => TaskState::Completed,
        CallState::Failed | CallState::Expired => TaskState::Failed,
        CallState::Rejected => TaskState::Rejected,
        CallState::Cancelled => TaskState::Canceled,
    }
}

/// The task a call's envelope stands for.
pub fn task_of(envelope: &Envelope) -> Task {
    let context_id = context_of(envelope);
    let state = state_of(envelope.state);
    let artifacts = match (&envelope.result_json, state.clone()) {
        (Some(result), TaskState::Completed) => Some(vec![Artifact {
            artifact_id: format!("{}-result", envelope.call_id),
            name: Some("result".to_owned()),
            description: Some(format!("what {} answered", envelope.tool)),
            parts: vec![result_part(result)],
            metadata: None,
            extensions: None,
        }]),
        _ => None,
    };
    Task {
        id: envelope.call_id.clone(),
        context_id: context_id.clone(),
        status: status_of(envelope, state, &context_id),
        artifacts,
        history: None,
        metadata: Some(metadata_of(envelope)),
    }
}

/// The status update a task's subscribers get when its call changes.
pub fn status_event(envelope: &Envelope) -> TaskStatusUpdateEvent {
    let task = task_of(envelope);
    TaskStatusUpdateEvent {
        task_id: task.id,
        context_id: task.context_id,
        status: task.status,
        metadata: task.metadata,
    }
}

/// A task refused before anything was recorded (policy, arguments, budget): it ends `rejected`
/// at once with the reason. Nothing is kept of it but the audit record, so `GetTask` does not
/// find it later.
pub fn refused_task(error: &GatewayError, message: &Message) -> Task {
    let id = a2a::new_task_id();
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(a2a::new_context_id);
    let mut metadata = HashMap::new();
    metadata.insert(meta("error-code"), json!(error.code.as_str()));
    metadata.insert(meta("retryable"), json!(error.retryable));
    if let Some(after) = error.retry_after {
        metadata.insert(meta("retry-after-ms"), json!(after.as_millis().to_string()));
    }
    Task {
        id: id.clone(),
        context_id: context_id.clone(),
        status: TaskStatus {
            state: TaskState::Rejected,
            message: Some(agent_message(
                &id,
                &context_id,
                vec![Part::text(format!("{} ({})", error.message, error.hint))],
            )),
            timestamp: Some(Utc::now()),
        },
        artifacts: None,
        history: None,
        metadata: Some(metadata),
    }
}

fn context_of(envelope: &Envelope) -> String {
    envelope
        .context_id
        .clone()
        .unwrap_or_else(|| envelope.call_id.clone())
}

fn status_of(envelope: &Envelope, state: TaskState, context_id: &str) -> TaskStatus {
    let id = &envelope.call_id;
    let parts: Vec<Part> = match envelope.state {
        CallState::Pending => vec![Part::text(format!(
            "waiting for the approval of the tenant's approvers{}; approvers act on call {id} \
             over the gateway's ApprovalService",
            until(envelope.expires_at_ms)
        ))],
        CallState::OutcomeUnknown => {
            vec![Part::text(envelope.error.clone().unwrap_or_else(|| {
                "the call's outcome is unknown".to_owned()
            }))]
        }
        CallState::Approved => vec![Part::text(format!(
            "approved; waiting for the tenant's home node to run it{}",
            until(envelope.expires_at_ms)
        ))],
        CallState::Executing => vec![Part::text(format!("running {}", envelope.tool))],
        CallState::Succeeded => return bare_status(state, envelope),
        CallState::Failed | CallState::Expired | CallState::Rejected | CallState::Cancelled => {
            let mut parts = vec![Part::text(
                envelope
                    .error
                    .clone()
                    .unwrap_or_else(|| envelope.state.to_string()),
            )];
            // A tool that reported an error said why in its result.
            if let Some(result) = &envelope.result_json {
                parts.push(result_part(result));
            }
            parts
        }
    };
    TaskStatus {
        state,
        message: Some(agent_message(id, context_id, parts)),
        timestamp: Some(timestamp(envelope)),
    }
}

fn bare_status(state: TaskState, envelope: &Envelope) -> TaskStatus {
    TaskStatus {
        state,
        message: None,
        timestamp: Some(timestamp(envelope)),
    }
}

fn until(expires_at_ms: Option<u64>) -> String {
    expires_at_ms
        .map(|ms| format!(" until {}", crate::time::rfc3339(ms)))
        .unwrap_or_default()
}

/// The record's own time, so that every node gives the same; now, for a call with no record.
fn timestamp(envelope: &Envelope) -> DateTime<Utc> {
    envelope
        .updated_at_ms
        .and_then(|ms| DateTime::from_timestamp_millis(i64::try_from(ms).ok()?))
        .unwrap_or_else(Utc::now)
}

fn agent_message(task_id: &str, context_id: &str, parts: Vec<Part>) -> Message {
    Message {
        message_id: format!("{task_id}-status"),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// A tool's result: JSON as a data part, anything else as text.
fn result_part(result: &str) -> Part {
    match serde_json::from_str::<Value>(result) {
        Ok(value) => Part::data(value).with_media_type("application/json"),
        Err(_) => Part::text(result),
    }
}

fn meta(key: &str) -> String {
    format!("{META_PREFIX}{key}")
}

/// The call's envelope, as the task's metadata (strings, so every binding carries them alike).
fn metadata_of(envelope: &Envelope) -> HashMap<String, Value> {
    let mut metadata = HashMap::from([
        (meta("call-id"), json!(envelope.call_id)),
        (meta("tenant"), json!(envelope.tenant)),
        (meta("tool"), json!(envelope.tool)),
        (
            meta("effective-mode"),
            json!(envelope.effective_mode.as_str()),
        ),
        (
            meta("policy-decision-id"),
            json!(envelope.policy_decision_id),
        ),
        (meta("trace-id"), json!(envelope.trace_id)),
        (meta("call-state"), json!(envelope.state.as_str())),
        (meta("args-sha256"), json!(envelope.args_sha256)),
    ]);
    if let Some(expires) = envelope.expires_at_ms {
        metadata.insert(meta("expires-at"), json!(crate::time::rfc3339(expires)));
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_registry::ApprovalMode;

    fn message(parts: Vec<Part>) -> Message {
        Message::new(Role::User, parts)
    }

    fn envelope(state: CallState) -> Envelope {
        Envelope {
            call_id: "call_1".into(),
            tenant: "acme".into(),
            tool: "demo.echo".into(),
            effective_mode: ApprovalMode::Destructive,
            policy_decision_id: "pd_1".into(),
            trace_id: "t".into(),
            state,
            result_json: None,
            fresh_result: false,
            is_error: false,
            error: None,
            expires_at_ms: None,
            args_sha256: "00".into(),
            context_id: Some("ctx".into()),
            updated_at_ms: Some(1_700_000_000_000),
        }
    }

    #[test]
    fn a_data_part_names_the_tool_and_its_arguments() {
        let asked = request_of(&message(vec![
            Part::text("please"),
            Part::data(json!({"tool": "demo.echo", "arguments": {"text": "hi"}})),
        ]))
        .unwrap();
        assert_eq!(asked.tool, "demo.echo");
        assert_eq!(asked.arguments, json!({"text": "hi"}));
        let no_args = request_of(&message(vec![Part::data(json!({"tool": "demo.echo"}))]));
        assert_eq!(no_args.unwrap().arguments, json!({}));
    }

    #[test]
    fn text_only_and_misshapen_messages_are_refused_with_the_expected_shape() {
        for parts in [
            vec![Part::text("transfer 100 EUR to bob")],
            vec![Part::data(json!({"arguments": {}}))],
            vec![Part::data(json!({"tool": "demo.echo", "arguments": [1]}))],
            vec![
                Part::data(json!({"tool": "a.b"})),
                Part::data(json!({"tool": "c.d"})),
            ],
        ] {
            let e = request_of(&message(parts)).unwrap_err();
            assert_eq!(
                e.code,
                gatehouse_gateway::pipeline::ErrorCode::InvalidRequest
            );
            assert!(e.message.contains("\"tool\": \"upstream.tool\""), "{e:?}");
        }
    }

    #[test]
    fn states_follow_the_call() {
        let expect = [
            (CallState::Pending, TaskState::AuthRequired),
            (CallState::Approved, TaskState::Working),
            (CallState::Executing, TaskState::Working),
            (CallState::Succeeded, TaskState::Completed),
            (CallState::Failed, TaskState::Failed),
            (CallState::Expired, TaskState::Failed),
            (CallState::Rejected, TaskState::Rejected),
            (CallState::Cancelled, TaskState::Canceled),
            (CallState::OutcomeUnknown, TaskState::AuthRequired),
        ];
        for (call, task) in expect {
            assert_eq!(task_of(&envelope(call)).status.state, task, "{call}");
        }
    }

    #[test]
    fn a_completed_task_carries_the_result_as_an_artifact_and_the_envelope_as_metadata() {
        let done = Envelope {
            result_json: Some(r#"{"echo":"hi"}"#.into()),
            ..envelope(CallState::Succeeded)
        };
        let task = task_of(&done);
        assert_eq!(task.id, "call_1");
        assert_eq!(task.context_id, "ctx");
        let artifacts = task.artifacts.unwrap();
        assert_eq!(artifacts.len(), 1);
        assert_eq!(
            artifacts[0].parts[0].content,
            PartContent::Data(json!({"echo": "hi"}))
        );
        let metadata = task.metadata.unwrap();
        assert_eq!(metadata["dev.gatehouse/call-id"], json!("call_1"));
        assert_eq!(
            metadata["dev.gatehouse/effective-mode"],
            json!("destructive")
        );
        assert_eq!(
            task.status.timestamp.unwrap().timestamp_millis(),
            1_700_000_000_000,
            "the record's time, the same on every node"
        );
    }

    #[test]
    fn a_rejected_task_says_who_rejected_it() {
        let rejected = Envelope {
            error: Some("rejected by carol: not today".into()),
            ..envelope(CallState::Rejected)
        };
        let status = task_of(&rejected).status;
        let text = status.message.unwrap().parts[0]
            .as_text()
            .unwrap()
            .to_owned();
        assert_eq!(text, "rejected by carol: not today");
    }
}
