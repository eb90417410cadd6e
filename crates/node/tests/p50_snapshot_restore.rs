//! Backup and restore through real processes: a two-node cluster holds resources, a finished
//! call and a pending destructive one; `gatehouse snapshot save` writes a backup from the
//! follower; `gatehouse snapshot restore` makes it node 7 of a new cluster, which serves the same
//! resources, skills and call records, approves and runs the pending call once, and takes node 8
//! in. A used data directory and a damaged file are refused.

use serde_json::Value;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

mod common;

use common::{BIN, Node, cli, examples_credentials, ok, serve};

const AGENT_KEY: &str = "gate_snapshot-agent-00000000000000000000000";
const APPROVER_KEY: &str = "gate_snapshot-approver-00000000000000000000";
const KINDS: [&str; 6] = ["tenant", "principal", "upstream", "tool", "skill", "policy"];

/// `gatehouse dev`'s tenant (built-in tools, skills at every level) with this test's keys.
fn demo_resources(dir: &Path) -> std::path::PathBuf {
    let sha = gatehouse_registry::canonical::sha256_hex;
    let text = include_str!("../src/cmd/dev.yaml")
        .replace("{agent_sha256}", &sha(AGENT_KEY.as_bytes()))
        .replace("{approver_sha256}", &sha(APPROVER_KEY.as_bytes()));
    let path = dir.join("demo.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every resource of every kind, and a skill resolution, as `node` answers after every write.
fn everything(node: &Node, token: &str) -> Vec<Value> {
    let mut all: Vec<Value> = KINDS
        .iter()
        .map(|kind| {
            let listed = ok(cli(
                &node.grpc,
                token,
                &["-o", "jsonl", "list", kind, "--linearizable"],
            ));
            // One resource per line.
            let lines: Vec<Value> = listed
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect();
            Value::Array(lines)
        })
        .collect();
    let resolved = ok(cli(
        &node.grpc,
        token,
        &[
            "skills",
            "resolve",
            "--tenant",
            "demo",
            "--tool",
            "demo.transfer",
            "--user",
            "dana",
        ],
    ));
    let mut resolved: Value = serde_json::from_str(&resolved).unwrap();
    // The index it was computed at moves on in a new cluster; the answer must not.
    resolved
        .as_object_mut()
        .unwrap()
        .remove("applied_index")
        .expect("a resolution names its applied index");
    all.push(resolved);
    all
}

fn call_record(node: &Node, id: &str) -> Value {
    let out = ok(cli(
        &node.grpc,
        APPROVER_KEY,
        &["-o", "json", "approvals", "get", id],
    ));
    serde_json::from_str(&out).unwrap()
}

/// The call id a `gatehouse call` printed first.
fn call_id(out: &str) -> String {
    out.split_whitespace()
        .find(|w| w.starts_with("call_"))
        .unwrap_or_else(|| panic!("no call id in {out:?}"))
        .to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What the operator grants on every node: the demo tenant's built-in tools, and the credential
/// `billing` that examples/gateway's upstream names.
fn grants(dir: &Path) -> Vec<String> {
    let mut flags = ["--builtin", "demo:echo", "--builtin", "demo:transfer"]
        .map(str::to_owned)
        .to_vec();
    flags.extend(examples_credentials(dir));
    flags
}

/// `flags` and then the grants' flags.
fn with<'a>(flags: &[&'a str], grants: &'a [String]) -> Vec<&'a str> {
    flags
        .iter()
        .copied()
        .chain(grants.iter().map(String::as_str))
        .collect()
}

#[test]
fn a_backup_restores_into_a_new_cluster_with_everything_and_a_pending_call_still_pending() {
    let dir = tempfile::tempdir().unwrap();
    let grants = grants(dir.path());
    let first = serve(1, dir.path(), &with(&["--bootstrap"], &grants), None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    let second = serve(
        2,
        dir.path(),
        &with(&["--join", &first.grpc], &grants),
        Some(&token),
    );
    ok(cli(
        &first.grpc,
        &token,
        &["cluster", "wait-caught-up", "2", "--timeout", "30"],
    ));
    ok(cli(&first.grpc, &token, &["cluster", "promote", "2"]));

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway");
    for path in [demo_resources(dir.path()), examples] {
        ok(cli(
            &first.grpc,
            &token,
            &["apply", "-f", path.to_str().unwrap()],
        ));
    }
    // A keyed read-only call is recorded; a transfer waits for an approver.
    let echo_args = ["call", "demo.echo", "--tenant", "demo"];
    let echo_key = [
        "--args",
        r#"{"text":"kept"}"#,
        "--idempotency-key",
        "k-1",
        "--wait",
        "20",
    ];
    let echoed = ok(cli(
        &second.grpc,
        AGENT_KEY,
        &[&echo_args[..], &echo_key[..]].concat(),
    ));
    assert!(echoed.contains("succeeded"), "{echoed}");
    let finished = call_id(&echoed);
    let transfer = [
        "call",
        "demo.transfer",
        "--tenant",
        "demo",
        "--args",
        r#"{"from":"alice","to":"bob","amount":25}"#,
    ];
    let proposed = cli(&second.grpc, AGENT_KEY, &transfer);
    assert_eq!(proposed.status.code(), Some(5), "a pending call exits 5");
    let proposed = common::stdout(&proposed);
    assert!(proposed.contains("pending"), "{proposed}");
    let pending = call_id(&proposed);

    let source = everything(&second, &token);
    let finished_record = call_record(&second, &finished);
    let pending_record = call_record(&second, &pending);
    assert_eq!(pending_record["state"], "pending");

    // The backup, from the follower.
    let file = dir.path().join("backup.snap");
    let saved = cli(
        &second.grpc,
        &token,
        &["snapshot", "save", file.to_str().unwrap()],
    );
    let said = ok(saved.clone());
    assert!(
        said.contains("saved") && said.contains("from node 2"),
        "{said}"
    );
    assert!(
        stderr(&saved).contains("bytes (100%)"),
        "{}",
        stderr(&saved)
    );
    let agent_cannot = cli(
        &second.grpc,
        AGENT_KEY,
        &["snapshot", "save", dir.path().join("x").to_str().unwrap()],
    );
    assert!(stderr(&agent_cannot).contains("PermissionDenied"));
    drop((first, second));

    // Refused: a data directory in use, and a damaged file.
    let used = cli(
        "-",
        "-",
        &[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            dir.path().join("node-1").to_str().unwrap(),
            "--node-id",
            "7",
        ],
    );
    assert!(!used.status.success());
    assert!(stderr(&used).contains("is not empty"), "{}", stderr(&used));
    let mut damaged = std::fs::read(&file).unwrap();
    let near_end = damaged.len() - 10;
    damaged[near_end] ^= 0x01;
    let bad = dir.path().join("damaged.snap");
    std::fs::write(&bad, damaged).unwrap();
    let fresh = dir.path().join("never");
    let refused = cli(
        "-",
        "-",
        &[
            "snapshot",
            "restore",
            bad.to_str().unwrap(),
            "--data-dir",
            fresh.to_str().unwrap(),
            "--node-id",
            "7",
        ],
    );
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("SHA-256"), "{}", stderr(&refused));
    assert!(!fresh.exists(), "a refused restore wrote nothing");

    // Restored as node 7 of a new cluster, started without --bootstrap or --join.
    let restored = ok(cli(
        "-",
        "-",
        &[
            "snapshot",
            "restore",
            file.to_str().unwrap(),
            "--data-dir",
            dir.path().join("node-7").to_str().unwrap(),
            "--node-id",
            "7",
        ],
    ));
    assert!(restored.contains("as node 7"), "{restored}");
    let wrong_id = std::process::Command::new(BIN)
        .args(["serve", "--node-id", "9", "--data-dir"])
        .arg(dir.path().join("node-7"))
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!wrong_id.status.success());
    assert!(
        stderr(&wrong_id).contains("restored for node 7"),
        "{}",
        stderr(&wrong_id)
    );
    let seventh = serve(7, dir.path(), &with(&[], &grants), None);
    assert!(
        !dir.path().join("node-7/restored.json").exists(),
        "the first start finished the restore"
    );

    // The old admin key still works, and everything reads back the same.
    assert_eq!(everything(&seventh, &token), source);
    assert_eq!(call_record(&seventh, &finished), finished_record);
    assert_eq!(call_record(&seventh, &pending), pending_record);
    let again = ok(cli(
        &seventh.grpc,
        AGENT_KEY,
        &[&echo_args[..], &echo_key[..]].concat(),
    ));
    assert_eq!(call_id(&again), finished, "the idempotency record is kept");

    // The pending call is approvable on the new cluster and runs there once.
    ok(cli(
        &seventh.grpc,
        APPROVER_KEY,
        &[
            "approvals",
            "approve",
            "--yes",
            &pending,
            "--reason",
            "after restore",
        ],
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while call_record(&seventh, &pending)["state"] != "succeeded" {
        assert!(Instant::now() < deadline, "the approved call did not run");
        std::thread::park_timeout(Duration::from_millis(100));
    }
    let ledger: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("node-7/builtin/demo/demo-ledger.json")).unwrap(),
    )
    .unwrap();
    let runs = ledger["transfers"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one execution: {ledger}");
    assert_eq!(runs[0]["call_id"], pending.as_str());
    assert!(
        !dir.path()
            .join("node-1/builtin/demo/demo-ledger.json")
            .exists()
    );
    assert!(
        !dir.path()
            .join("node-2/builtin/demo/demo-ledger.json")
            .exists()
    );

    // The membership names node 7 at its real address; node 8 joins and catches up.
    let eighth = serve(
        8,
        dir.path(),
        &with(&["--join", &seventh.grpc], &grants),
        Some(&token),
    );
    let caught_up = ok(cli(
        &seventh.grpc,
        &token,
        &["cluster", "wait-caught-up", "8", "--timeout", "30"],
    ));
    assert!(caught_up.contains("node 8 caught up"), "{caught_up}");
    ok(cli(&seventh.grpc, &token, &["cluster", "promote", "8"]));
    let status: Value = serde_json::from_str(&ok(cli(
        &eighth.grpc,
        &token,
        &["-o", "json", "cluster", "status"],
    )))
    .unwrap();
    assert_eq!(status["voters"], serde_json::json!([7, 8]));
    let seven = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == 7)
        .unwrap();
    assert_eq!(seven["grpc_addr"], seventh.grpc.as_str());
    let mut after = source.clone();
    after.truncate(KINDS.len());
    let mut on_eight = everything(&eighth, &token);
    on_eight.truncate(KINDS.len());
    assert_eq!(on_eight, after);
}

#[test]
fn wait_caught_up_gives_up_on_a_node_that_is_no_member_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(1, dir.path(), &["--bootstrap"], None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    let out = cli(
        &node.grpc,
        &token,
        &["cluster", "wait-caught-up", "9", "--timeout", "0.5"],
    );
    assert!(!out.status.success());
    let text = stderr(&out);
    assert!(text.contains("node 9: not a member yet"), "{text}");
    assert!(text.contains("did not catch up within"), "{text}");
}
