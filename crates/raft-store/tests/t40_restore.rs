//! A registry from a backup seeds an empty store as a new one-voter cluster, and a store that
//! holds anything is refused.

mod support;

use gatehouse_raft_store::{Restored, open, restore};
use gatehouse_registry::Registry;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftSnapshotBuilder, Vote};
use std::collections::BTreeSet;
use support::{has_tenant, put_tenant};

fn registry_at(index: u64) -> Registry {
    let mut registry = Registry::new();
    registry.apply(index, &put_tenant("acme", 1)).unwrap();
    registry
}

#[tokio::test]
async fn a_restored_store_opens_as_a_one_voter_cluster_at_the_backups_index() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry_at(42);
    let restored = restore(dir.path(), 7, "127.0.0.1:7007", 3, &registry)
        .await
        .unwrap();
    assert_eq!(restored, Restored { index: 42, term: 3 });

    let (mut log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 7)));
    let (applied, membership) = sm.applied_state().await.unwrap();
    let applied = applied.unwrap();
    assert_eq!((applied.leader_id.term, applied.index), (3, 42));
    assert_eq!(
        membership.membership().voter_ids().collect::<BTreeSet<_>>(),
        BTreeSet::from([7])
    );
    assert_eq!(
        membership.membership().get_node(&7).unwrap().addr,
        "127.0.0.1:7007"
    );
    let reopened = sm.registry();
    assert!(has_tenant(&reopened.read(), "acme"));
    assert_eq!(reopened.read().digest(), registry.digest());
    // The stored snapshot is the restored state, so a learner gets it whole.
    let snapshot = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(snapshot.meta.last_log_id, Some(applied));
    let mut builder = sm.get_snapshot_builder().await;
    assert_eq!(
        builder.build_snapshot().await.unwrap().meta.last_log_id,
        Some(applied)
    );
}

#[tokio::test]
async fn a_store_that_holds_state_is_not_restored_into() {
    let dir = tempfile::tempdir().unwrap();
    restore(dir.path(), 7, "127.0.0.1:7007", 3, &registry_at(5))
        .await
        .unwrap();
    let again = restore(dir.path(), 7, "127.0.0.1:7007", 3, &registry_at(9))
        .await
        .unwrap_err();
    assert!(
        again.to_string().contains("already holds Raft state"),
        "{again}"
    );
    let empty = tempfile::tempdir().unwrap();
    let none = restore(empty.path(), 7, "127.0.0.1:7007", 3, &Registry::new())
        .await
        .unwrap_err();
    assert!(none.to_string().contains("no applied command"), "{none}");
}
