//! One watch stream: where it is in the log, what it has yet to send, and what it has told its
//! client is unfinished.

use super::{CallFeed, Change, ChangeKind, Entry, Live, WatchEvent};
use gatehouse_registry::{Call, CallId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

/// One watch stream's position and what it has yet to send.
#[derive(Debug)]
pub(super) struct Watcher {
    pub(super) feed: CallFeed,
    pub(super) tenant: String,
    /// Every change up to this index has been queued: where the stream resumes from.
    pub(super) last: u64,
    pub(super) queue: VecDeque<WatchEvent>,
    pub(super) live: Option<broadcast::Receiver<Live>>,
    /// The calls this stream has reported unfinished, so a resync can report those that
    /// finished meanwhile.
    pub(super) known: BTreeMap<CallId, Arc<Call>>,
}

impl Watcher {
    pub(super) async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Some(event);
            }
            match &mut self.live {
                None => {
                    let feed = self.feed.clone();
                    self.live = Some(feed.resume(self)?);
                }
                Some(live) => match live.recv().await {
                    Ok(Live::Entry(entry)) => self.take(&entry),
                    Ok(Live::Reset) | Err(RecvError::Lagged(_)) => self.live = None,
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }

    pub(super) fn take(&mut self, entry: &Entry) {
        if entry.index <= self.last {
            return;
        }
        self.last = entry.index;
        for change in &entry.changes {
            if change.call.spec.tenant == self.tenant {
                self.send(entry.index, change.kind, change.call.clone());
            }
        }
    }

    pub(super) fn send(&mut self, index: u64, kind: ChangeKind, call: Arc<Call>) {
        if kind == ChangeKind::Removed {
            self.known.remove(call.id());
        } else {
            self.known.insert(call.id().clone(), call.clone());
        }
        self.queue.push_back(WatchEvent::Change {
            index,
            change: Change { kind, call },
        });
    }
}
