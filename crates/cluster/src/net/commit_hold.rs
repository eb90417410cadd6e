//! The commit index a leader tells its followers, held to what is on its own disk.
//!
//! The leader's own append is acknowledged to openraft once written, before its sync
//! (`LogStore::leading_as`), so the followers get the entries while the leader's sync runs and
//! a commit can count the leader early. Its own state machine waits for the sync before it
//! applies; the followers must not apply sooner either: a follower told an index it holds but
//! the leader has not synced would apply an entry that only a minority has on disk. So every
//! AppendEntries carries at most the leader's synced index, and a commit index held back that
//! way goes out in a heartbeat as soon as the sync reaches it, not a heartbeat interval later.

use gatehouse_raft_store::{LogSynced, NodeId, Raft};
use openraft::LogId;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Notify, watch};

/// Shared by the node's Raft network (which holds commit indexes back) and the task that sends
/// them on ([`CommitHold::release`]).
#[derive(Debug, Clone)]
pub struct CommitHold {
    synced: LogSynced,
    held: Arc<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// The highest commit index held back and not yet sent on (0: none).
    index: AtomicU64,
    wake: Notify,
}

impl CommitHold {
    pub fn new(synced: LogSynced) -> Self {
        CommitHold {
            synced,
            held: Arc::default(),
        }
    }

    /// The commit index to send: `commit`, or the last entry on this node's disk when that is
    /// behind it; then [`CommitHold::release`] sends the rest once the disk catches up.
    pub(crate) fn clamp(&self, commit: Option<LogId<NodeId>>) -> Option<LogId<NodeId>> {
        let wanted = commit?;
        let through = self.synced.now().through;
        if through.is_some_and(|t| t.index >= wanted.index) {
            return commit;
        }
        self.held.index.fetch_max(wanted.index, Ordering::AcqRel);
        self.held.wake.notify_one();
        through
    }

    /// Sends the followers a heartbeat (which carries the commit index) each time a commit index
    /// held back is on disk here, until `stopped` turns true.
    pub fn release(
        self,
        raft: Raft,
        mut stopped: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let wanted = self.held.index.load(Ordering::Acquire);
                let synced = async {
                    if wanted == 0 {
                        // Nothing held: wait for something to be, then look again.
                        self.held.wake.notified().await;
                        return None;
                    }
                    Some(self.synced.wait_for(wanted).await)
                };
                tokio::select! {
                    synced = synced => match synced {
                        None => continue,
                        Some(Ok(())) => {}
                        // The log failed: nothing past it is ever applied, nor sent.
                        Some(Err(_)) => return,
                    },
                    _ = stopped.wait_for(|stop| *stop) => return,
                }
                // Anything held back meanwhile past `wanted` is sent in the next round.
                let _ = self.held.index.compare_exchange(
                    wanted,
                    0,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                if raft.trigger().heartbeat().await.is_err() {
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_raft_store::TypeConfig;
    use openraft::Vote;
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::testing::{blank_ent, log_id};

    #[tokio::test]
    async fn a_commit_index_past_the_synced_log_is_held_back_until_the_sync_reaches_it() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _state_machine) = gatehouse_raft_store::open(dir.path()).unwrap();
        let mut log = log.leading_as(1);
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        let hold = CommitHold::new(log.synced());

        let held = log.hold_syncs();
        let entries = (1..=3).map(|i| blank_ent::<TypeConfig>(1, 1, i));
        log.blocking_append(entries).await.unwrap();
        assert_eq!(hold.clamp(None), None);
        assert_eq!(
            hold.held.index.load(Ordering::Acquire),
            0,
            "nothing to hold"
        );
        // Written, acknowledged, not on disk: no follower hears it is committed.
        assert_eq!(hold.clamp(Some(log_id(1, 1, 3))), None);
        assert_eq!(
            hold.held.index.load(Ordering::Acquire),
            3,
            "owed to the followers"
        );

        drop(held);
        log.synced().wait_for(3).await.unwrap();
        assert_eq!(hold.clamp(Some(log_id(1, 1, 3))), Some(log_id(1, 1, 3)));
        assert_eq!(hold.clamp(Some(log_id(1, 1, 2))), Some(log_id(1, 1, 2)));
    }
}
