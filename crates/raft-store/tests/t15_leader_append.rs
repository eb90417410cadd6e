//! The leader's own append is acknowledged once written and its sync runs beside the followers';
//! the state machine applies nothing before it is on this node's disk; every other append
//! (a follower's, or any before this process saved a vote of its own) is acknowledged only once
//! synced; a leader stepping down syncs what it acknowledged first; and the synced mark never
//! names an entry a truncation replaced.

use gatehouse_raft_store::{LogStore, LogSynced, StateMachineStore, SyncsHeld, TypeConfig, open};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{blank_ent, log_id};
use openraft::{Entry, Vote};
use std::path::Path;
use std::time::Duration;
use tempfile::TempDir;

/// This node.
const ME: u64 = 1;

/// A wait long enough that an append or apply that could finish would have.
const SETTLE: Duration = Duration::from_millis(300);

fn blanks(term: u64, leader: u64, range: std::ops::RangeInclusive<u64>) -> Vec<Entry<TypeConfig>> {
    range
        .map(|i| blank_ent::<TypeConfig>(term, leader, i))
        .collect()
}

/// Runs `work` while `held` keeps the log's syncs back: `None` if it finished meanwhile, else
/// what it gives once the syncs are let go.
async fn after_the_sync<T>(held: SyncsHeld, work: impl Future<Output = T>) -> Option<T> {
    tokio::pin!(work);
    if tokio::time::timeout(SETTLE, &mut work).await.is_ok() {
        return None;
    }
    drop(held);
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .ok()
}

fn store(dir: &Path) -> (LogStore, StateMachineStore) {
    let (log, state_machine) = open(dir).unwrap();
    (log.leading_as(ME), state_machine)
}

/// A fresh store whose node leads: its own vote, granted, saved in this process.
async fn leading() -> (TempDir, LogStore, StateMachineStore, LogSynced) {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, state_machine) = store(dir.path());
    log.save_vote(&Vote::new_committed(1, ME)).await.unwrap();
    let synced = log.synced();
    (dir, log, state_machine, synced)
}

#[tokio::test]
async fn the_leaders_own_append_is_acknowledged_before_its_sync_and_applied_only_after() {
    let (_dir, mut log, mut state_machine, synced) = leading().await;

    let held = log.hold_syncs();
    tokio::time::timeout(SETTLE, log.blocking_append(blanks(1, ME, 1..=3)))
        .await
        .expect("the leader's own append is acknowledged while its sync is held")
        .unwrap();
    assert_eq!(synced.now().through, None, "nothing is synced yet");

    // Applying waits for the sync.
    let results = after_the_sync(held, state_machine.apply(blanks(1, ME, 1..=3)))
        .await
        .expect("an entry was applied before it was on this node's disk")
        .unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(synced.now().through, Some(log_id(1, ME, 3)));
}

#[tokio::test]
async fn every_other_append_is_acknowledged_only_once_synced() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _state_machine) = store(dir.path());
    let synced = log.synced();

    // (vote saved, entries, what they are)
    let cases = [
        (None, blanks(1, ME, 1..=1), "no vote saved in this process"),
        (
            Some(Vote::new(2, ME)),
            blanks(2, ME, 2..=2),
            "a vote of its own not yet granted",
        ),
        (
            Some(Vote::new_committed(3, 2)),
            blanks(3, 2, 3..=3),
            "a follower's append",
        ),
        (
            Some(Vote::new_committed(4, 2)),
            blanks(1, ME, 4..=4),
            "its own old entries sent back by a later leader",
        ),
        (
            Some(Vote::new_committed(5, ME)),
            blanks(1, ME, 5..=5),
            "entries of an older term while it leads",
        ),
    ];
    for (vote, entries, case) in cases {
        if let Some(vote) = vote {
            log.save_vote(&vote).await.unwrap();
        }
        let last = entries.last().unwrap().log_id;
        let held = log.hold_syncs();
        let acknowledged = after_the_sync(held, log.blocking_append(entries)).await;
        assert!(
            matches!(acknowledged, Some(Ok(()))),
            "{case}: acknowledged before its sync, or never"
        );
        assert_eq!(synced.now().through, Some(last), "{case}");
    }
}

#[tokio::test]
async fn a_vote_read_back_after_a_restart_does_not_make_appends_the_leaders() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _state_machine) = store(dir.path());
        log.save_vote(&Vote::new_committed(1, ME)).await.unwrap();
    }
    let (mut log, _state_machine) = store(dir.path());
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(1, ME))
    );
    let held = log.hold_syncs();
    let acknowledged = after_the_sync(held, log.blocking_append(blanks(1, ME, 1..=1))).await;
    assert!(
        matches!(acknowledged, Some(Ok(()))),
        "acknowledged before its sync on the strength of a vote from before the restart"
    );
}

#[tokio::test]
async fn the_synced_mark_never_names_an_entry_a_truncation_replaced() {
    let (_dir, mut log, _state_machine, synced) = leading().await;

    let held = log.hold_syncs();
    log.blocking_append(blanks(1, ME, 1..=5)).await.unwrap();
    // The log cut from index 3 on (as openraft does when a leader's log differs; a leader
    // stepping down syncs first, so here, under its own vote, the store is asked directly):
    // the truncation syncs what it keeps.
    log.truncate(log_id(1, ME, 3)).await.unwrap();
    assert_eq!(synced.now().through, Some(log_id(1, ME, 2)));
    // New entries at 3 and 4, while the sync of the old 1..=5 still waits.
    log.blocking_append(blanks(1, ME, 3..=4)).await.unwrap();
    drop(held);
    synced.wait_for_written().await.unwrap();
    // The old append's sync named index 5, which no longer exists.
    assert_eq!(synced.now().through, Some(log_id(1, ME, 4)));
}

#[tokio::test]
async fn what_a_restart_reads_counts_as_synced() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _state_machine) = store(dir.path());
        log.save_vote(&Vote::new_committed(1, ME)).await.unwrap();
        let _held = log.hold_syncs();
        // Written, acknowledged, never synced by the thread: as a process killed right after.
        log.blocking_append(blanks(1, ME, 1..=2)).await.unwrap();
    }
    let (log, _state_machine) = store(dir.path());
    assert_eq!(log.synced().now().through, Some(log_id(1, ME, 2)));
}

#[tokio::test]
async fn a_leader_stepping_down_syncs_what_it_acknowledged_before_it_takes_the_new_vote() {
    let (_dir, mut log, _state_machine, synced) = leading().await;
    let held = log.hold_syncs();
    log.blocking_append(blanks(1, ME, 1..=2)).await.unwrap();

    // A later leader's vote: it waits, so no answer under it claims an entry not on disk.
    let saved = after_the_sync(held, log.save_vote(&Vote::new_committed(2, 2))).await;
    assert!(
        matches!(saved, Some(Ok(()))),
        "the new vote was taken with acknowledged entries not yet on disk"
    );
    assert_eq!(synced.now().through, Some(log_id(1, ME, 2)));
}
