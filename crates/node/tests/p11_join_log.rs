//! What an operator reads while a node joins: real `gatehouse serve` processes with the node's
//! default log. A join is normal work: it says once, at INFO, that the learner catches up, and
//! prints no WARN or ERROR on either side, however many Raft messages the joiner refused while
//! its join was still on its way back.

use std::path::Path;
use std::time::Duration;

mod common;

use common::{cli, ok, serve_default_log, status_until};

/// The node's log without its colour codes.
fn log_of(dir: &Path, id: u64) -> String {
    let coloured =
        std::fs::read_to_string(dir.join(format!("node-{id}.log"))).expect("the node's log");
    let mut plain = String::with_capacity(coloured.len());
    let mut rest = coloured.as_str();
    while let Some(at) = rest.find('\x1b') {
        plain.push_str(&rest[..at]);
        rest = rest[at..].find('m').map_or("", |end| &rest[at + end + 1..]);
    }
    plain.push_str(rest);
    plain
}

/// Log lines at `level`: the word after the time stamp.
fn lines_at<'a>(log: &'a str, level: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(level))
        .collect()
}

#[test]
fn a_learner_joining_prints_no_warning_and_says_once_that_it_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve_default_log(1, dir.path(), &["--bootstrap"], None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    // Some registry to catch up on.
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/adr/skills.yaml");
    ok(cli(
        &first.grpc,
        &token,
        &["apply", "-f", examples.to_str().unwrap()],
    ));
    let _second = serve_default_log(2, dir.path(), &["--join", &first.grpc], Some(&token));
    status_until(&first.grpc, &token, "the learner catches up", |s| {
        s["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["node_id"] == 2 && n["lag"] == 0))
    });
    ok(cli(&first.grpc, &token, &["cluster", "promote", "2"]));
    status_until(&first.grpc, &token, "two voters", |s| {
        s["voters"].as_array().is_some_and(|v| v.len() == 2)
    });
    // Heartbeats to the new voter go on; give a stray failure line time to be written.
    std::thread::sleep(Duration::from_millis(500));

    let leader_log = log_of(dir.path(), 1);
    let joiner_log = log_of(dir.path(), 2);
    for (who, log) in [("leader", &leader_log), ("joiner", &joiner_log)] {
        let alarming: Vec<&str> = [lines_at(log, "WARN"), lines_at(log, "ERROR")].concat();
        assert!(
            alarming.is_empty(),
            "the {who} printed WARN or ERROR lines for a normal join:\n{}",
            alarming.join("\n")
        );
    }
    let catching_up: Vec<&str> = lines_at(&leader_log, "INFO")
        .into_iter()
        .filter(|l| l.contains("node 2 is a learner now and catches up"))
        .collect();
    assert_eq!(
        catching_up.len(),
        1,
        "the leader says once that node 2 catches up; its log:\n{leader_log}"
    );
}
