//! `gatehouse audit verify` and `tail`, run as the real binary against a log on disk.

use gatehouse_audit::{AuditLog, Entry, Kind};
use std::path::Path;

mod common;

use common::{gatehouse, stdout};

/// Five approval records in DATA/audit, as a node would leave them.
async fn write_log(data_dir: &Path) {
    let log = AuditLog::open(&data_dir.join("audit"), 1).unwrap();
    for i in 1..=5 {
        log.record_durable(Entry {
            kind: Kind::Approval,
            tenant: Some("acme".into()),
            chain: vec!["user:dana".into()],
            target: Some("github.create_issue".into()),
            decision: Some("approve".into()),
            call_id: Some(format!("call-{i}")),
            outcome: "succeeded".into(),
            ..Entry::default()
        })
        .await
        .unwrap();
    }
    log.close().await;
}

#[tokio::test]
async fn verify_passes_then_finds_one_changed_byte_and_names_its_seq() {
    let data = tempfile::tempdir().unwrap();
    write_log(data.path()).await;
    let data_dir = data.path().to_str().unwrap();

    let out = gatehouse(&["audit", "verify", "--data-dir", data_dir]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("audit log intact: 5 records, last seq 5, head "),
        "{}",
        stdout(&out)
    );

    let out = gatehouse(&["audit", "tail", "--data-dir", data_dir, "-n", "2", "--json"]);
    assert!(out.status.success());
    let seqs: Vec<u64> = stdout(&out)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, [4, 5]);
    // `-o jsonl` is `--json`; `-o json` is one document, an array.
    let tail_as = |format: &str| {
        gatehouse(&[
            "audit",
            "tail",
            "--data-dir",
            data_dir,
            "-n",
            "2",
            "-o",
            format,
        ])
    };
    assert_eq!(stdout(&tail_as("jsonl")), stdout(&out));
    let json = tail_as("json");
    assert_eq!(stdout(&json).lines().count(), 1, "{}", stdout(&json));
    let array: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let seqs: Vec<_> = array
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["seq"].clone())
        .collect();
    assert_eq!(seqs, [4, 5]);
    let out = gatehouse(&["audit", "tail", "--data-dir", data_dir, "-n", "1"]);
    assert!(stdout(&out).contains("call=call-5"), "{}", stdout(&out));

    let path = data.path().join("audit/audit.log");
    let mut bytes = std::fs::read(&path).unwrap();
    let third = bytes
        .split(|b| *b == b'\n')
        .take(2)
        .map(|l| l.len() + 1)
        .sum::<usize>();
    let at = third
        + bytes[third..]
            .windows(4)
            .position(|w| w == b"acme")
            .unwrap()
        + 2;
    bytes[at] = b'n';
    std::fs::write(&path, &bytes).unwrap();

    let out = gatehouse(&["audit", "verify", "--data-dir", data_dir]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stdout(&out).contains("seq 3"), "{}", stdout(&out));
}

#[test]
fn verify_without_a_log_is_an_error_not_an_empty_log() {
    let data = tempfile::tempdir().unwrap();
    let out = gatehouse(&[
        "audit",
        "verify",
        "--data-dir",
        data.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no audit log"));
}
