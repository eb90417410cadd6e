//! What a notice says and how it is signed: pure functions of the call's record, so what a
//! receiver gets depends on the record and never on which node sent it.

use gatehouse_registry::call::{Call, CallId, CallState, Timestamp, Verdict};
use gatehouse_registry::notify::NotifyEvent;
use gatehouse_registry::resource::WebhookFormat;
use gatehouse_registry::time::rfc3339;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// The header carrying `v1=` and the hex HMAC-SHA256 of `{timestamp}.{body}`.
pub const SIGNATURE_HEADER: &str = "gatehouse-signature";
/// The header carrying the signing time, in seconds since the Unix epoch.
pub const TIMESTAMP_HEADER: &str = "gatehouse-timestamp";
/// The header carrying the notice's id: the same on every retry and from every node, so a
/// receiver drops repeats by it.
pub const EVENT_ID_HEADER: &str = "gatehouse-event-id";
/// The header carrying the event's name.
pub const EVENT_HEADER: &str = "gatehouse-event";

/// One moment of a call to announce.
#[derive(Debug, Clone)]
pub struct Notice {
    pub call: Call,
    pub event: NotifyEvent,
    /// When the moment came (ms).
    pub at: Timestamp,
}

impl Notice {
    /// Stable across retries and nodes: `<call id>.<event>`.
    pub fn id(&self) -> String {
        event_id(self.call.id(), self.event)
    }
}

pub fn event_id(call: &CallId, event: NotifyEvent) -> String {
    format!("{call}.{event}")
}

/// `v1=<hex HMAC-SHA256(secret, "{timestamp}.{body}")>`: the receiver recomputes it with the
/// same secret, compares in constant time and refuses a timestamp far from its clock.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any size");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Where the console shows the call: `{base}/console#call=<id>`.
pub fn console_link(base: &str, call: &CallId) -> String {
    format!("{}/console#call={call}", base.trim_end_matches('/'))
}

/// The body in the webhook's format.
pub fn body(format: WebhookFormat, webhook: &str, notice: &Notice, link: &str) -> Value {
    match format {
        WebhookFormat::Json => json_body(webhook, notice, link),
        WebhookFormat::Slack => slack_body(notice, link),
    }
}

fn verdict_json(v: &Verdict) -> Value {
    json!({"principal": v.principal, "person": v.person(), "at": rfc3339(v.at), "reason": v.note})
}

/// Gatehouse's own shape. Arguments are never sent, only their digest: a webhook's receiver is
/// often a chat channel with a wider audience than the tenant's approvers.
fn json_body(webhook: &str, notice: &Notice, link: &str) -> Value {
    let call = &notice.call;
    let spec = &call.spec;
    json!({
        "event": notice.event,
        "event_id": notice.id(),
        "webhook": webhook,
        "at": rfc3339(notice.at),
        "tenant": spec.tenant,
        "call": {
            "id": spec.id,
            "tool": spec.tool,
            "mode": spec.effective_mode,
            "state": call.state,
            "args_sha256": spec.args_sha256,
            "proposed_by": {
                "agent": spec.chain.agent,
                "end_user": spec.chain.end_user,
                "a2a_peer": spec.chain.a2a_peer,
            },
            "approvals": {"given": call.approvals.len(), "required": spec.required_approvals},
            "approved_by": call.approvals.iter().map(verdict_json).collect::<Vec<_>>(),
            "rejected_by": call.rejections.iter().map(verdict_json).collect::<Vec<_>>(),
            "proposed_at": rfc3339(call.created_at),
            "expires_at": rfc3339(spec.expires_at),
        },
        "console_url": link,
    })
}

/// Text a Slack message shows as it is: `&`, `<` and `>` escaped, so that a name or a reason
/// cannot ping a channel (`<!channel>`) or make a link.
pub fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Slack incoming-webhook message: `text` for notifications and clients without blocks, and
/// the same as one `mrkdwn` section.
fn slack_body(notice: &Notice, link: &str) -> Value {
    let call = &notice.call;
    let spec = &call.spec;
    let headline = match notice.event {
        NotifyEvent::Waiting => "Approval needed".to_owned(),
        NotifyEvent::Decided => match call.rejections.first() {
            Some(by) => format!("Rejected by {}: {}", by.person(), by.note),
            None => {
                let people: Vec<&str> = call.approvals.iter().map(Verdict::person).collect();
                format!("Approved by {}", people.join(", "))
            }
        },
        NotifyEvent::Expired => "Expired before it ran".to_owned(),
        NotifyEvent::OutcomeUnknown => {
            "Outcome unknown: the node running it was lost; an approver must resolve it".to_owned()
        }
    };
    let on_behalf = match (&spec.chain.end_user, &spec.chain.a2a_peer) {
        (Some(user), Some(peer)) => format!("for {user} via {} (peer {peer})", spec.chain.agent),
        (Some(user), None) => format!("for {user} via {}", spec.chain.agent),
        (None, Some(peer)) => format!("by {} (peer {peer})", spec.chain.agent),
        (None, None) => format!("by {}", spec.chain.agent),
    };
    let status = match call.state {
        CallState::Pending => format!(
            "{} of {} approvals, expires {}",
            call.approvals.len(),
            spec.required_approvals,
            rfc3339(spec.expires_at)
        ),
        state => format!("now {state}"),
    };
    let text = format!(
        "*{}* · {} · {} ({}) {} · {}\n<{}|Open in the Gatehouse console> · {}",
        slack_escape(&headline),
        slack_escape(&spec.tenant),
        slack_escape(&spec.tool),
        spec.effective_mode,
        slack_escape(&on_behalf),
        slack_escape(&status),
        slack_escape(link),
        slack_escape(&spec.id.0),
    );
    json!({
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    })
}

#[cfg(test)]
mod tests;
