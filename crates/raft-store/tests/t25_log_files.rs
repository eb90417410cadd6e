//! The Raft log's own files: appends write into space filled with zeros ahead (written blocks,
//! not space reserved for them), whose zeros a reopen reads as the end of the records; what a crash mid-append leaves is cut off and nothing
//! before it is lost, nor does anything a truncation cut come back; damage anywhere else
//! refuses the store, and a store whose log is still in sled moves it into the files once,
//! whole.

use gatehouse_raft_store::{TypeConfig, open};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::{blank_ent, log_id};
use openraft::{Entry, RaftLogReader};
use std::os::unix::fs::FileExt;
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

/// Where the records in a segment end: at its length, or at the first all-zero header of the
/// space allocated ahead.
fn records_end(segment: &Path) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    let mut at = 0;
    while at + 16 <= bytes.len() && bytes[at..at + 16] != [0; 16] {
        at += 16 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    at as u64
}

#[tokio::test]
async fn a_torn_last_record_is_cut_and_every_entry_before_it_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=5)).await.unwrap();
    }
    // A crash mid-append: a header promising 1,000 bytes and only 10 of them, where the next
    // record would have gone.
    let segment = the_segment(dir.path());
    let end = records_end(&segment);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    let mut torn = 1000u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[7u8; 22]);
    file.write_all_at(&torn, end).unwrap();
    drop(file);

    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        assert_eq!(
            log.get_log_state().await.unwrap().last_log_id,
            Some(log_id(1, 1, 5))
        );
        let after = std::fs::read(&segment).unwrap();
        assert!(
            after[end as usize..].iter().all(|&b| b == 0),
            "the torn bytes are still there"
        );
        log.blocking_append(blanks(6..=6)).await.unwrap();
    }
    assert_eq!(indexes(dir.path()).await, vec![1, 2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn appends_write_into_space_allocated_ahead_and_a_reopen_finds_where_they_end() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=3)).await.unwrap();
        let segment = the_segment(dir.path());
        let allocated = std::fs::metadata(&segment).unwrap().len();
        let written = records_end(&segment);
        assert!(
            allocated > written,
            "{allocated} bytes for {written} of records: nothing allocated ahead"
        );
        log.blocking_append(blanks(4..=6)).await.unwrap();
        assert_eq!(
            std::fs::metadata(&segment).unwrap().len(),
            allocated,
            "an append grew the file"
        );
    }
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(7..=7)).await.unwrap();
    }
    assert_eq!(indexes(dir.path()).await, (1..=7).collect::<Vec<_>>());
}

/// The extents `filefrag -v` lists for `file` that are reserved but not written; `None` where
/// `filefrag` is missing or the file system cannot say (no FIEMAP).
fn unwritten_extents(file: &Path) -> Option<Vec<String>> {
    let out = std::process::Command::new("filefrag")
        .arg("-v")
        .arg(file)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("logical_offset") {
        return None;
    }
    Some(
        text.lines()
            .filter(|line| line.contains("unwritten"))
            .map(str::to_owned)
            .collect(),
    )
}

#[tokio::test]
async fn the_space_ahead_of_the_records_is_written_so_a_sync_after_an_append_writes_data_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _sm) = open(dir.path()).unwrap();
    log.blocking_append(blanks(1..=3)).await.unwrap();
    let segment = the_segment(dir.path());
    assert!(
        std::fs::metadata(&segment).unwrap().len() > records_end(&segment),
        "nothing ahead of the records"
    );
    let Some(unwritten) = unwritten_extents(&segment) else {
        eprintln!(
            "skipped: `filefrag -v` cannot list {}'s extents here (no filefrag, or no FIEMAP)",
            segment.display()
        );
        return;
    };
    assert!(
        unwritten.is_empty(),
        "space reserved but not written ahead of the records: every append into it changes the \
         file's extents, which its sync must write too: {unwritten:?}"
    );
}

#[tokio::test]
async fn entries_cut_by_a_truncation_stay_gone_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=10)).await.unwrap();
        log.truncate(log_id(1, 1, 5)).await.unwrap();
        let later = (5..=6).map(|i| blank_ent::<TypeConfig>(2, 1, i));
        log.blocking_append(later).await.unwrap();
    }
    let (mut log, _sm) = open(dir.path()).unwrap();
    let entries = log.try_get_log_entries(0..).await.unwrap();
    let ids: Vec<_> = entries.iter().map(|e| e.log_id).collect();
    let mut expected: Vec<_> = (1..=4).map(|i| log_id(1, 1, i)).collect();
    expected.extend((5..=6).map(|i| log_id(2, 1, i)));
    assert_eq!(ids, expected);
}

#[tokio::test]
async fn zeros_where_a_record_should_start_with_records_after_them_refuse_to_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _sm) = open(dir.path()).unwrap();
        log.blocking_append(blanks(1..=5)).await.unwrap();
    }
    // The second record's header wiped: the three records after it would be read as free
    // space if zeros simply ended the log.
    let segment = the_segment(dir.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    let first_len = 16 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    bytes[first_len..first_len + 16].fill(0);
    std::fs::write(&segment, &bytes).unwrap();

    let error = open(dir.path()).map(drop).unwrap_err().to_string();
    assert!(error.contains("empty record header"), "{error}");
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
