//! What can go wrong in the store, and the one place it is turned into openraft's
//! `StorageError` (which stops the Raft node: a storage error means the disk can no longer be
//! trusted).

use crate::NodeId;
use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("cannot encode {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot decode {what}: {source}")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    #[error("the registry lock is poisoned: an apply panicked halfway")]
    Poisoned,
    #[error("a blocking storage task did not finish: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("writes could not be made durable: {0}")]
    Sync(String),
}

impl StoreError {
    /// This error as openraft sees it: what was being touched, and how.
    pub(crate) fn storage(
        self,
        subject: ErrorSubject<NodeId>,
        verb: ErrorVerb,
    ) -> StorageError<NodeId> {
        StorageIOError::new(subject, verb, AnyError::new(&self)).into()
    }
}
