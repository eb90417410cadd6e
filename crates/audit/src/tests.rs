//! The log on real files in temporary directories.

use crate::record::Record;
use crate::{AuditLog, Entry, GENESIS, Kind, VerifyError, tail, verify};
use std::path::Path;
use std::time::Duration;

fn entry(i: u64) -> Entry {
    Entry {
        kind: Kind::ToolCall,
        tenant: Some("acme".into()),
        chain: vec!["user:dana".into(), "agent:demo-agent".into()],
        target: Some("github.create_issue".into()),
        mode: Some("read_only".into()),
        decision: Some("allow-reads".into()),
        call_id: Some(format!("call-{i}")),
        claim_id: None,
        args_sha256: Some("ab".repeat(32)),
        output_sha256: Some("cd".repeat(32)),
        output_len: Some(i),
        outcome: "succeeded".into(),
        trace_id: Some(format!("trace-{i}")),
    }
}

/// A log of `n` records, closed.
async fn write_log(dir: &Path, n: u64) {
    let log = AuditLog::open(dir, 1).unwrap();
    for i in 1..=n {
        log.record(entry(i)).unwrap();
    }
    log.close().await;
}

fn lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("audit.log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(dir: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join("audit.log"), text).unwrap();
}

#[tokio::test]
async fn the_chain_continues_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 3).await;
    let log = AuditLog::open(dir.path(), 1).unwrap();
    assert_eq!(log.record_durable(entry(4)).await.unwrap(), 4);
    log.close().await;

    let records = tail(dir.path(), 10).unwrap();
    let seqs: Vec<u64> = records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(records[0].prev, GENESIS);
    assert_eq!(records[3].prev, records[2].hash);
    assert_eq!(verify(dir.path()).unwrap().last_seq, 4);
}

#[tokio::test]
async fn verify_passes_on_an_intact_log() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let verified = verify(dir.path()).unwrap();
    assert_eq!(verified.records, 5);
    assert_eq!(verified.last_seq, 5);
    assert_eq!(verified.head_hash, tail(dir.path(), 1).unwrap()[0].hash);
    assert_eq!(verified.torn_bytes, 0);
}

#[tokio::test]
async fn verify_finds_a_changed_field() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let mut log = lines(dir.path());
    log[2] = log[2].replace("\"outcome\":\"succeeded\"", "\"outcome\":\"failed\"");
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(
        matches!(err, VerifyError::Changed { line: 3, seq: 3 }),
        "{err}"
    );
    assert!(err.to_string().contains("seq 3"), "{err}");
}

#[tokio::test]
async fn verify_finds_a_replaced_record_with_a_recomputed_hash() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let mut log = lines(dir.path());
    let old: Record = serde_json::from_str(&log[2]).unwrap();
    let mut forged = old.entry.clone();
    forged.outcome = "failed".into();
    let (_, line) = Record::seal(old.seq, old.at_ms, old.node, &old.prev, forged);
    log[2] = String::from_utf8(line).unwrap().trim_end().to_owned();
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(
        matches!(err, VerifyError::BrokenLink { line: 4, seq: 4 }),
        "{err}"
    );
}

#[tokio::test]
async fn verify_finds_a_removed_middle_record() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let mut log = lines(dir.path());
    log.remove(2);
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Removed {
                line: 3,
                expected: 3,
                found: 4
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn verify_finds_two_swapped_records() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let mut log = lines(dir.path());
    log.swap(1, 2);
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Reordered {
                line: 2,
                expected: 2,
                found: 3
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn verify_finds_a_truncated_tail_via_the_head() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let log = lines(dir.path());
    write_lines(dir.path(), &log[..3]);
    let err = verify(dir.path()).unwrap_err();
    assert!(
        matches!(
            err,
            VerifyError::Truncated {
                last_seq: 3,
                head_seq: 5
            }
        ),
        "{err}"
    );
    // Nor will a node write on after it.
    assert!(AuditLog::open(dir.path(), 1).is_err());
}

#[tokio::test]
async fn verify_finds_a_rewritten_end_of_the_chain_via_the_head() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 5).await;
    let mut log = lines(dir.path());
    // Records 4 and 5 forged with hashes and links recomputed: only the head can tell.
    let mut prev: Record = serde_json::from_str(&log[2]).unwrap();
    for line in &mut log[3..] {
        let old: Record = serde_json::from_str(line).unwrap();
        let mut forged = old.entry.clone();
        forged.outcome = "failed".into();
        let (record, bytes) = Record::seal(old.seq, old.at_ms, old.node, &prev.hash, forged);
        *line = String::from_utf8(bytes).unwrap().trim_end().to_owned();
        prev = record;
    }
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(matches!(err, VerifyError::HeadMismatch { seq: 5 }), "{err}");
}

#[tokio::test]
async fn verify_finds_garbage() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 3).await;
    let mut log = lines(dir.path());
    log.insert(1, "hello".into());
    write_lines(dir.path(), &log);
    let err = verify(dir.path()).unwrap_err();
    assert!(matches!(err, VerifyError::Garbage { line: 2, .. }), "{err}");
}

#[tokio::test]
async fn a_torn_last_line_is_cut_on_open_and_the_chain_continues() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 3).await;
    let path = dir.path().join("audit.log");
    let mut bytes = std::fs::read(&path).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(b"{\"seq\":4,\"at_ms\":17");
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(verify(dir.path()).unwrap().torn_bytes, 19);

    let log = AuditLog::open(dir.path(), 1).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole as u64);
    assert_eq!(log.record_durable(entry(4)).await.unwrap(), 4);
    log.close().await;
    let verified = verify(dir.path()).unwrap();
    assert_eq!((verified.records, verified.torn_bytes), (4, 0));
}

#[tokio::test]
async fn open_refuses_a_damaged_last_record_and_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    write_log(dir.path(), 3).await;
    let mut log = lines(dir.path());
    log[2] = log[2].replace("acme", "acne");
    write_lines(dir.path(), &log);
    let err = AuditLog::open(dir.path(), 1).unwrap_err();
    assert!(err.to_string().contains("line 3"), "{err}");
}

#[tokio::test]
async fn record_durable_returns_only_after_the_bytes_are_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 7).unwrap();
    log.record(entry(1)).unwrap();
    let seq = log.record_durable(entry(2)).await.unwrap();
    assert_eq!(seq, 2);
    let text = std::fs::read_to_string(dir.path().join("audit.log")).unwrap();
    let last: Record = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!((last.seq, last.node), (2, 7));
    assert_eq!(last.entry, entry(2));
    // The head follows once the batch is answered for; close waits for it.
    log.close().await;
    let head = std::fs::read_to_string(dir.path().join("audit.head")).unwrap();
    assert!(head.contains(&last.hash), "{head}");
}

fn head_hash(dir: &Path) -> String {
    crate::files::read_head(dir).unwrap().unwrap().hash
}

#[tokio::test]
async fn the_head_moves_at_most_once_per_interval_and_catches_up_after_it() {
    let dir = tempfile::tempdir().unwrap();
    // An interval no test run outlasts: the head stays where the first batch put it.
    let log = AuditLog::open_with(dir.path(), 1, Duration::from_secs(3600)).unwrap();
    log.record_durable(entry(1)).await.unwrap();
    log.flush().await.unwrap();
    let first = tail(dir.path(), 1).unwrap()[0].hash.clone();
    assert_eq!(
        head_hash(dir.path()),
        first,
        "the first batch moves the head"
    );
    for i in 2..=5 {
        log.record_durable(entry(i)).await.unwrap();
    }
    log.flush().await.unwrap();
    assert_eq!(
        head_hash(dir.path()),
        first,
        "later batches within the interval leave it"
    );
    // Close brings it to the last synced record.
    log.close().await;
    let last = tail(dir.path(), 1).unwrap()[0].hash.clone();
    assert_eq!(head_hash(dir.path()), last);

    // With a short interval, a log that goes quiet has its head caught up without a close.
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open_with(dir.path(), 1, Duration::from_millis(50)).unwrap();
    for i in 1..=3 {
        log.record_durable(entry(i)).await.unwrap();
    }
    let last = tail(dir.path(), 1).unwrap()[0].hash.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while head_hash(dir.path()) != last {
        assert!(
            std::time::Instant::now() < deadline,
            "the head never caught up with the last batch"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log.close().await;
}

/// Lets the writer take what is queued and start lingering (a test runtime of one thread).
async fn let_the_writer_run() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_durable_record_ends_the_linger_and_takes_the_lingering_records_along() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 1).unwrap();
    let started = tokio::time::Instant::now();
    log.record(entry(1)).unwrap();
    let_the_writer_run().await;
    log.record(entry(2)).unwrap();
    assert_eq!(log.stats().batches, 0, "the first record lingers");
    let seq = log.record_durable(entry(3)).await.unwrap();
    assert_eq!(seq, 3);
    assert!(
        started.elapsed() < crate::log::LINGER,
        "the durable record waited out the linger: {:?}",
        started.elapsed()
    );
    assert_eq!(
        (log.stats().batches, log.stats().records),
        (1, 3),
        "one batch, one sync"
    );
    log.close().await;
}

#[tokio::test(start_paused = true)]
async fn records_queued_while_a_batch_lingers_join_it_however_they_come() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 1).unwrap();
    // A durable record answered before leaves nothing behind that cuts the next linger short.
    log.record_durable(entry(1)).await.unwrap();
    log.record(entry(2)).unwrap();
    let_the_writer_run().await;
    for i in 3..=5 {
        tokio::time::sleep(crate::log::LINGER / 8).await;
        log.record(entry(i)).unwrap();
    }
    assert_eq!(
        log.stats().batches,
        1,
        "the second batch is still lingering"
    );
    tokio::time::sleep(crate::log::LINGER).await;
    let_the_writer_run().await;
    log.flush().await.unwrap();
    assert_eq!(
        (log.stats().batches, log.stats().records),
        (2, 5),
        "records 2 to 5 went in one batch"
    );
    log.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_records_get_gapless_seqs() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 1).unwrap();
    let writers: Vec<_> = (0..8u64)
        .map(|w| {
            let log = log.clone();
            tokio::spawn(async move {
                for i in 0..500 {
                    log.record(entry(w * 1000 + i)).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    log.flush().await.unwrap();
    let verified = verify(dir.path()).unwrap();
    assert_eq!((verified.records, verified.last_seq), (4000, 4000));
    let mut calls: Vec<_> = tail(dir.path(), 4000)
        .unwrap()
        .into_iter()
        .map(|r| r.entry.call_id.unwrap())
        .collect();
    calls.sort();
    calls.dedup();
    assert_eq!(calls.len(), 4000);
    log.close().await;
}

#[tokio::test]
async fn records_after_close_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 1).unwrap();
    log.record(entry(1)).unwrap();
    log.close().await;
    assert!(log.record(entry(2)).is_err());
    assert!(log.record_durable(entry(3)).await.is_err());
    assert_eq!(verify(dir.path()).unwrap().records, 1);
}

#[tokio::test]
async fn a_write_the_disk_refuses_fails_the_writer_and_every_later_entry_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // The head moves after every batch here, so the failed move comes right after entry 2.
    let log = AuditLog::open_with(dir.path(), 1, Duration::ZERO).unwrap();
    log.record_durable(entry(1)).await.unwrap();
    // Answered after the head for entry 1 has moved (the writer takes one thing at a time).
    log.flush().await.unwrap();
    // The head cannot be moved: its temporary file's name is taken by a directory.
    std::fs::create_dir(dir.path().join("audit.head.tmp")).unwrap();
    // The record itself is synced before the head moves, so it is answered for; the failed
    // head move fails the writer before it takes anything else.
    assert_eq!(log.record_durable(entry(2)).await.unwrap(), 2);
    assert!(log.flush().await.is_err());
    // From now on nothing is taken, before it is queued: no caller acts on a lost record.
    assert!(log.writable().is_err());
    assert!(log.record(entry(3)).is_err());
    assert!(log.record_durable(entry(4)).await.is_err());
    log.close().await;
    std::fs::remove_dir(dir.path().join("audit.head.tmp")).unwrap();
    // What reached the disk is intact; a new open carries on from it.
    let reopened = AuditLog::open(dir.path(), 1).unwrap();
    reopened.writable().unwrap();
    reopened.record_durable(entry(5)).await.unwrap();
    reopened.close().await;
    let verified = verify(dir.path()).unwrap();
    assert_eq!((verified.records, verified.last_seq), (3, 3));
}

#[tokio::test]
async fn an_injected_write_failure_takes_the_same_path() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path(), 1).unwrap();
    log.record_durable(entry(1)).await.unwrap();
    log.inject_write_failure("disk full (injected)");
    let refused = log.record(entry(2)).unwrap_err();
    assert!(refused.to_string().contains("disk full"), "{refused}");
    assert!(log.record_durable(entry(3)).await.is_err());
    assert!(log.flush().await.is_err());
    log.close().await;
    assert_eq!(verify(dir.path()).unwrap().records, 1);
}

#[test]
fn a_record_without_a_claim_id_written_before_it_existed_still_reads() {
    let (record, line) = Record::seal(1, 5, 1, GENESIS, entry(1));
    let text = String::from_utf8(line).unwrap();
    let old = text.replace("\"claim_id\":null,", "");
    assert_ne!(old, text);
    let read: Record = serde_json::from_str(&old).unwrap();
    assert_eq!(read.entry, record.entry);
}
