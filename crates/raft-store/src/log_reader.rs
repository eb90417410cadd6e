//! Reading the Raft log: shared by the log store and by the cheap, cloneable readers openraft's
//! replication tasks use.

use crate::segments::Segments;
use crate::{NodeId, StoreError, TypeConfig};
use openraft::AnyError;
use openraft::{Entry, OptionalSend, RaftLogReader, StorageError, StorageIOError};
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

/// A read-only handle on the log's segments; cloning it clones an `Arc`, nothing more.
#[derive(Clone)]
pub struct LogReader {
    segments: Arc<Segments>,
}

impl LogReader {
    pub(crate) fn new(segments: Arc<Segments>) -> Self {
        Self { segments }
    }
}

impl fmt::Debug for LogReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader").finish_non_exhaustive()
    }
}

pub(crate) fn read_error(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::read_logs(AnyError::new(&e)).into()
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + fmt::Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
        self.segments.read(range).map_err(read_error)
    }
}
