//! The Raft log and vote. Entries live in the log's own segment files (`segments`): an
//! append's batch is written at once and its callback fires when an `fdatasync` covering it
//! completes, so appends in flight share one sync. The committed log id has a small file of
//! its own beside them (`committed`). The vote and the last purged log id live in sled's meta
//! tree; a vote is synced (sled's flush, then an fdatasync) before `save_vote` returns. Writes
//! happen in the order openraft makes them, and completions fire in that order.

use crate::codec::{blocking, encode, get_json};
use crate::committed::CommittedFile;
use crate::durable::Durable;
use crate::log_reader::{LogReader, read_error};
use crate::segments::{LogSynced, Segments, SyncsHeld};
use crate::{NodeId, StoreError, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageError, Vote,
};
use std::fmt;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The log store: entries in segment files, the committed log id in its own file; vote and last
/// purged log id in a meta tree.
pub struct LogStore {
    durable: Durable,
    segments: Arc<Segments>,
    committed: CommittedFile,
    meta: sled::Tree,
    /// This node, once [`LogStore::leading_as`] named it.
    me: Option<NodeId>,
    /// The vote this process last saved: whether this node leads, as the log sees it.
    vote: Option<Vote<NodeId>>,
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens the log in `dir`. A store written before the log had files of its own keeps its
    /// entries in sled's `logs` tree: they move to the segments once, whole, and the tree is
    /// emptied after.
    pub(crate) fn open(db: &sled::Db, dir: &Path, durable: Durable) -> Result<Self, StoreError> {
        let meta = db.open_tree("meta")?;
        let purged = get_json::<LogId<NodeId>>(&meta, LAST_PURGED, "last purged log id")?;
        let old = db.open_tree("logs")?;
        let segments = Segments::open(dir, purged.map(|p| p.index), || {
            let mut entries = Vec::new();
            for item in old.iter().values() {
                let entry: Entry<TypeConfig> = crate::codec::decode("log entry", &item?)?;
                if purged.is_none_or(|p| entry.log_id.index > p.index) {
                    entries.push(entry);
                }
            }
            if !entries.is_empty() {
                tracing::info!(
                    entries = entries.len(),
                    "moving the Raft log into its own files"
                );
            }
            Ok(entries)
        })?;
        if !old.is_empty() {
            old.clear()?;
            durable.sync_here()?;
        }
        let committed = CommittedFile::open(&dir.join(crate::segments::DIR))?;
        Ok(Self {
            durable,
            segments,
            committed,
            meta,
            me: None,
            vote: None,
        })
    }

    /// Names this node, so that its own appends as leader are acknowledged to openraft once
    /// written, before their sync: openraft 0.9 sends a leader's entries to the followers only
    /// after its own append is acknowledged, so waiting for the leader's sync there puts two
    /// syncs one after the other on every write. The leader's sync then runs beside the
    /// followers' (Raft's "the leader may write to its disk in parallel", §10.2.1 of Ongaro's
    /// thesis) and what depends on it waits for it instead: the state machine applies an entry
    /// only once it is on this node's disk ([`LogSynced`]), and the leader tells followers no
    /// commit index past its own synced entries (the cluster's Raft network), so nothing is
    /// applied anywhere before a majority holds it on disk. A follower's append, and every
    /// append before a vote of this node's own is saved in this process, is acknowledged only
    /// once synced, as before.
    pub fn leading_as(mut self, me: NodeId) -> Self {
        self.me = Some(me);
        self
    }

    /// How far the log is on disk.
    pub fn synced(&self) -> LogSynced {
        self.segments.synced()
    }

    /// Holds the log's syncs back while the guard lives: for tests that must see what happens
    /// between an append and its sync.
    #[doc(hidden)]
    pub fn hold_syncs(&self) -> SyncsHeld {
        self.segments.hold_syncs()
    }

    /// Whether the vote this process saved last is this node's own, granted.
    fn leads(&self) -> bool {
        let Some((me, vote)) = self.me.zip(self.vote.as_ref()) else {
            return false;
        };
        vote.is_committed() && vote.leader_id().voted_for() == Some(me)
    }

    /// Whether `entries` are this node's own, appended as the leader of the vote it saved last.
    fn leader_append(&self, entries: &[Entry<TypeConfig>]) -> bool {
        self.leads()
            && self.vote.as_ref().is_some_and(|vote| {
                entries
                    .iter()
                    .all(|entry| entry.log_id.leader_id == *vote.leader_id())
            })
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        self.tail().log_state()
    }

    /// A read-only view of where the log ends, for whoever must compare logs without asking
    /// Raft (an election's pre-vote); it stays valid after the store is handed to Raft.
    pub fn tail(&self) -> LogTail {
        LogTail {
            segments: self.segments.clone(),
            meta: self.meta.clone(),
        }
    }
}

/// Where a node's log ends: [`LogStore::tail`].
#[derive(Clone)]
pub struct LogTail {
    segments: Arc<Segments>,
    meta: sled::Tree,
}

impl fmt::Debug for LogTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogTail").finish_non_exhaustive()
    }
}

impl LogTail {
    /// The id of the last entry appended, or of the last purged one when a snapshot took them all.
    pub fn last_log_id(&self) -> Result<Option<LogId<NodeId>>, StoreError> {
        Ok(self.log_state()?.last_log_id)
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        let last_purged_log_id =
            get_json::<LogId<NodeId>>(&self.meta, LAST_PURGED, "last purged log id")?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id: self.segments.last().max(last_purged_log_id),
        })
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        self.segments.read(range).map_err(read_error)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        self.log_state().map_err(read_error)
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader::new(self.segments.clone())
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let write = |e: StoreError| e.storage(ErrorSubject::Vote, ErrorVerb::Write);
        let bytes = encode("vote", vote).map_err(write)?;
        let meta = self.meta.clone();
        blocking(move || {
            meta.insert(VOTE, bytes)?;
            Ok(())
        })
        .await
        .map_err(write)?;
        self.durable.sync().await.map_err(write)?;
        // Leaving its own leadership: what it acknowledged before the sync is synced before
        // anything is done under the new vote (a heartbeat's answer claims the entries it
        // matches, and a follower claims only what is on disk).
        if self.leads() && self.vote.as_ref() != Some(vote) {
            self.segments
                .synced()
                .wait_for_written()
                .await
                .map_err(write)?;
        }
        self.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        get_json(&self.meta, VOTE, "vote")
            .map_err(|e| e.storage(ErrorSubject::Vote, ErrorVerb::Read))
    }

    /// Not synced: a committed id that comes back older after a crash only means openraft
    /// re-learns the rest from the leader (or, alone, from its own log).
    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.committed
            .save(committed)
            .map_err(|e| e.storage(ErrorSubject::Store, ErrorVerb::Write))
    }

    /// The committed id's file; a store from before it had one keeps the id in sled. Never past
    /// the last entry on disk: the id is written unsynced, and after a power cut it could
    /// outlive an entry a follower had not synced yet; openraft re-applies only what is here.
    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        let read = |e: StoreError| e.storage(ErrorSubject::Store, ErrorVerb::Read);
        let saved = match self.committed.read().map_err(read)? {
            Some(committed) => Some(committed),
            None => get_json::<Option<LogId<NodeId>>>(&self.meta, COMMITTED, "committed log id")
                .map(Option::flatten)
                .map_err(read)?,
        };
        let last = self.log_state().map_err(read)?.last_log_id;
        Ok(match (saved, last) {
            (Some(saved), Some(last)) if saved.index > last.index => Some(last),
            (Some(_), None) => None,
            (saved, _) => saved,
        })
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let write = |e: StoreError| e.storage(ErrorSubject::Logs, ErrorVerb::Write);
        // One write of every record; the callback fires once the sync thread has made it
        // durable (the leader's own append: once written, see `leading_as`), and appends
        // arriving meanwhile share that sync. A torn write is cut off at the next open, never
        // acknowledged.
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let ack_written = self.leader_append(&entries);
        self.segments
            .append(entries, callback, ack_written)
            .map_err(write)
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let delete = |e: StoreError| e.storage(ErrorSubject::Logs, ErrorVerb::Delete);
        let segments = self.segments.clone();
        blocking(move || segments.truncate(log_id.index))
            .await
            .map_err(delete)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let delete = |e: StoreError| e.storage(ErrorSubject::Logs, ErrorVerb::Delete);
        let bytes = encode("last purged log id", &log_id).map_err(delete)?;
        let meta = self.meta.clone();
        blocking(move || Ok(meta.insert(LAST_PURGED, bytes).map(drop)?))
            .await
            .map_err(delete)?;
        // The mark is on disk before any entry goes (openraft purges only what a stored
        // snapshot covers, and a snapshot is synced when stored); segments left behind by a
        // crash here are skipped up to the mark at the next open.
        self.durable.sync().await.map_err(delete)?;
        let segments = self.segments.clone();
        blocking(move || segments.purge(log_id.index))
            .await
            .map_err(delete)
    }
}
