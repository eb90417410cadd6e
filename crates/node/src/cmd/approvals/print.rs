//! How `gatehouse approvals` shows calls and events: one line each in text, or JSON in the shape
//! `gatehouse_fronts::services::json` gives every client.

use crate::cmd::{Output, when};
use gatehouse_fronts::services::json::{event_json, kind_name, record_json};
use gatehouse_proto::v1 as pb;
use serde_json::json;

pub(super) use gatehouse_fronts::services::json::{mode_name, state_name};

/// A stream prints one line per event under `json` and `jsonl` alike.
pub(super) fn print_event(output: Output, event: &pb::ApprovalEvent) {
    use pb::approval_event::Event;
    match (&event.event, output) {
        (Some(_), Output::Json | Output::Jsonl) => println!("{}", event_json(event)),
        (Some(Event::Change(change)), Output::Text) => {
            let call = change.call.clone().unwrap_or_default();
            println!(
                "{} {:<7} {}",
                event.index,
                kind_name(change.kind),
                summary(&call)
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

pub(super) fn decided(output: Output, call: &pb::CallRecord, log_index: u64) {
    match output {
        Output::Json | Output::Jsonl => {
            output.print_one(&json!({"log_index": log_index, "call": record_json(call)}))
        }
        Output::Text => println!("{}  (log index {log_index})", summary(call)),
    }
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
    text += &format!("proposed   {}\n", when(call.proposed_at_unix_ms as u64));
    if state_name(call.state) == "pending" {
        text += &format!("expires    {}\n", when(call.expires_at_unix_ms as u64));
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
            text += &format!(
                "  {verb} by {} {}: {}\n",
                who(a),
                when(a.at_unix_ms as u64),
                a.reason
            );
        }
    }
    for (what, action) in [
        ("cancelled", &call.cancellation),
        ("resolved", &call.resolution),
    ] {
        if let Some(a) = action {
            text += &format!("{what} by {}: {}\n", a.principal, a.reason);
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
