//! Fuzzes the audit log's readers, `verify` and `tail`, over logs the real writer made from
//! entries full of odd unicode, then damaged: a flipped byte, a cut, a record removed, swapped or
//! repeated, a record rewritten with its own hash made right again, or files of random bytes.
//!
//! Properties: an undamaged log verifies with every record, and `tail` gives back the entries
//! as written; any changed byte of `audit.log` fails `verify` (never passes); any cut fails it
//! as a truncation; removed, reordered and repeated records fail it; a rewritten record fails
//! it even with a correct hash of its own (the chain or the head catches it); random bytes are
//! read without a panic, and never verify as records.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_audit::{AuditLog, Entry, GENESIS, HEAD_FILE, Kind, LOG_FILE, Record, VerifyError};
use gatehouse_audit::{tail, verify};
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::path::Path;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig::with_cases(cases)
}

fn odd_string() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "\\PC{0,16}",
        "[\\x00-\\x1f\"\\\\\\x7f\u{85}\u{feff}\u{2028}\u{202e}é𝄞}{,:]{0,12}",
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    let kind = prop::sample::select(vec![
        Kind::ToolCall,
        Kind::Approval,
        Kind::AdminChange,
        Kind::Notification,
    ]);
    let text = prop::option::of(odd_string());
    (
        (
            kind,
            text.clone(),
            prop::collection::vec(odd_string(), 0..3),
        ),
        (text.clone(), text.clone(), text.clone()),
        (prop::option::of(any::<u64>()), odd_string(), text),
    )
        .prop_map(
            |((kind, tenant, chain), (target, decision, call_id), (len, outcome, trace))| Entry {
                kind,
                tenant,
                chain,
                target,
                decision,
                call_id,
                output_len: len,
                outcome,
                trace_id: trace,
                ..Entry::default()
            },
        )
}

/// Entries in batches, as the writer took them: each inner list is one group commit.
fn batches() -> impl Strategy<Value = Vec<Vec<Entry>>> {
    prop::collection::vec(prop::collection::vec(entry(), 1..4), 1..4)
}

/// Writes the batches with the real writer into `dir` and closes the log (its head is then at
/// the last record).
fn write(dir: &Path, node: u64, batches: &[Vec<Entry>]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let log = AuditLog::open(dir, node).expect("the log opens");
        for batch in batches {
            for entry in batch {
                log.record(entry.clone()).expect("the log takes the entry");
            }
            log.flush().await.expect("the batch is written");
        }
        log.close().await;
    });
}

fn written(batches: &[Vec<Entry>]) -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    write(dir.path(), 7, batches);
    let lines = lines(dir.path());
    (dir, lines)
}

/// The log's lines, newlines included.
fn lines(dir: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(dir.join(LOG_FILE)).expect("the log exists");
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn put_log(dir: &Path, lines: &[Vec<u8>]) {
    std::fs::write(dir.join(LOG_FILE), lines.concat()).expect("the log is written");
}

/// `record` with its fields changed by `change` and sealed again by the documented rule: the
/// SHA-256 of the line without its `hash` field, that field then appended.
fn reseal(record: &Record, change: impl FnOnce(&mut Record)) -> Vec<u8> {
    let mut changed = record.clone();
    change(&mut changed);
    changed.hash = String::new();
    let unsealed = serde_json::to_string(&changed).expect("a record serialises");
    let body = format!(
        "{}}}",
        unsealed.strip_suffix(",\"hash\":\"\"}").expect("hash last")
    );
    let hash = hex::encode(Sha256::digest(body.as_bytes()));
    format!("{},\"hash\":\"{hash}\"}}\n", &body[..body.len() - 1]).into_bytes()
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn a_written_log_verifies_and_tails_back_its_entries(batches in batches(), k in 0usize..12) {
        let (dir, lines) = written(&batches);
        let entries: Vec<Entry> = batches.concat();
        let n = entries.len() as u64;
        let verified = verify(dir.path()).expect("an undamaged log verifies");
        prop_assert_eq!((verified.records, verified.last_seq, verified.torn_bytes), (n, n, 0));
        prop_assert_eq!(lines.len() as u64, n);
        let records = tail(dir.path(), k).expect("the tail reads");
        let from = entries.len().saturating_sub(k);
        prop_assert_eq!(records.len(), entries.len() - from);
        for (record, entry) in records.iter().zip(&entries[from..]) {
            prop_assert_eq!(&record.entry, entry);
            prop_assert_eq!(record.node, 7);
        }
        if let Some(last) = records.last() {
            prop_assert_eq!(&last.hash, &verified.head_hash);
        }
    }

    #[test]
    fn any_changed_byte_of_the_log_fails_verify(
        batches in batches(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let (dir, lines) = written(&batches);
        let mut bytes = lines.concat();
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        std::fs::write(dir.path().join(LOG_FILE), &bytes).expect("the log is written");
        let result = verify(dir.path());
        prop_assert!(result.is_err(), "byte {} ^ {:#x} passed: {:?}", i, flip, result);
        let _ = tail(dir.path(), 3);
    }

    #[test]
    fn any_cut_fails_verify_as_a_truncation(batches in batches(), at in any::<prop::sample::Index>()) {
        let (dir, lines) = written(&batches);
        let bytes = lines.concat();
        let cut = at.index(bytes.len());
        std::fs::write(dir.path().join(LOG_FILE), &bytes[..cut]).expect("the log is written");
        let result = verify(dir.path());
        prop_assert!(matches!(result, Err(VerifyError::Truncated { .. })), "{:?}", result);
    }

    #[test]
    fn removed_reordered_and_repeated_records_fail_verify(
        batches in batches(),
        i in any::<prop::sample::Index>(),
        j in any::<prop::sample::Index>(),
        how in 0u8..3,
    ) {
        let (dir, mut lines) = written(&batches);
        let (i, j) = (i.index(lines.len()), j.index(lines.len()));
        match how {
            0 => {
                lines.remove(i);
            }
            1 if i != j => lines.swap(i, j),
            // A swap of a record with itself would change nothing: it is repeated instead.
            _ => lines.insert(i, lines[i].clone()),
        }
        put_log(dir.path(), &lines);
        let result = verify(dir.path());
        prop_assert!(result.is_err(), "{:?}", result);
    }

    #[test]
    fn a_rewritten_record_fails_verify_even_with_its_own_hash_right(
        batches in batches(),
        at in any::<prop::sample::Index>(),
        outcome in odd_string(),
        prev in prop::bool::ANY,
    ) {
        let (dir, mut lines) = written(&batches);
        let i = at.index(lines.len());
        let text = std::str::from_utf8(&lines[i]).expect("records are UTF-8");
        let record: Record = serde_json::from_str(text).expect("a record");
        prop_assume!(outcome != record.entry.outcome || prev);
        lines[i] = reseal(&record, |r| {
            r.entry.outcome = outcome;
            if prev {
                r.prev = GENESIS.to_owned();
                r.at_ms += 1;
            }
        });
        put_log(dir.path(), &lines);
        let result = verify(dir.path());
        prop_assert!(
            matches!(result, Err(VerifyError::BrokenLink { .. } | VerifyError::HeadMismatch { .. })),
            "{:?}",
            result
        );
    }

    #[test]
    fn random_files_never_verify_as_records(
        log in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'{')], 0..600),
        head in prop::option::of(prop_oneof![
            prop::collection::vec(any::<u8>(), 0..80),
            Just(format!("{{\"seq\":0,\"hash\":\"{GENESIS}\"}}").into_bytes()),
        ]),
        k in 0usize..8,
    ) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join(LOG_FILE), &log).expect("the log is written");
        if let Some(head) = &head {
            std::fs::write(dir.path().join(HEAD_FILE), head).expect("the head is written");
        }
        if let Ok(verified) = verify(dir.path()) {
            prop_assert_eq!(verified.records, 0);
            prop_assert_eq!(verified.torn_bytes, log.len() as u64);
        }
        if let Ok(records) = tail(dir.path(), k) {
            prop_assert!(records.len() <= k);
        }
    }
}
