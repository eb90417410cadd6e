//! The Raft log's own files: what a crash mid-append leaves is cut off and nothing before it is
//! lost, damage anywhere else refuses the store, and a store whose log is still in sled moves
//! it into the files once, whole.

use gatehouse_raft_store::{TypeConfig, open};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{blank_ent, log_id};
use openraft::{Entry, RaftLogReader};
use std::io::Write;
use std::path::{Path, PathBuf};

fn blanks(range: std::ops::RangeInclusive<u64>) -> Vec<Entry<TypeConfig>> {
    range.map(|i| blank_ent::<TypeConfig>(1, 1, i)).collect()
}

fn the_segment(dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir.join("raft-log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    assert_eq!(segments.len(), 1, "{segments:?}");
    segments.pop().unwrap()
}

/// Flips one byte of the second record's payload, a few bytes past the first record.
fn damage_the_second_record(dir: &Path) {
    let segment = the_segment(dir);
    let mut bytes = std::fs::read(&segment).unwrap();
    let first_len = 16 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    bytes[first_len + 20] ^= 0x55;
    std::fs::write(&segment, &bytes).unwrap();
}

async fn indexes(dir: &Path) -> Vec<u64> {
    let (mut log, _sm) = open(dir).unwrap();
    let entries = log.try_get_log_entries(0..).await.unwrap();
    entries.iter().map(|e| e.log_id.index).collect()
}

#[tokio::test]
async fn a_torn_last_record_is_cut_and_every_entry_before_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=5)).await.unwrap();
    }
    // A crash mid-append: a header promising 1,000 bytes and only 10 of them.
    let segment = the_segment(dir.path());
    let whole = std::fs::metadata(&segment).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    file.write_all(&1000u32.to_le_bytes()).unwrap();
    file.write_all(&[7u8; 22]).unwrap();
    drop(file);

    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 1, 5))
        );
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), whole);
        log.blocking_append(blanks(6..=6)).await.unwrap();
    }
    assert_eq!(indexes(dir.path()).await, vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn a_damaged_record_with_entries_after_it_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=5)).await.unwrap();
        damage_the_second_record(dir.path());
        // The running store reads entries it just appended from memory, as appended: the
        // damage is what the next open finds.
        let entries = log.try_get_log_entries(1..=5).await.unwrap();
        assert_eq!(entries, blanks(1..=5));
    }

    let error = open(dir.path()).map(drop).unwrap_err().to_string();
    assert!(error.contains("fails its checksum"), "{error}");
}

#[tokio::test]
async fn a_log_still_in_sled_moves_into_the_files_once() {
    let dir = tempfile::tempdir().unwrap();
    {
        // How a store kept its log before it had files: JSON entries keyed by big-endian index.
        let db = sled::open(dir.path()).unwrap();
        let logs = db.open_tree("logs").unwrap();
        for entry in blanks(1..=4) {
            logs.insert(
                entry.log_id.index.to_be_bytes(),
                serde_json::to_vec(&entry).unwrap(),
            )
            .unwrap();
        }
        db.flush().unwrap();
    }
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 1, 4))
        );
        log.blocking_append(blanks(5..=5)).await.unwrap();
    }
    assert_eq!(indexes(dir.path()).await, vec![1, 2, 3, 4, 5]);
    let db = sled::open(dir.path()).unwrap();
    assert!(db.open_tree("logs").unwrap().is_empty());
}
