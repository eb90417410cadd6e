//! How `gatehouse approvals` shows calls and events: one line each in text, or JSON.

use crate::cmd::Output;
use gatehouse_proto::v1 as pb;
use serde_json::{Value, json};

pub(super) fn print_event(output: Output, event: &pb::ApprovalEvent) {
    use pb::approval_event::Event;
    match (&event.event, output) {
        (Some(Event::Change(change)), Output::Json) => {
            let call = change.call.clone().unwrap_or_default();
            println!(
                "{}",
                json!({"index": event.index, "kind": kind_name(change.kind), "call": record_json(&call)})
            );
        }
        (Some(Event::Change(change)), Output::Text) => {
            let call = change.call.clone().unwrap_or_default();
            println!(
                "{} {:<7} {}",
                event.index,
                kind_name(change.kind),
                summary(&call)
            );
        }
        (Some(Event::Resync(r)), Output::Json) => {
            println!(
                "{}",
                json!({"index": event.index, "resync": {"calls": r.calls}})
            );
        }
        (Some(Event::Resync(r)), Output::Text) => {
            println!(
                "{} resync: the {} call(s) above are all that wait",
                event.index, r.calls
            );
        }
        (None, _) => {}
    }
}

pub(super) fn kind_name(kind: i32) -> &'static str {
    match pb::ChangeKind::try_from(kind) {
        Ok(pb::ChangeKind::Added) => "added",
        Ok(pb::ChangeKind::Changed) => "changed",
        Ok(pb::ChangeKind::Removed) => "removed",
        Ok(pb::ChangeKind::Unspecified) | Err(_) => "?",
    }
}

pub(super) fn decided(output: Output, call: &pb::CallRecord, log_index: u64) {
    match output {
        Output::Json => println!(
            "{}",
            json!({"log_index": log_index, "call": record_json(call)})
        ),
        Output::Text => println!("{}  (log index {log_index})", summary(call)),
    }
}

/// `CALL_STATE_OUTCOME_UNKNOWN` as `outcome_unknown`.
pub(super) fn state_name(state: i32) -> String {
    pb::CallState::try_from(state).map_or("?".into(), |s| {
        s.as_str_name()
            .trim_start_matches("CALL_STATE_")
            .to_lowercase()
    })
}

pub(super) fn mode_name(mode: i32) -> String {
    pb::ApprovalMode::try_from(mode).map_or("?".into(), |m| {
        m.as_str_name()
            .trim_start_matches("APPROVAL_MODE_")
            .to_lowercase()
    })
}

/// One line: id, state, tool, mode, approvals, whose call.
pub(super) fn summary(call: &pb::CallRecord) -> String {
    let agent = call.principals.as_ref().map_or("", |p| p.agent.as_str());
    format!(
        "{}  {:<15} {}  {}  approvals {}/{}  by {agent}",
        call.call_id,
        state_name(call.state),
        call.tool,
        mode_name(call.effective_mode),
        call.approvals.len(),
        call.required_approvals
    )
}

pub(super) fn details(call: &pb::CallRecord) -> String {
    let mut text = format!(
        "call       {}\ntenant     {}\ntool       {}\nstate      {}\nmode       {} (highest {})\nargs       {}\nargs sha256 {}\n",
        call.call_id,
        call.tenant,
        call.tool,
        state_name(call.state),
        mode_name(call.effective_mode),
        mode_name(call.highest_mode),
        call.args_json,
        call.args_sha256,
    );
    if let Some(p) = &call.principals {
        text += &format!("agent      {}\n", p.agent);
        if let Some(user) = &p.end_user {
            text += &format!("end user   {user}\n");
        }
        if let Some(peer) = &p.a2a_peer {
            text += &format!("a2a peer   {peer}\n");
        }
    }
    text += &format!(
        "approvals  {} of {}\n",
        call.approvals.len(),
        call.required_approvals
    );
    for (verb, actions) in [
        ("approved", &call.approvals),
        ("rejected", &call.rejections),
    ] {
        for a in actions {
            text += &format!("  {verb} by {}: {}\n", who(a), a.note);
        }
    }
    for (what, action) in [
        ("cancelled", &call.cancellation),
        ("resolved", &call.resolution),
    ] {
        if let Some(a) = action {
            text += &format!("{what} by {}: {}\n", a.principal, a.note);
        }
    }
    if let Some(error) = &call.error {
        text += &format!("error      {error}\n");
    }
    text
}

/// The person who acted, and the principal they acted through when it has another name.
fn who(a: &pb::ApprovalAction) -> String {
    if a.person.is_empty() || a.person == a.principal {
        a.principal.clone()
    } else {
        format!("{} (as {})", a.person, a.principal)
    }
}

pub(super) fn action_json(a: &pb::ApprovalAction) -> Value {
    json!({"principal": a.principal, "person": a.person, "at_unix_ms": a.at_unix_ms, "note": a.note})
}

pub(super) fn record_json(call: &pb::CallRecord) -> Value {
    json!({
        "call_id": call.call_id,
        "tenant": call.tenant,
        "tool": call.tool,
        "args": serde_json::from_str::<Value>(&call.args_json).unwrap_or(Value::String(call.args_json.clone())),
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
        "result": call.result_json.as_deref().map(|r| serde_json::from_str::<Value>(r).unwrap_or(Value::String(r.to_owned()))),
        "error": call.error,
    })
}
