//! One approver's `WatchPending` stream, turned into "when did this call show up, and when did it
//! finish" for the bench's waiters, and into an automatic approver.

use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_tests::flow::{ACME, Authed};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, broadcast};

#[derive(Clone)]
pub struct Watcher {
    seen: Arc<Mutex<HashMap<String, Seen>>>,
    changed: Arc<Notify>,
    added: broadcast::Sender<pb::CallRecord>,
}

#[derive(Default)]
struct Seen {
    record: Option<pb::CallRecord>,
    finished: bool,
}

impl Watcher {
    /// Opens the stream (from now: resync first, then live) and follows it in a task.
    pub async fn start(mut client: ApprovalServiceClient<Authed>) -> anyhow::Result<Watcher> {
        let mut stream = client
            .watch_pending(pb::WatchCallsRequest {
                tenant: ACME.into(),
                from_index: 0,
            })
            .await?
            .into_inner();
        let (added, _) = broadcast::channel(4096);
        let watcher = Watcher {
            seen: Arc::default(),
            changed: Arc::new(Notify::new()),
            added,
        };
        let w = watcher.clone();
        tokio::spawn(async move {
            while let Ok(Some(event)) = stream.message().await {
                let Some(pb::approval_event::Event::Change(change)) = event.event else {
                    continue;
                };
                let kind = change.kind();
                let Some(call) = change.call else { continue };
                {
                    let mut seen = w.seen.lock().expect("watch lock");
                    let entry = seen.entry(call.call_id.clone()).or_default();
                    entry.finished |= kind == pb::ChangeKind::Removed;
                    entry.record = Some(call.clone());
                }
                if kind == pb::ChangeKind::Added && call.state() == pb::CallState::Pending {
                    let _ = w.added.send(call);
                }
                w.changed.notify_waiters();
            }
        });
        Ok(watcher)
    }

    pub fn record(&self, id: &str) -> Option<pb::CallRecord> {
        self.seen
            .lock()
            .expect("watch lock")
            .get(id)?
            .record
            .clone()
    }

    async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        done: fn(&Seen) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            if self
                .seen
                .lock()
                .expect("watch lock")
                .get(id)
                .is_some_and(done)
            {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                anyhow::bail!("call {id} not seen within {timeout:?}");
            }
        }
    }

    pub async fn wait_added(&self, id: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait(id, timeout, |s| s.record.is_some()).await
    }

    pub async fn wait_finished(&self, id: &str, timeout: Duration) -> anyhow::Result<()> {
        self.wait(id, timeout, |s| s.finished).await
    }

    /// Approves every call that shows up pending, each as soon as it is seen.
    pub async fn approve_all(self, approver: ApprovalServiceClient<Authed>) {
        let mut added = self.added.subscribe();
        while let Ok(call) = added.recv().await {
            let mut approver = approver.clone();
            tokio::spawn(async move {
                let _ = approver
                    .approve(pb::ApproveCallRequest {
                        call_id: call.call_id,
                        args_sha256: call.args_sha256,
                        reason: "automatic".into(),
                    })
                    .await;
            });
        }
    }
}
