use super::Problem;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A moment of a call that a webhook may be told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyEvent {
    /// The call needs approval and started waiting for it.
    Waiting,
    /// Approvers decided: enough approvals, or a rejection.
    Decided,
    /// Nobody decided in time, or an approved call was not run in time.
    Expired,
    /// The node running the call was lost and nobody knows whether the upstream acted.
    OutcomeUnknown,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 4] = [
        NotifyEvent::Waiting,
        NotifyEvent::Decided,
        NotifyEvent::Expired,
        NotifyEvent::OutcomeUnknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Waiting => "waiting",
            NotifyEvent::Decided => "decided",
            NotifyEvent::Expired => "expired",
            NotifyEvent::OutcomeUnknown => "outcome_unknown",
        }
    }
}

impl fmt::Display for NotifyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a tenant's calls are announced: the tenant's home node POSTs a signed notice to `url`
/// when one of `events` happens to a call of the tenant. The signing secret is an operator's
/// credential granted to the tenant, named like an Upstream's: the registry holds only its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookSpec {
    pub url: String,
    /// The operator's credential whose value signs every notice (HMAC-SHA256).
    pub credential: String,
    /// What the webhook is told of; every event when absent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<NotifyEvent>,
    #[serde(default, skip_serializing_if = "WebhookFormat::is_default")]
    pub format: WebhookFormat,
    /// Where approvers open the console (`https://gate.example.com`): each notice links to the
    /// call there. Without it the link is the delivering node's own listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
}

/// The body's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebhookFormat {
    /// Gatehouse's own JSON: the event and the call's summary.
    #[default]
    Json,
    /// A Slack incoming-webhook message (`text` and `blocks`), the summary as text.
    Slack,
}

impl WebhookFormat {
    fn is_default(&self) -> bool {
        *self == WebhookFormat::Json
    }
}

impl WebhookSpec {
    /// Whether the webhook is told of `event`.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.events.is_empty() || self.events.contains(&event)
    }

    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        for (field, url) in [
            ("spec.url", Some(&self.url)),
            ("spec.consoleUrl", self.console_url.as_ref()),
        ] {
            let Some(url) = url else { continue };
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                problems.push(Problem::new(field, "must start with http:// or https://"));
            } else if crate::redact::has_userinfo(url) {
                problems.push(Problem::new(
                    field,
                    "holds userinfo (user:password@): secrets never go in the url",
                ));
            } else if url.len() > 2_048 {
                problems.push(Problem::new(field, "at most 2048 characters"));
            }
        }
        if !super::is_valid_name(&self.credential) {
            problems.push(Problem::new(
                "spec.credential",
                "the name of a credential the operator declared",
            ));
        }
        let mut events = self.events.clone();
        events.sort();
        events.dedup();
        if events.len() != self.events.len() {
            problems.push(Problem::new("spec.events", "names an event twice"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> WebhookSpec {
        serde_norway::from_str(text).unwrap()
    }

    fn fields(spec: &WebhookSpec) -> Vec<String> {
        let mut problems = Vec::new();
        spec.validate(&mut problems);
        problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn a_webhook_wants_every_event_unless_it_names_some() {
        let all = parse("{url: 'https://hooks.example/x', credential: hook}");
        assert!(NotifyEvent::ALL.iter().all(|e| all.wants(*e)));
        assert!(fields(&all).is_empty());
        let some = parse("{url: 'https://h', credential: hook, events: [waiting, expired]}");
        assert!(some.wants(NotifyEvent::Waiting) && !some.wants(NotifyEvent::Decided));
    }

    #[test]
    fn bad_urls_credentials_and_repeated_events_are_refused() {
        let spec = parse(
            "{url: 'ftp://h', credential: 'a b', events: [waiting, waiting], \
             consoleUrl: 'https://u:p@gate.example'}",
        );
        assert_eq!(
            fields(&spec),
            [
                "spec.url",
                "spec.consoleUrl",
                "spec.credential",
                "spec.events"
            ]
        );
        let unknown: Result<WebhookSpec, _> =
            serde_norway::from_str("{url: 'https://h', credential: c, events: [started]}");
        assert!(unknown.is_err());
        let secret: Result<WebhookSpec, _> =
            serde_norway::from_str("{url: 'https://h', credential: c, secret: hunter2}");
        assert!(
            secret.is_err(),
            "a secret is never written into the registry"
        );
    }
}
