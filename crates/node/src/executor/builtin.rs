//! Tools the gateway itself provides, for dev mode and tests: `echo` answers with its arguments,
//! `sleep` (`{"ms": N}`) answers after N milliseconds, `fail` answers with an error result.

use super::tool_result;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use serde_json::Value;
use std::time::Duration;

/// The longest a `sleep` may ask for: long enough for any test, short enough that a typo cannot
/// park an execution for days.
const MAX_SLEEP: Duration = Duration::from_secs(600);

pub(super) async fn run(tool: String, execution: Execution) -> Result<ToolOutput, ExecError> {
    let arguments: Value = serde_json::from_str(&execution.arguments).map_err(|e| ExecError {
        message: format!("the arguments are not JSON: {e}"),
    })?;
    match tool.as_str() {
        "echo" => Ok(tool_result(execution.arguments, Some(arguments), false)),
        "sleep" => {
            let Some(ms) = arguments.get("ms").and_then(Value::as_u64) else {
                return Ok(tool_result(
                    "sleep needs {\"ms\": N}, N a whole number of milliseconds".into(),
                    None,
                    true,
                ));
            };
            let slept = Duration::from_millis(ms).min(MAX_SLEEP);
            tokio::time::sleep(slept).await;
            let answer = serde_json::json!({"slept_ms": slept.as_millis() as u64});
            Ok(tool_result(answer.to_string(), Some(answer), false))
        }
        "fail" => {
            let message = arguments
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the fail tool failed, as asked");
            Ok(tool_result(message.to_owned(), None, true))
        }
        other => Err(ExecError {
            message: format!(
                "{} has no tool {other}: built-in upstreams offer echo, sleep and fail",
                execution.tool.split_once('.').map_or("", |(u, _)| u)
            ),
        }),
    }
}
