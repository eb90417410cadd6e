//! What an A2A agent answered, as a tool's output: pure, so every rule is tested without an
//! agent (the rules are in the parent module's doc).

use crate::executor::resilience::Attempt;
use crate::executor::tool_result;
use ::a2a::{Part, PartContent, Task, TaskState};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use gatehouse_actors::{ExecError, ToolOutput};
use serde_json::{Value, json};

/// What a final task comes to.
pub(super) fn outcome(name: &str, task: &Task) -> Attempt {
    let state = &task.status.state;
    if *state == TaskState::Completed {
        let mut parts: Vec<&Part> = task
            .artifacts
            .iter()
            .flatten()
            .flat_map(|a| &a.parts)
            .collect();
        // An agent that answers in its final status rather than in artifacts.
        if parts.is_empty() {
            parts = status_parts(task).collect();
        }
        return Attempt::answered(rendered_refs(&parts));
    }
    if *state == TaskState::Failed
        && let Some(result) = status_parts(task).find_map(tool_result_of)
        && result.get("isError") == Some(&Value::Bool(true))
    {
        return Attempt::answered(ToolOutput {
            result_json: result.to_string(),
            is_error: true,
        });
    }
    Attempt::answered_error(ExecError {
        message: format!(
            "the a2a upstream {name}'s task {} ended {}: {}",
            task.id,
            state_name(state),
            status_text(task).unwrap_or_else(|| "the agent gave no reason".to_owned())
        ),
    })
}

fn status_parts(task: &Task) -> impl Iterator<Item = &Part> {
    task.status.message.iter().flat_map(|m| &m.parts)
}

/// The texts of the task's status message, joined.
pub(super) fn status_text(task: &Task) -> Option<String> {
    let texts: Vec<&str> = status_parts(task).filter_map(Part::as_text).collect();
    (!texts.is_empty()).then(|| texts.join(" "))
}

/// `TASK_STATE_COMPLETED` and the like, as the protocol names them.
pub(super) fn state_name(state: &TaskState) -> String {
    match serde_json::to_value(state) {
        Ok(Value::String(name)) => name,
        _ => format!("{state:?}"),
    }
}

/// A part that is itself an MCP `CallToolResult`.
fn tool_result_of(part: &Part) -> Option<&Value> {
    match &part.content {
        PartContent::Data(value) if value.get("content").is_some_and(Value::is_array) => {
            Some(value)
        }
        _ => None,
    }
}

pub(super) fn rendered(parts: &[Part]) -> ToolOutput {
    rendered_refs(&parts.iter().collect::<Vec<_>>())
}

/// Parts as one tool result (see the module's doc).
fn rendered_refs(parts: &[&Part]) -> ToolOutput {
    if let [one] = parts
        && let Some(result) = tool_result_of(one)
    {
        return ToolOutput {
            result_json: result.to_string(),
            is_error: result.get("isError") == Some(&Value::Bool(true)),
        };
    }
    let mut values: Vec<Value> = parts.iter().map(|p| value_of(p)).collect();
    match values.as_mut_slice() {
        [Value::String(text)] => tool_result(std::mem::take(text), None, false),
        [one] => tool_result(one.to_string(), Some(one.take()), false),
        many if many.iter().all(Value::is_string) => {
            let texts: Vec<&str> = many.iter().filter_map(Value::as_str).collect();
            tool_result(texts.join("\n"), None, false)
        }
        _ => tool_result(Value::Array(values).to_string(), None, false),
    }
}

/// One part as JSON: a text as a string, data as itself, a file by its URL or its bytes.
fn value_of(part: &Part) -> Value {
    let file = |mut described: Value| {
        if let Some(media_type) = &part.media_type {
            described["mediaType"] = json!(media_type);
        }
        if let Some(filename) = &part.filename {
            described["filename"] = json!(filename);
        }
        described
    };
    match &part.content {
        PartContent::Text(text) => json!(text),
        PartContent::Data(value) => value.clone(),
        PartContent::Url(url) => file(json!({"url": url})),
        PartContent::Raw(bytes) => file(json!({"raw": STANDARD.encode(bytes)})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::a2a::{Artifact, Message, Role, TaskStatus};

    fn task(state: TaskState, artifacts: Vec<Part>, status: Vec<Part>) -> Task {
        Task {
            id: "task_1".into(),
            context_id: "ctx".into(),
            status: TaskStatus {
                state,
                message: (!status.is_empty()).then(|| Message::new(Role::Agent, status)),
                timestamp: None,
            },
            artifacts: (!artifacts.is_empty()).then(|| {
                vec![Artifact {
                    artifact_id: "a".into(),
                    name: Some("result".into()),
                    description: None,
                    parts: artifacts,
                    metadata: None,
                    extensions: None,
                }]
            }),
            history: None,
            metadata: None,
        }
    }

    fn answered(attempt: Attempt) -> ToolOutput {
        assert!(!attempt.transient && attempt.reached);
        attempt.outcome.expect("an answer")
    }

    #[test]
    fn a_gatehouse_peers_result_is_passed_on_as_it_is() {
        let result = json!({"content": [{"type": "text", "text": "hi"}], "isError": false});
        let done = task(
            TaskState::Completed,
            vec![Part::data(result.clone())],
            vec![],
        );
        let output = answered(outcome("partner", &done));
        assert_eq!(
            serde_json::from_str::<Value>(&output.result_json).unwrap(),
            result
        );
        assert!(!output.is_error);
    }

    #[test]
    fn another_agents_parts_become_one_result() {
        let text = task(TaskState::Completed, vec![Part::text("sunny")], vec![]);
        let output: Value =
            serde_json::from_str(&answered(outcome("w", &text)).result_json).unwrap();
        assert_eq!(output["content"][0]["text"], json!("sunny"));

        let mixed = task(
            TaskState::Completed,
            vec![Part::text("sunny"), Part::data(json!({"celsius": 21}))],
            vec![],
        );
        let output: Value =
            serde_json::from_str(&answered(outcome("w", &mixed)).result_json).unwrap();
        assert_eq!(
            output["content"][0]["text"],
            json!(r#"["sunny",{"celsius":21}]"#)
        );

        let data = rendered(&[Part::data(json!({"celsius": 21}))]);
        let output: Value = serde_json::from_str(&data.result_json).unwrap();
        assert_eq!(output["structuredContent"], json!({"celsius": 21}));
    }

    #[test]
    fn a_task_that_did_not_complete_is_an_error_naming_its_state_and_reason() {
        let rejected = task(
            TaskState::Rejected,
            vec![],
            vec![Part::text("tool demo.nope is not declared")],
        );
        let attempt = outcome("partner", &rejected);
        assert!(!attempt.transient);
        let message = attempt.outcome.unwrap_err().message;
        assert!(message.contains("task_1"), "{message}");
        assert!(message.contains("TASK_STATE_REJECTED"), "{message}");
        assert!(message.contains("demo.nope is not declared"), "{message}");

        // A tool's own error result comes back as the tool's error.
        let error = json!({"content": [{"type": "text", "text": "no"}], "isError": true});
        let failed = task(
            TaskState::Failed,
            vec![],
            vec![Part::text("the tool reported an error"), Part::data(error)],
        );
        assert!(answered(outcome("partner", &failed)).is_error);
    }
}
