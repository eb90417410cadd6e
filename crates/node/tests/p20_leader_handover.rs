//! A leader stopped with SIGTERM hands its leadership over before it leaves: it asks a caught-up
//! voter to stand (Raft's TimeoutNow) and grants it its vote, so the cluster does not wait out an
//! election timeout with no leader. The proof is that the old leader itself saw its successor
//! lead: while it is up and heartbeating, no follower's election timer can fire, so only the
//! handover elects anyone before it exits.

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::{Node, cli, ok, serve_timed, status_until};

/// Slow enough elections that one started by a timer would stand out from a handover.
const TIMINGS: [&str; 6] = [
    "--heartbeat-ms",
    "50",
    "--election-min-ms",
    "1500",
    "--election-max-ms",
    "2000",
];
const ELECTION_MAX: Duration = Duration::from_millis(2000);

/// Waits for `node` to exit by itself, up to `within`.
fn wait_exit(node: &mut Node, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = node.child.try_wait().expect("the node's status") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "node {} still running {within:?} after SIGTERM",
            node.id
        );
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

#[test]
fn a_leader_stopped_with_sigterm_hands_leadership_to_a_voter() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve_timed(1, dir.path(), &TIMINGS, &["--bootstrap"], None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    let mut nodes = vec![first];
    for id in [2, 3] {
        let node = serve_timed(
            id,
            dir.path(),
            &TIMINGS,
            &["--join", &nodes[0].grpc],
            Some(&token),
        );
        nodes.push(node);
    }
    let addr = nodes[0].grpc.clone();
    for id in [2u64, 3] {
        status_until(&addr, &token, "the learner catches up", |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n["node_id"] == id && n["lag"] == 0))
        });
        ok(cli(&addr, &token, &["cluster", "promote", &id.to_string()]));
    }
    let before = status_until(&addr, &token, "three voters", |s| {
        s["voters"].as_array().is_some_and(|v| v.len() == 3)
    });
    let leader = before["leader"].as_u64().expect("a leader");
    let term = before["term"].as_u64().expect("a term");
    // A leader refuses to vote for anyone until its own election is an election timeout old
    // (openraft's leader lease); a node stopped sooner leaves the successor to its timer.
    std::thread::sleep(ELECTION_MAX + Duration::from_millis(500));

    let position = nodes.iter().position(|n| n.id == leader).unwrap();
    let mut stopping = nodes.remove(position);
    let sent = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &stopping.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let exit = wait_exit(&mut stopping, Duration::from_secs(20));
    let stopped_in = sent.elapsed();
    assert!(exit.success(), "the stopping leader exits cleanly: {exit}");

    let said = stopping.said.lock().unwrap().clone();
    let handed: Vec<&String> = said
        .iter()
        .filter(|l| l.contains("handed leadership to node"))
        .collect();
    assert_eq!(
        handed.len(),
        1,
        "the old leader says whom it handed to: {said:?}"
    );
    let words: Vec<&str> = handed[0].split_whitespace().collect();
    let successor: u64 = words[words.len() - 4].parse().expect("a node id");
    let new_term: u64 = words[words.len() - 1].parse().expect("a term");
    assert_ne!(successor, leader);
    assert!(nodes.iter().any(|n| n.id == successor), "{successor}");
    assert_eq!(new_term, term + 1, "one election, the handover's");

    // The survivors agree: the successor leads, in that term, and takes writes.
    for node in &nodes {
        let after = status_until(&node.grpc, &token, "the survivors see the successor", |s| {
            s["leader"].as_u64().is_some()
        });
        assert_eq!(after["leader"].as_u64(), Some(successor), "{after}");
        assert_eq!(after["term"].as_u64(), Some(new_term), "{after}");
    }
    let tenant = dir.path().join("tenant.yaml");
    std::fs::write(&tenant, gatehouse_testkit::yaml::tenant("after-handover")).unwrap();
    let created = ok(cli(
        &nodes[0].grpc,
        &token,
        &["apply", "-f", tenant.to_str().unwrap()],
    ));
    assert!(
        created.contains("Tenant/after-handover created"),
        "{created}"
    );
    eprintln!("SIGTERM to exit of the old leader, successor elected on the way: {stopped_in:?}");
}
