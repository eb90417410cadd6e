//! The Raft log and vote on sled. Every write is on disk (sled's flush, then an fdatasync, on
//! the sync thread) before openraft hears that it is: an append's batch is written at once and
//! its callback fires when a sync covering it completes, so appends in flight share one sync; a
//! vote is synced before `save_vote` returns. Writes reach sled in the order openraft makes
//! them, and completions fire in that order.

use crate::codec::{blocking, decode, encode, get_json};
use crate::durable::Durable;
use crate::keys::index_key;
use crate::log_reader::{LogReader, read_entries, read_error};
use crate::{NodeId, StoreError, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, StorageError, Vote,
};
use std::fmt;
use std::ops::RangeBounds;

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";

/// The log store: entries keyed by index (big-endian), vote, committed and last purged log id in
/// a meta tree.
pub struct LogStore {
    durable: Durable,
    logs: sled::Tree,
    meta: sled::Tree,
}

impl fmt::Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens the log trees and removes entries a purge had recorded but not yet deleted when
    /// the process stopped.
    pub(crate) fn open(db: &sled::Db, durable: Durable) -> Result<Self, StoreError> {
        let store = Self {
            durable,
            logs: db.open_tree("logs")?,
            meta: db.open_tree("meta")?,
        };
        if let Some(purged) = store.last_purged()? {
            remove_range(&store.logs, ..=index_key(purged.index))?;
        }
        Ok(store)
    }

    fn last_purged(&self) -> Result<Option<LogId<NodeId>>, StoreError> {
        get_json(&self.meta, LAST_PURGED, "last purged log id")
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        let last_purged_log_id = self.last_purged()?;
        let last = match self.logs.last()? {
            Some((_, value)) => Some(decode::<Entry<TypeConfig>>("log entry", &value)?.log_id),
            None => None,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id: last.max(last_purged_log_id),
        })
    }
}

/// Removes every entry whose key falls in `range`, in one batch.
fn remove_range<R: RangeBounds<[u8; 8]>>(logs: &sled::Tree, range: R) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    for key in logs.range(range).keys() {
        batch.remove(key?);
    }
    logs.apply_batch(batch)?;
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        read_entries(&self.logs, range).map_err(read_error)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        self.log_state().map_err(read_error)
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader::new(self.logs.clone())
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
        self.durable.sync().await.map_err(write)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        get_json(&self.meta, VOTE, "vote")
            .map_err(|e| e.storage(ErrorSubject::Vote, ErrorVerb::Read))
    }

    /// Not flushed on its own: a committed id that comes back older after a crash only means
    /// openraft re-learns the rest from the leader (or, alone, from its own log).
    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        let write = |e: StoreError| e.storage(ErrorSubject::Store, ErrorVerb::Write);
        let bytes = encode("committed log id", &committed).map_err(write)?;
        let meta = self.meta.clone();
        blocking(move || {
            meta.insert(COMMITTED, bytes)?;
            Ok(())
        })
        .await
        .map_err(write)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        get_json::<Option<LogId<NodeId>>>(&self.meta, COMMITTED, "committed log id")
            .map(Option::flatten)
            .map_err(|e| e.storage(ErrorSubject::Store, ErrorVerb::Read))
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
        let mut batch = sled::Batch::default();
        for entry in entries {
            let bytes = encode("log entry", &entry).map_err(write)?;
            batch.insert(&index_key(entry.log_id.index)[..], bytes);
        }
        let logs = self.logs.clone();
        // One batch (atomic: no hole if we crash halfway). The callback fires only once the
        // sync thread has made it durable; appends arriving meanwhile share that sync.
        let written = blocking(move || {
            logs.apply_batch(batch)?;
            Ok(())
        })
        .await;
        match written {
            Ok(()) => self.durable.after_sync(callback).map_err(write),
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(write(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let delete = |e: StoreError| e.storage(ErrorSubject::Logs, ErrorVerb::Delete);
        let logs = self.logs.clone();
        blocking(move || remove_range(&logs, index_key(log_id.index)..))
            .await
            .map_err(delete)?;
        self.durable.sync().await.map_err(delete)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        let delete = |e: StoreError| e.storage(ErrorSubject::Logs, ErrorVerb::Delete);
        let bytes = encode("last purged log id", &log_id).map_err(delete)?;
        let (logs, meta) = (self.logs.clone(), self.meta.clone());
        blocking(move || Ok(meta.insert(LAST_PURGED, bytes).map(drop)?))
            .await
            .map_err(delete)?;
        // The mark, and every state-machine batch written before it, are on disk before any
        // entry goes; entries left behind by a crash here are removed at the next open.
        self.durable.sync().await.map_err(delete)?;
        blocking(move || remove_range(&logs, ..=index_key(log_id.index)))
            .await
            .map_err(delete)
    }
}
