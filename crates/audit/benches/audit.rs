//! Audit log throughput on this machine's disk.
//!
//! `cargo bench -p gatehouse-audit -- [RECORDS] [TASKS]` (defaults 50000 and 16): records/s for
//! fire-and-forget `record` with one `flush` at the end, and for `record_durable` from TASKS
//! tasks, each with the mean batch size (records per write and sync).

use gatehouse_audit::{AuditLog, Entry, Kind};
use std::time::Instant;

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
        output_len: Some(1024),
        outcome: "succeeded".into(),
        trace_id: Some(format!("{i:032x}")),
    }
}

fn main() {
    // Numbers only: cargo passes `--bench` too.
    let numbers: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let records = numbers.first().copied().unwrap_or(50_000);
    let tasks = numbers.get(1).copied().unwrap_or(16).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = AuditLog::open(&dir.path().join("fire"), 1).expect("the log opens");
        let start = Instant::now();
        for i in 0..records {
            log.record(entry(i)).expect("the log takes entries");
        }
        log.flush().await.expect("flush");
        report("record + flush", records, start, log.stats());
        log.close().await;

        let log = AuditLog::open(&dir.path().join("durable"), 1).expect("the log opens");
        let per_task = records / tasks;
        let start = Instant::now();
        let writers: Vec<_> = (0..tasks)
            .map(|t| {
                let log = log.clone();
                tokio::spawn(async move {
                    for i in 0..per_task {
                        log.record_durable(entry(t * per_task + i))
                            .await
                            .expect("durable");
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("a writer task");
        }
        report(
            &format!("record_durable x{tasks} tasks"),
            per_task * tasks,
            start,
            log.stats(),
        );
        log.close().await;
    });
}

fn report(name: &str, records: u64, start: Instant, stats: gatehouse_audit::Stats) {
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{name:<28} {records:>8} records  {:>10.0} records/s  mean batch {:.1} ({} batches)",
        records as f64 / secs,
        stats.records as f64 / stats.batches.max(1) as f64,
        stats.batches,
    );
}
