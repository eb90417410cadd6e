//! Durability across a clean reopen: the log, vote, committed and purged ids; the state
//! machine, which comes back as its stored snapshot (openraft re-applies the log after it), or
//! for a store written before applying stopped writing, as its snapshot plus the commands it
//! kept; and a snapshot installed on a fresh store.

mod support;

use gatehouse_raft_store::{StateMachineStore, TypeConfig, open};
use gatehouse_registry::{ApplyError, Command, Kind, Proposal, ResourceKey};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{blank_ent, log_id, membership_ent};
use openraft::{Entry, EntryPayload, RaftLogReader, RaftSnapshotBuilder, Vote};
use std::collections::BTreeSet;
use support::{has_tenant, put_tenant};
use uuid::Uuid;

fn normal(term: u64, index: u64, proposal: Proposal) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(proposal),
    }
}

fn voters(ids: &[u64]) -> Vec<BTreeSet<u64>> {
    vec![ids.iter().copied().collect()]
}

/// sled itself on the store's directory, once the store just dropped has let go of its lock.
fn sled_db(dir: &std::path::Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match sled::open(dir) {
            Ok(db) => return db,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("opening sled: {e}"),
        }
    }
}

fn digest(sm: &StateMachineStore) -> String {
    sm.registry().read().digest()
}

/// Entry 6's proposal: a delete of a tenant that does not exist, which the registry refuses.
fn delete_nobody() -> Proposal {
    Proposal {
        request_id: Uuid::from_u128(6),
        at: 6,
        command: Command::Delete {
            keys: vec![ResourceKey {
                kind: Kind::Tenant,
                tenant: None,
                name: "nobody".into(),
            }],
        },
    }
}

/// Membership at 1, a blank at 2, tenants at 3..=5 and a refused delete at 6.
async fn apply_first(sm: &mut StateMachineStore) {
    let results = sm
        .apply([
            membership_ent::<TypeConfig>(1, 1, 1, voters(&[1])),
            blank_ent::<TypeConfig>(1, 1, 2),
            normal(1, 3, put_tenant("acme", 3)),
            normal(1, 4, put_tenant("globex", 4)),
            normal(1, 5, put_tenant("initech", 5)),
            normal(1, 6, delete_nobody()),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 6);
    assert!(results[..5].iter().all(Result::is_ok), "{results:?}");
    assert!(
        matches!(results[5], Err(ApplyError::NotFound { .. })),
        "a refusal is an answer, not a storage error: {:?}",
        results[5]
    );
}

#[tokio::test]
async fn log_vote_committed_and_purge_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let entries: Vec<Entry<TypeConfig>> = (1..=8)
        .map(|i| normal(1, i, put_tenant(&format!("t{i}"), u128::from(i))))
        .collect();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append([blank_ent::<TypeConfig>(1, 1, 0)])
            .await
            .unwrap();
        log.blocking_append(entries.clone()).await.unwrap();
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        log.save_committed(Some(log_id(1, 1, 6))).await.unwrap();
        log.purge(log_id(1, 1, 2)).await.unwrap();
    }

    let (mut log, _sm) = open(dir.path()).unwrap();
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(1, 1))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1, 6)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 8)));
    let read = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(read, entries[2..], "entries 3..=8, exactly as appended");

    log.truncate(log_id(1, 1, 6)).await.unwrap();
    drop((log, _sm));

    let (mut log, _sm) = open(dir.path()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 5)));
    let mut reader = log.get_log_reader().await;
    assert_eq!(
        reader.try_get_log_entries(3..).await.unwrap(),
        entries[2..5]
    );

    // Everything purged: the last log id is the purged one.
    log.purge(log_id(1, 1, 5)).await.unwrap();
    drop((log, reader, _sm));
    let (mut log, _sm) = open(dir.path()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 5)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 5)));
    assert!(log.try_get_log_entries(..).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_committed_id_past_the_last_entry_on_disk_reads_as_the_last_entry() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        let entries: Vec<Entry<TypeConfig>> = (1..=8)
            .map(|i| normal(1, i, put_tenant(&format!("t{i}"), u128::from(i))))
            .collect();
        log.blocking_append(entries).await.unwrap();
        // As after a power cut that kept the unsynced id but not a follower's last appends.
        log.save_committed(Some(log_id(1, 1, 12))).await.unwrap();
    }
    let (mut log, _sm) = open(dir.path()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1, 8)));
}

#[tokio::test]
async fn applying_writes_nothing_and_a_reopened_state_machine_waits_for_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_log, mut sm) = open(dir.path()).unwrap();
        apply_first(&mut sm).await;
        assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 1, 6)));
    }
    // No snapshot was stored: the state machine starts empty and openraft re-applies the log
    // from its start.
    let (_log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, None);
    assert_eq!(*sm.applied_watch().borrow(), 0);
    assert!(!has_tenant(&sm.registry().read(), "acme"));
}

#[tokio::test]
async fn a_reopened_state_machine_is_its_snapshot_and_reapplying_the_rest_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let later = || {
        [
            normal(2, 7, put_tenant("umbrella", 7)),
            membership_ent::<TypeConfig>(2, 1, 8, voters(&[1, 2])),
            normal(2, 9, put_tenant("hooli", 9)),
        ]
    };
    let (at_snapshot, before, applied, snapshot_meta) = {
        let (_log, mut sm) = open(dir.path()).unwrap();
        apply_first(&mut sm).await;
        let at_snapshot = (digest(&sm), sm.applied_state().await.unwrap());
        let snapshot = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 1, 6)));
        sm.apply(later()).await.unwrap();
        (
            at_snapshot,
            digest(&sm),
            sm.applied_state().await.unwrap(),
            snapshot.meta,
        )
    };

    let (_log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(
        (digest(&sm), sm.applied_state().await.unwrap()),
        at_snapshot
    );
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, snapshot_meta);
    // What openraft does at boot: the committed entries after the snapshot, again.
    sm.apply(later()).await.unwrap();
    assert_eq!(digest(&sm), before);
    assert_eq!(sm.applied_state().await.unwrap(), applied);
    assert_eq!(applied.1.log_id(), &Some(log_id(2, 1, 8)));

    // A second snapshot replaces the first and gets a new id, also after a reopen.
    let second = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(second.meta.last_log_id, Some(log_id(2, 1, 9)));
    assert_ne!(second.meta.snapshot_id, snapshot_meta.snapshot_id);
    drop((_log, sm));
    let (_log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(digest(&sm), before);
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, second.meta);
}

/// A store from before applying stopped writing: its state tree holds every applied command
/// under `cmd/<index>`, the applied log id and the membership. It comes back from them, and
/// its first snapshot drops them.
#[tokio::test]
async fn a_store_that_kept_its_commands_comes_back_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let (_log, mut sm) = open(dir.path()).unwrap();
        apply_first(&mut sm).await;
        digest(&sm)
    };
    {
        let db = sled_db(dir.path());
        let state = db.open_tree("state").unwrap();
        let commands = [
            (3, put_tenant("acme", 3)),
            (4, put_tenant("globex", 4)),
            (5, put_tenant("initech", 5)),
        ];
        for (index, proposal) in commands {
            let mut key = b"cmd/".to_vec();
            key.extend_from_slice(&u64::to_be_bytes(index));
            state
                .insert(key, serde_json::to_vec(&proposal).unwrap())
                .unwrap();
        }
        let applied = Some(log_id(1, 1, 5));
        let membership = openraft::StoredMembership::new(
            Some(log_id(1, 1, 1)),
            openraft::Membership::<u64, openraft::BasicNode>::new(voters(&[1]), None),
        );
        state
            .insert("applied", serde_json::to_vec(&applied).unwrap())
            .unwrap();
        state
            .insert("membership", serde_json::to_vec(&membership).unwrap())
            .unwrap();
        db.flush().unwrap();
    }
    let (_log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 1, 5)));
    assert!(has_tenant(&sm.registry().read(), "initech"));
    // Entry 6 (a refused delete) comes again from the log, as openraft re-applies it.
    sm.apply([normal(1, 6, delete_nobody())]).await.unwrap();
    assert_eq!(digest(&sm), before);
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    drop((_log, sm));
    let db = sled_db(dir.path());
    let state = db.open_tree("state").unwrap();
    assert_eq!(
        state.scan_prefix(b"cmd/").count(),
        0,
        "the snapshot dropped the commands"
    );
}

#[tokio::test]
async fn installed_snapshot_gives_the_source_state() {
    let source_dir = tempfile::tempdir().unwrap();
    let (_source_log, mut source) = open(source_dir.path()).unwrap();
    apply_first(&mut source).await;
    let snapshot = source
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    {
        let (_log, mut sm) = open(dir.path()).unwrap();
        let mut watch = sm.applied_watch();
        let mut received = sm.begin_receiving_snapshot().await.unwrap();
        *received = *snapshot.snapshot;
        sm.install_snapshot(&snapshot.meta, received).await.unwrap();
        assert_eq!(digest(&sm), digest(&source));
        assert_eq!(
            sm.applied_state().await.unwrap(),
            source.applied_state().await.unwrap()
        );
        assert!(watch.has_changed().unwrap());
        assert_eq!(*watch.borrow_and_update(), 6);
        assert_eq!(
            sm.get_current_snapshot().await.unwrap().unwrap().meta,
            snapshot.meta
        );
    }
    let (_log, mut sm) = open(dir.path()).unwrap();
    assert_eq!(digest(&sm), digest(&source));
    assert_eq!(
        sm.applied_state().await.unwrap(),
        source.applied_state().await.unwrap()
    );
}

#[tokio::test]
async fn watchers_see_each_applied_proposal() {
    let dir = tempfile::tempdir().unwrap();
    let (_log, mut sm) = open(dir.path()).unwrap();
    let mut events = sm.subscribe();
    let mut watch = sm.applied_watch();
    apply_first(&mut sm).await;
    assert_eq!(*watch.borrow_and_update(), 6);
    let mut seen = Vec::new();
    while let Ok(applied) = events.try_recv() {
        seen.push((applied.index, applied.result.is_ok()));
    }
    assert_eq!(seen, [(3, true), (4, true), (5, true), (6, false)]);
}
