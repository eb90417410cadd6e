//! Reading the Raft log: shared by the log store and by the cheap, cloneable readers openraft's
//! replication tasks use.

use crate::codec::decode;
use crate::keys::{index_key, key_index};
use crate::{NodeId, StoreError, TypeConfig};
use openraft::AnyError;
use openraft::{Entry, OptionalSend, RaftLogReader, StorageError, StorageIOError};
use std::fmt;
use std::ops::{Bound, RangeBounds};

/// A read-only handle on the log tree; cloning it clones a sled handle, nothing more.
#[derive(Clone)]
pub struct LogReader {
    logs: sled::Tree,
}

impl LogReader {
    pub(crate) fn new(logs: sled::Tree) -> Self {
        Self { logs }
    }
}

impl fmt::Debug for LogReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader").finish_non_exhaustive()
    }
}

fn bound(b: Bound<&u64>) -> Bound<[u8; 8]> {
    match b {
        Bound::Included(i) => Bound::Included(index_key(*i)),
        Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The entries stored in `range`, in index order; absent ones are simply not there.
pub(crate) fn read_entries<RB: RangeBounds<u64>>(
    logs: &sled::Tree,
    range: RB,
) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
    let mut entries = Vec::new();
    for item in logs.range((bound(range.start_bound()), bound(range.end_bound()))) {
        let (key, value) = item?;
        let entry: Entry<TypeConfig> = decode("log entry", &value)?;
        let index = key_index(&key)?;
        if entry.log_id.index != index {
            return Err(StoreError::Corrupt(format!(
                "log key {index} holds entry {}",
                entry.log_id
            )));
        }
        entries.push(entry);
    }
    Ok(entries)
}

pub(crate) fn read_error(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        read_entries(&self.logs, range).map_err(read_error)
    }
}
