//! Snapshots: built from an immutable copy of the registry taken at a known applied log id
//! (sled has no point-in-time iteration), serialized off the registry lock, stored as one sled
//! value and flushed. Only the newest is kept; the commands it covers are dropped.

use crate::codec::{blocking, decode, encode, frame, unframe};
use crate::durable::Durable;
use crate::keys::{APPLIED, CMD_PREFIX, MEMBERSHIP, cmd_key};
use crate::{NodeId, StoreError, TypeConfig};
use gatehouse_registry::Registry;
use openraft::{
    BasicNode, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StoredMembership,
};
use std::fmt;
use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

const CURRENT: &[u8] = b"current";

/// The snapshot tree, shared by the state machine and the builders it hands out (a build runs
/// in its own task, possibly while an install happens).
#[derive(Clone)]
pub(crate) struct SnapshotStore {
    durable: Durable,
    snapshots: sled::Tree,
    state: sled::Tree,
    /// The last log id of the stored snapshot. Its lock serializes snapshot writes, so an older
    /// build finishing late never replaces a newer snapshot.
    newest: Arc<Mutex<Option<LogId<NodeId>>>>,
    counter: Arc<AtomicU64>,
}

impl SnapshotStore {
    pub(crate) fn open(
        db: &sled::Db,
        state: &sled::Tree,
        durable: Durable,
    ) -> Result<Self, StoreError> {
        let store = Self {
            durable,
            snapshots: db.open_tree("snapshot")?,
            state: state.clone(),
            newest: Arc::default(),
            counter: Arc::default(),
        };
        if let Some((meta, _)) = store.load()? {
            *store.lock() = meta.last_log_id;
            // Ids stay unique across restarts: continue after the stored one's counter.
            let n = meta
                .snapshot_id
                .rsplit('-')
                .next()
                .and_then(|n| n.parse::<u64>().ok());
            store
                .counter
                .store(n.map_or(0, |n| n + 1), Ordering::Relaxed);
        }
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<LogId<NodeId>>> {
        // The guarded value is a plain id written last; a panic elsewhere cannot tear it.
        self.newest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `"{term}-{index}-{n}"`, `n` from a counter.
    fn next_id(&self, last: Option<LogId<NodeId>>) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        match last {
            Some(id) => format!("{}-{}-{n}", id.leader_id.term, id.index),
            None => format!("none-{n}"),
        }
    }

    /// The stored snapshot: its meta and the registry's bytes.
    pub(crate) fn load(&self) -> Result<Option<(Meta, Vec<u8>)>, StoreError> {
        let Some(bytes) = self.snapshots.get(CURRENT)? else {
            return Ok(None);
        };
        let (meta, data) = unframe(&bytes)?;
        Ok(Some((decode("snapshot meta", meta)?, data.to_vec())))
    }

    fn write(&self, meta: &Meta, data: &[u8]) -> Result<(), StoreError> {
        let value = frame(&encode("snapshot meta", meta)?, data)?;
        self.snapshots.insert(CURRENT, value)?;
        self.durable.sync_here()
    }

    /// Stores a snapshot this node built, unless a newer one is already stored, then drops the
    /// commands it covers (a crash before that only leaves commands the next open ignores).
    fn save_built(&self, meta: &Meta, data: &[u8]) -> Result<(), StoreError> {
        let mut newest = self.lock();
        if *newest > meta.last_log_id {
            return Ok(());
        }
        self.write(meta, data)?;
        *newest = meta.last_log_id;
        if let Some(last) = meta.last_log_id {
            remove_commands(&self.state, ..=cmd_key(last.index))?;
        }
        Ok(())
    }

    /// Stores a snapshot received from the leader. It replaces the state, so every stored
    /// command goes and the applied log id and membership become the snapshot's.
    pub(crate) fn save_installed(&self, meta: &Meta, data: &[u8]) -> Result<(), StoreError> {
        let mut newest = self.lock();
        self.write(meta, data)?;
        *newest = meta.last_log_id;
        let mut batch = commands_batch(&self.state, ..)?;
        batch.insert(APPLIED, encode("applied log id", &meta.last_log_id)?);
        batch.insert(MEMBERSHIP, encode("membership", &meta.last_membership)?);
        self.state.apply_batch(batch)?;
        self.durable.sync_here()
    }
}

/// A batch removing every stored command whose key falls in `range` (keys are `cmd_key`s).
fn commands_batch<R: std::ops::RangeBounds<[u8; 12]>>(
    state: &sled::Tree,
    range: R,
) -> Result<sled::Batch, StoreError> {
    let mut batch = sled::Batch::default();
    let start = match range.start_bound() {
        std::ops::Bound::Unbounded => std::ops::Bound::Included(cmd_key(0)),
        bound => bound.cloned(),
    };
    let end = match range.end_bound() {
        std::ops::Bound::Unbounded => std::ops::Bound::Included(cmd_key(u64::MAX)),
        bound => bound.cloned(),
    };
    for key in state.range((start, end)).keys() {
        let key = key?;
        debug_assert!(key.starts_with(CMD_PREFIX));
        batch.remove(key);
    }
    Ok(batch)
}

pub(crate) fn remove_commands<R: std::ops::RangeBounds<[u8; 12]>>(
    state: &sled::Tree,
    range: R,
) -> Result<(), StoreError> {
    state.apply_batch(commands_batch(state, range)?)?;
    Ok(())
}

/// Reads the stored snapshot as openraft wants it.
pub(crate) fn current(store: &SnapshotStore) -> Result<Option<Snapshot<TypeConfig>>, StoreError> {
    Ok(store.load()?.map(|(meta, data)| Snapshot {
        meta,
        snapshot: Box::new(Cursor::new(data)),
    }))
}

/// An immutable copy of the state machine at one applied log id, ready to be serialized.
pub struct SnapshotBuilder {
    registry: Registry,
    /// How long the copy held the applies up.
    copied_in: Duration,
    applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    store: SnapshotStore,
}

impl SnapshotBuilder {
    pub(crate) fn new(
        registry: Registry,
        copied_in: Duration,
        applied: Option<LogId<NodeId>>,
        membership: StoredMembership<NodeId, BasicNode>,
        store: SnapshotStore,
    ) -> Self {
        Self {
            registry,
            copied_in,
            applied,
            membership,
            store,
        }
    }
}

impl fmt::Debug for SnapshotBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotBuilder")
            .field("applied", &self.applied)
            .field("membership", &self.membership)
            .finish_non_exhaustive()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let meta = Meta {
            last_log_id: self.applied,
            last_membership: self.membership.clone(),
            snapshot_id: self.store.next_id(self.applied),
        };
        let registry = std::mem::take(&mut self.registry);
        let (store, stored_meta) = (self.store.clone(), meta.clone());
        let (data, serialised_in, stored_in) = blocking(move || {
            let started = Instant::now();
            let data = registry.to_bytes();
            let serialised_in = started.elapsed();
            // The copy goes here, off the state machine's worker, rather than wherever the
            // builder would be dropped.
            drop(registry);
            let started = Instant::now();
            store.save_built(&stored_meta, &data)?;
            Ok((data, serialised_in, started.elapsed()))
        })
        .await
        .map_err(|e| {
            e.storage(
                ErrorSubject::Snapshot(Some(meta.signature())),
                ErrorVerb::Write,
            )
        })?;
        tracing::info!(
            snapshot = %meta,
            bytes = data.len(),
            copy_ms = self.copied_in.as_millis(),
            serialise_ms = serialised_in.as_millis(),
            store_ms = stored_in.as_millis(),
            "snapshot built"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}
