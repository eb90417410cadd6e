//! Seeding an empty store with a registry from a backup, as the state of a new one-voter
//! cluster: the registry becomes the installed snapshot (at the backup's index, so generations
//! and indexes carry on), `node` the only voter, and the vote is the backup's term, so the
//! node's first election starts above every log id the snapshot names.

use crate::{NodeId, StoreError};
use gatehouse_registry::Registry;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;

/// What a restore put in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    pub index: u64,
    pub term: u64,
}

/// Writes `registry` into the empty store at `dir` as the state of a cluster whose only voter is
/// `node`, reached at `addr`. Refuses a store that holds anything already.
pub async fn restore(
    dir: &Path,
    node: NodeId,
    addr: &str,
    term: u64,
    registry: &Registry,
) -> Result<Restored, StoreError> {
    let index = registry.applied_index();
    if index == 0 {
        return Err(StoreError::Corrupt(
            "the registry to restore holds no applied command".into(),
        ));
    }
    let term = term.max(1);
    let (mut log, mut state_machine) = crate::open(dir)?;
    let storage = |e: openraft::StorageError<NodeId>| StoreError::Corrupt(e.to_string());
    let holds_log = log.get_log_state().await.map_err(storage)?.last_log_id;
    let vote = log.read_vote().await.map_err(storage)?;
    let (applied, _) = state_machine.applied_state().await.map_err(storage)?;
    if holds_log.is_some() || vote.is_some() || applied.is_some() {
        return Err(StoreError::Corrupt(format!(
            "{} already holds Raft state: restore only into an empty store",
            dir.display()
        )));
    }

    let log_id = LogId::new(CommittedLeaderId::new(term, node), index);
    let membership = Membership::new(
        vec![BTreeSet::from([node])],
        BTreeMap::from([(node, BasicNode { addr: addr.into() })]),
    );
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
        snapshot_id: format!("{term}-{index}-0"),
    };
    state_machine
        .install_snapshot(&meta, Box::new(Cursor::new(registry.to_bytes())))
        .await
        .map_err(storage)?;
    log.save_vote(&Vote::new(term, node))
        .await
        .map_err(storage)?;
    Ok(Restored { index, term })
}
