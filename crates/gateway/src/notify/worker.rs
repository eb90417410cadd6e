//! One webhook's worker on its tenant's home: what is due, and sending it.

use super::Shared;
use super::body::{self, Notice};
use crate::executor::read_credential;
use futures::StreamExt;
use gatehouse_audit::{Entry, Kind};
use gatehouse_cluster::cluster::now_ms;
use gatehouse_cluster::feed::WatchEvent;
use gatehouse_registry::call::Call;
use gatehouse_registry::notify::{NotifyEvent, notices};
use gatehouse_registry::resource::{CredentialRef, WebhookSpec};
use gatehouse_registry::{CallId, Command};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A webhook as its worker was started with.
#[derive(Debug, Clone)]
pub(super) struct Worker {
    pub tenant: String,
    pub name: String,
    pub spec: WebhookSpec,
    pub since: u64,
    pub generation: u64,
}

/// A running worker; dropping it stops both its tasks.
pub(super) struct WorkerHandle {
    pub generation: u64,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Notices queued or being sent, so the watcher queues each once; a notice leaves it once its
/// mark is committed, after which the registry says it was given.
type Queued = Arc<Mutex<HashSet<(CallId, NotifyEvent)>>>;

/// How one attempt went.
#[derive(Debug, PartialEq)]
enum Attempt {
    Delivered(u16),
    /// Not worth trying again: the receiver refused the notice (a 4xx other than 408 and 429),
    /// or answered with a redirect, which is not followed.
    Refused(String),
    /// Worth trying again: no answer, a 5xx, 408 or 429, or no secret on this node now.
    Failed(String),
}

/// What an answer's status means for the notice.
fn judge(status: http::StatusCode) -> Attempt {
    match status.as_u16() {
        200..=299 => Attempt::Delivered(status.as_u16()),
        408 | 429 => Attempt::Failed(format!("HTTP {status}")),
        300..=399 => Attempt::Refused(format!("HTTP {status}; redirects are not followed")),
        400..=499 => Attempt::Refused(format!("HTTP {status}")),
        _ => Attempt::Failed(format!("HTTP {status}")),
    }
}

/// The pause before marking is tried again when no leader took the mark.
const MARK_PAUSE: Duration = Duration::from_millis(500);

impl Worker {
    pub(super) fn spawn(self, shared: Shared) -> WorkerHandle {
        let (queue, queued_rx) = mpsc::unbounded_channel();
        let queued: Queued = Arc::default();
        let worker = Arc::new(self);
        let watcher = tokio::spawn(worker.clone().watch(shared.clone(), queue, queued.clone()));
        let sender = tokio::spawn(worker.clone().send(shared, queued_rx, queued));
        WorkerHandle {
            generation: worker.generation,
            tasks: [watcher, sender],
        }
    }

    /// Follows the tenant's calls from the feed and queues every notice due and not yet given.
    async fn watch(
        self: Arc<Self>,
        shared: Shared,
        queue: mpsc::UnboundedSender<Notice>,
        queued: Queued,
    ) {
        let changes = shared.feed.watch(&self.tenant, 0);
        futures::pin_mut!(changes);
        while let Some(event) = changes.next().await {
            let registry = shared.cluster.registry.read();
            let calls: Vec<&Call> = match &event {
                WatchEvent::Change { change, .. } => vec![&change.call],
                // The feed knows only unfinished calls: a resync looks at every call the
                // registry still holds, so none that finished meanwhile is missed.
                WatchEvent::Resync { .. } => registry.calls_of(&self.tenant).collect(),
            };
            for call in calls {
                for (event, at) in notices(call) {
                    if !self.spec.wants(event)
                        || at < self.since
                        || registry.notified(call.id(), &self.name, event)
                    {
                        continue;
                    }
                    let fresh = queued
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert((call.id().clone(), event));
                    if fresh
                        && queue
                            .send(Notice {
                                call: call.clone(),
                                event,
                                at,
                            })
                            .is_err()
                    {
                        return;
                    }
                }
            }
        }
    }

    /// Sends the queue in order, one notice at a time, each until it is settled.
    async fn send(
        self: Arc<Self>,
        shared: Shared,
        mut queue: mpsc::UnboundedReceiver<Notice>,
        queued: Queued,
    ) {
        while let Some(notice) = queue.recv().await {
            self.settle(&shared, &notice).await;
            self.mark(&shared, &notice).await;
            queued
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&(notice.call.id().clone(), notice.event));
        }
    }

    /// Tries until the notice is delivered, refused, or too old to send; audits every attempt.
    async fn settle(&self, shared: &Shared, notice: &Notice) {
        let settings = &shared.settings;
        let mut pause = settings.first_pause;
        for attempt in 1u32.. {
            let outcome = match self.attempt(shared, notice).await {
                Attempt::Delivered(status) => {
                    self.audit(
                        shared,
                        notice,
                        format!("delivered: HTTP {status}, attempt {attempt}"),
                    );
                    return;
                }
                Attempt::Refused(why) => {
                    self.audit(shared, notice, format!("refused: {why}, attempt {attempt}"));
                    return;
                }
                Attempt::Failed(why) => why,
            };
            let age = now_ms().saturating_sub(notice.at);
            if age >= settings.give_up_after.as_millis() as u64 {
                self.audit(
                    shared,
                    notice,
                    format!(
                        "abandoned: {outcome}, attempt {attempt}, {} s after the event",
                        age / 1_000
                    ),
                );
                return;
            }
            self.audit(
                shared,
                notice,
                format!("failed: {outcome}, attempt {attempt}"),
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(settings.max_pause);
        }
    }

    async fn attempt(&self, shared: &Shared, notice: &Notice) -> Attempt {
        let credential = CredentialRef::Named(self.spec.credential.clone());
        let secret = match read_credential(
            &shared.grants,
            shared.env.as_ref(),
            Some(&self.tenant),
            &credential,
        )
        .await
        {
            Ok(secret) => secret,
            Err(e) => return Attempt::Failed(e.message),
        };
        let base = self.spec.console_url.as_deref().unwrap_or(&shared.console);
        let link = body::console_link(base, notice.call.id());
        let payload = body::body(self.spec.format, &self.name, notice, &link).to_string();
        let timestamp = now_ms() / 1_000;
        let signature = body::signature(secret.as_bytes(), timestamp, payload.as_bytes());
        let sent = shared
            .http
            .post(&self.spec.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(body::EVENT_ID_HEADER, notice.id())
            .header(body::EVENT_HEADER, notice.event.as_str())
            .header(body::TIMESTAMP_HEADER, timestamp.to_string())
            .header(body::SIGNATURE_HEADER, signature)
            .body(payload)
            .send()
            .await;
        // The answer's body is never read: a receiver cannot make the node hold what it sends.
        match sent {
            Err(e) if e.is_timeout() => Attempt::Failed("no answer in time".into()),
            Err(e) if e.is_connect() => Attempt::Failed("could not connect".into()),
            Err(e) => Attempt::Failed(format!("sending failed: {}", e.without_url())),
            Ok(answer) => judge(answer.status()),
        }
    }

    fn audit(&self, shared: &Shared, notice: &Notice, outcome: String) {
        let spec = &notice.call.spec;
        let entry = Entry {
            kind: Kind::Notification,
            tenant: Some(self.tenant.clone()),
            chain: vec![format!("node:{}", shared.cluster.id)],
            target: Some(format!("webhook/{}", self.name)),
            mode: Some(spec.effective_mode.to_string()),
            decision: Some(notice.event.to_string()),
            call_id: Some(spec.id.to_string()),
            args_sha256: Some(spec.args_sha256.clone()),
            outcome,
            ..Entry::default()
        };
        if let Err(e) = shared.audit.record(entry) {
            tracing::error!(error = %e, call = %spec.id, "audit record of a notice failed");
        }
    }

    /// Commits that the notice is settled; tries until a leader takes it. A refusal (the call
    /// was purged meanwhile) settles it too.
    async fn mark(&self, shared: &Shared, notice: &Notice) {
        let command = Command::Notified {
            tenant: self.tenant.clone(),
            webhook: self.name.clone(),
            notices: vec![(notice.call.id().clone(), notice.event)],
        };
        loop {
            match shared.cluster.propose(command.clone()).await {
                Ok(_) | Err(gatehouse_cluster::cluster::WriteError::Rejected(_)) => return,
                Err(e) => {
                    tracing::warn!(error = %e, call = %notice.call.id(), "marking a notice failed; trying again");
                    tokio::time::sleep(MARK_PAUSE).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Attempt, judge};
    use http::StatusCode;

    #[test]
    fn only_transient_answers_are_tried_again() {
        let kind = |code: u16| match judge(StatusCode::from_u16(code).unwrap()) {
            Attempt::Delivered(_) => "delivered",
            Attempt::Refused(_) => "refused",
            Attempt::Failed(_) => "again",
        };
        for (code, expected) in [
            (200, "delivered"),
            (204, "delivered"),
            (302, "refused"),
            (400, "refused"),
            (404, "refused"),
            (408, "again"),
            (429, "again"),
            (500, "again"),
            (503, "again"),
        ] {
            assert_eq!(kind(code), expected, "HTTP {code}");
        }
        assert_eq!(
            judge(StatusCode::FOUND),
            Attempt::Refused("HTTP 302 Found; redirects are not followed".into())
        );
    }
}
