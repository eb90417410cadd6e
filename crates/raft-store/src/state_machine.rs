//! The state machine: the in-memory registry, shared with readers. Applying writes nothing to
//! disk: the Raft log holds every committed entry, and a snapshot (synced when stored) holds
//! the registry up to its index. At boot the registry is the stored snapshot's (plus, for a
//! store written before applying stopped writing, the commands it kept after it), and openraft
//! re-applies the log from there up to the committed id the log store kept. openraft never
//! purges an entry a stored snapshot does not cover, so nothing is lost between the two.

use crate::codec::blocking;
use crate::durable::Durable;
use crate::recovery::{Recovered, recover};
use crate::segments::LogSynced;
use crate::snapshot::{SnapshotBuilder, SnapshotStore, current};
use crate::{ApplyResult, NodeId, SharedRegistry, StoreError, TypeConfig};
use gatehouse_registry::{Call, Proposal, Registry, Response};
use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend, Snapshot,
    SnapshotMeta, StorageError, StoredMembership,
};
use std::fmt;
use std::io::Cursor;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};

/// How many applied entries a slow subscriber may fall behind before it lags.
const EVENTS: usize = 1024;

/// One applied proposal, for watchers. A subscriber that lags, or sees the applied index jump
/// past what it received (a snapshot was installed), re-reads the registry instead.
#[derive(Debug, Clone)]
pub struct AppliedEntry {
    pub index: u64,
    pub proposal: Arc<Proposal>,
    pub result: ApplyResult,
    /// The records of the calls this entry changed, as they were right after it: a watcher
    /// reading the registry later could see a later state under this entry's index.
    pub calls: Arc<Vec<Call>>,
}

/// The calls a response says were proposed or moved (batches included), in order.
fn touched_calls(registry: &Registry, result: &ApplyResult, into: &mut Vec<Call>) {
    match result {
        Ok(Response::Call { call_id, .. }) => into.extend(registry.call(call_id).cloned()),
        Ok(Response::Batch { results }) => {
            for result in results {
                touched_calls(registry, result, into);
            }
        }
        Ok(
            Response::Resources { .. }
            | Response::Existing { .. }
            | Response::Placed { .. }
            | Response::Purged { .. }
            | Response::Admitted { .. }
            | Response::ToolsetLoaded { .. }
            | Response::Notified { .. }
            | Response::Nothing,
        )
        | Err(_) => {}
    }
}

pub struct StateMachineStore {
    snapshots: SnapshotStore,
    registry: SharedRegistry,
    applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    applied_tx: watch::Sender<u64>,
    events: broadcast::Sender<AppliedEntry>,
    /// How far this node's log is on disk: nothing is applied before it is.
    synced: LogSynced,
}

impl fmt::Debug for StateMachineStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateMachineStore")
            .field("applied", &self.applied)
            .field("membership", &self.membership)
            .finish_non_exhaustive()
    }
}

fn index_of(log_id: Option<LogId<NodeId>>) -> u64 {
    log_id.map_or(0, |id| id.index)
}

/// What a blank or membership entry answers: nothing changed in the registry.
fn nothing() -> ApplyResult {
    Ok(Response::Nothing)
}

impl StateMachineStore {
    pub(crate) fn open(
        db: &sled::Db,
        durable: Durable,
        synced: LogSynced,
    ) -> Result<Self, StoreError> {
        let state = db.open_tree("state")?;
        let snapshots = SnapshotStore::open(db, &state, durable)?;
        let Recovered {
            registry,
            applied,
            membership,
            replayed,
        } = recover(&state, snapshots.load()?)?;
        tracing::info!(?applied, replayed, "state machine recovered");
        let (applied_tx, _) = watch::channel(index_of(applied));
        let (events, _) = broadcast::channel(EVENTS);
        Ok(Self {
            snapshots,
            registry: SharedRegistry::new(registry),
            applied,
            membership,
            applied_tx,
            events,
            synced,
        })
    }

    /// The registry readers share; take it before handing the store to `Raft::new`.
    pub fn registry(&self) -> SharedRegistry {
        self.registry.clone()
    }

    /// The last applied log index (0 before anything was applied).
    pub fn applied_watch(&self) -> watch::Receiver<u64> {
        self.applied_tx.subscribe()
    }

    /// Every applied proposal from now on, with its result.
    pub fn subscribe(&self) -> broadcast::Receiver<AppliedEntry> {
        self.events.subscribe()
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        Ok((self.applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<ApplyResult>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let write = |e: StoreError| e.storage(ErrorSubject::StateMachine, ErrorVerb::Write);
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        let Some(last) = entries.last().map(|entry| entry.log_id) else {
            return Ok(Vec::new());
        };
        // The leader acknowledges its own append before its sync (`LogStore::leading_as`), so
        // a commit may count it early; applying waits for it, and so does the client's answer.
        // A follower's entries were synced before it acknowledged them: no wait there.
        self.synced.wait_for(last.index).await.map_err(write)?;

        let mut results = Vec::with_capacity(entries.len());
        let mut applied = Vec::new();
        {
            let mut registry = self
                .registry
                .write()
                .map_err(|_| write(StoreError::Poisoned))?;
            for entry in entries {
                let index = entry.log_id.index;
                let result = match entry.payload {
                    EntryPayload::Blank => nothing(),
                    // A refusal is an answer for the client, not a storage failure.
                    EntryPayload::Normal(proposal) => {
                        let result = registry.apply(index, &proposal);
                        let mut calls = Vec::new();
                        touched_calls(&registry, &result, &mut calls);
                        applied.push(AppliedEntry {
                            index,
                            proposal: Arc::new(proposal),
                            result: result.clone(),
                            calls: Arc::new(calls),
                        });
                        result
                    }
                    EntryPayload::Membership(membership) => {
                        self.membership = StoredMembership::new(Some(entry.log_id), membership);
                        nothing()
                    }
                };
                results.push(result);
            }
        }
        self.applied = Some(last);

        self.applied_tx.send_replace(last.index);
        for event in applied {
            // No subscriber is fine.
            let _ = self.events.send(event);
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // The copy is taken between two applies, so it is exactly the state at `self.applied`.
        // A poisoned lock means an apply panicked, and that apply already failed the node.
        let started = std::time::Instant::now();
        let registry = self.registry.read().clone();
        SnapshotBuilder::new(
            registry,
            started.elapsed(),
            self.applied,
            self.membership.clone(),
            self.snapshots.clone(),
        )
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let subject = || ErrorSubject::Snapshot(Some(meta.signature()));
        let data = snapshot.into_inner();
        let registry = Registry::from_bytes(&data).map_err(|source| {
            StoreError::Decode {
                what: "snapshot registry",
                source,
            }
            .storage(subject(), ErrorVerb::Read)
        })?;
        let (store, stored_meta) = (self.snapshots.clone(), meta.clone());
        blocking(move || store.save_installed(&stored_meta, &data))
            .await
            .map_err(|e| e.storage(subject(), ErrorVerb::Write))?;

        *self
            .registry
            .write()
            .map_err(|_| StoreError::Poisoned.storage(subject(), ErrorVerb::Write))? = registry;
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.applied_tx.send_replace(index_of(self.applied));
        tracing::info!(snapshot = %meta, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let store = self.snapshots.clone();
        blocking(move || current(&store))
            .await
            .map_err(|e| e.storage(ErrorSubject::Snapshot(None), ErrorVerb::Read))
    }
}
