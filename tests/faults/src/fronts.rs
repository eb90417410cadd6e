//! Proposing a call over the agents' own protocols, so the fronts are under fault too: MCP
//! (`tools/call` on `/mcp`, stateless, the idempotency key in `_meta`) and A2A (`SendMessage`
//! on `/a2a`, the message id naming the task). Each answer is read for the call id and for
//! whether the proposal certainly took no effect.

use crate::client::DEADLINE;
use crate::history::Outcome;
use crate::setup::{AGENT, TOOL};
use gatehouse_tests::mcp_wire::RawMcp;
use serde_json::{Value, json};

/// What a proposal over a front came to: its outcome and, when acknowledged, the call id.
pub type Proposed = (Outcome, Option<String>);

/// `tools/call` of the campaign tool with `arguments`, under `key`.
pub async fn mcp(http: &str, key: &str, arguments: Value) -> Proposed {
    let client = RawMcp::new(&format!("http://{http}/mcp"), Some(AGENT));
    let params = json!({
        "name": TOOL,
        "arguments": arguments,
        "_meta": {"dev.gatehouse/idempotency-key": key},
    });
    let answer = match tokio::time::timeout(DEADLINE, client.request("tools/call", params)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) | Err(_) => return (Outcome::Unknown, None),
    };
    let Some(result) = answer.message.get("result") else {
        // A JSON-RPC error or no answer at all: the request may have been taken.
        return (Outcome::Unknown, None);
    };
    let error = &result["structuredContent"]["error"];
    match error["code"].as_str() {
        Some("approval_pending") => (Outcome::Ok, error["call_id"].as_str().map(str::to_owned)),
        // Refused before anything was proposed: bad arguments, policy, a key conflict.
        Some(_) if error["retryable"] == false => (Outcome::Failed, None),
        _ => (Outcome::Unknown, None),
    }
}

/// `SendMessage` asking for the campaign tool with `arguments`; the message id is `message_id`,
/// and the gateway keys the task by it.
pub async fn a2a(http: &str, message_id: &str, arguments: Value) -> Proposed {
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"data": {"tool": TOOL, "arguments": arguments}}],
        }},
    });
    let sent = reqwest::Client::new()
        .post(format!("http://{http}/a2a"))
        .bearer_auth(AGENT)
        .header("A2A-Version", "1.0")
        .timeout(DEADLINE)
        .json(&body)
        .send()
        .await;
    let answer: Value = match sent {
        Ok(response) => match response.json().await {
            Ok(answer) => answer,
            Err(_) => return (Outcome::Unknown, None),
        },
        Err(_) => return (Outcome::Unknown, None),
    };
    let task = &answer["result"]["task"];
    match (task["id"].as_str(), task["status"]["state"].as_str()) {
        (Some(id), Some("TASK_STATE_AUTH_REQUIRED")) => (Outcome::Ok, Some(id.to_owned())),
        // A task refused at once was never proposed.
        (Some(_), Some("TASK_STATE_REJECTED" | "TASK_STATE_FAILED")) => (Outcome::Failed, None),
        _ => (Outcome::Unknown, None),
    }
}
