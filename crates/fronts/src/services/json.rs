//! A call's record as JSON: the one shape that the command line's `-o json`, the HTTP approvals
//! API and the notifications print. Enum values read as the registry's files spell them
//! (`outcome_unknown`, `local_write`); arguments and results that are JSON are embedded as JSON.

use gatehouse_proto::v1 as pb;
use serde_json::{Value, json};

/// `CALL_STATE_OUTCOME_UNKNOWN` as `outcome_unknown`.
pub fn state_name(state: i32) -> String {
    pb::CallState::try_from(state).map_or("?".into(), |s| {
        s.as_str_name()
            .trim_start_matches("CALL_STATE_")
            .to_lowercase()
    })
}

/// `APPROVAL_MODE_LOCAL_WRITE` as `local_write`.
pub fn mode_name(mode: i32) -> String {
    pb::ApprovalMode::try_from(mode).map_or("?".into(), |m| {
        m.as_str_name()
            .trim_start_matches("APPROVAL_MODE_")
            .to_lowercase()
    })
}

/// `CHANGE_KIND_ADDED` as `added`.
pub fn kind_name(kind: i32) -> &'static str {
    match pb::ChangeKind::try_from(kind) {
        Ok(pb::ChangeKind::Added) => "added",
        Ok(pb::ChangeKind::Changed) => "changed",
        Ok(pb::ChangeKind::Removed) => "removed",
        Ok(pb::ChangeKind::Unspecified) | Err(_) => "?",
    }
}

pub fn action_json(a: &pb::ApprovalAction) -> Value {
    json!({"principal": a.principal, "person": a.person, "at_unix_ms": a.at_unix_ms, "reason": a.reason})
}

/// Text that holds JSON as that JSON; anything else as a string.
pub fn embedded(text: &str) -> Value {
    serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

pub fn record_json(call: &pb::CallRecord) -> Value {
    json!({
        "call_id": call.call_id,
        "tenant": call.tenant,
        "tool": call.tool,
        "args": embedded(&call.args_json),
        "args_sha256": call.args_sha256,
        "principals": call.principals.as_ref().map(|p| json!({"end_user": p.end_user, "agent": p.agent, "a2a_peer": p.a2a_peer})),
        "requested_mode": mode_name(call.requested_mode),
        "effective_mode": mode_name(call.effective_mode),
        "highest_mode": mode_name(call.highest_mode),
        "policy_decision_id": call.policy_decision_id,
        "tool_generation": call.tool_generation,
        "policy_generation": call.policy_generation,
        "idempotency_key": call.idempotency_key,
        "required_approvals": call.required_approvals,
        "approvals": call.approvals.iter().map(action_json).collect::<Vec<_>>(),
        "rejections": call.rejections.iter().map(action_json).collect::<Vec<_>>(),
        "proposed_at_unix_ms": call.proposed_at_unix_ms,
        "expires_at_unix_ms": call.expires_at_unix_ms,
        "approval_valid_until_unix_ms": call.approval_valid_until_unix_ms,
        "state": state_name(call.state),
        "claim": call.claim.as_ref().map(|c| json!({"claim_id": c.claim_id, "node_id": c.node_id, "epoch": c.epoch})),
        "cancellation": call.cancellation.as_ref().map(action_json),
        "resolution": call.resolution.as_ref().map(action_json),
        "result": call.result_json.as_deref().map(embedded),
        "error": call.error,
    })
}

/// A watch event: a change with the call's record, or a resync marker.
pub fn event_json(event: &pb::ApprovalEvent) -> Value {
    use pb::approval_event::Event;
    match &event.event {
        Some(Event::Change(change)) => {
            let call = change.call.clone().unwrap_or_default();
            json!({"index": event.index, "kind": kind_name(change.kind), "call": record_json(&call)})
        }
        Some(Event::Resync(r)) => json!({"index": event.index, "resync": {"calls": r.calls}}),
        None => json!({"index": event.index}),
    }
}
