//! openraft storage for the gatehouse registry: the Raft log in its own segment files, the vote
//! and snapshots in sled, and the state machine: the in-memory `Registry`, made durable by
//! snapshots and rebuilt at boot from the last one and the log after it.
//!
//! Durability is the point of this crate: a log entry is on disk (one write to the log's own
//! segment file, then an fdatasync of it, on a sync thread) and a vote is on disk (sled's
//! synchronous flush, then an fdatasync of its file) before openraft is told it is persisted.
//! The one exception is the leader's own append ([`LogStore::leading_as`]): it is acknowledged
//! once written, and the state machine applies nothing this node has not synced. It must never
//! use sled's `flush_async` (it can deadlock in 0.34.7), never let a follower acknowledge what
//! it has not synced, and never evaluate anything itself: applying an entry is
//! `Registry::apply`, nothing more.

mod codec;
mod committed;
mod durable;
mod error;
mod keys;
mod log_reader;
mod log_store;
mod open;
mod recovery;
mod restore;
mod segments;
mod shared_registry;
mod snapshot;
mod state_machine;

pub use error::StoreError;
pub use log_reader::LogReader;
pub use log_store::{LogStore, LogTail};
pub use open::open;
pub use restore::{Restored, restore};
pub use segments::{LogSynced, Synced, SyncsHeld};
pub use shared_registry::SharedRegistry;
pub use snapshot::SnapshotBuilder;
pub use state_machine::{AppliedEntry, StateMachineStore};

use gatehouse_registry::{ApplyError, Proposal, Response};
use std::io::Cursor;

openraft::declare_raft_types!(
    /// The registry's Raft types: proposals in, apply results out, nodes named by their gRPC
    /// address.
    pub TypeConfig:
        D = Proposal,
        R = ApplyResult,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// What applying one committed proposal gave: the registry's answer, or why it refused.
pub type ApplyResult = Result<Response, ApplyError>;

pub type NodeId = u64;
pub type Raft = openraft::Raft<TypeConfig>;
