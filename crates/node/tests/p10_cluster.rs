//! Real `gatehouse serve` processes on loopback, driven by the real command line: a three-node
//! cluster forms, the leader's process is killed with SIGKILL, and the cluster carries on.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{BIN, cli, cli_answering, examples_credentials, ok, serve, status_until};

#[test]
fn the_cluster_survives_a_sigkilled_leader_process() {
    let dir = tempfile::tempdir().unwrap();
    // The examples' upstream names the operator's credential `billing`.
    let [flag, credentials] = examples_credentials(dir.path());
    let first = serve(1, dir.path(), &["--bootstrap", &flag, &credentials], None);
    let key_file = dir.path().join("node-1/admin.key");
    let token = std::fs::read_to_string(&key_file)
        .unwrap()
        .trim()
        .to_owned();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_file).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "admin.key must be private");

    let mut nodes = vec![first];
    for id in [2, 3] {
        let node = serve(
            id,
            dir.path(),
            &["--join", &nodes[0].grpc, &flag, &credentials],
            Some(&token),
        );
        nodes.push(node);
    }
    let addr = nodes[0].grpc.clone();
    for id in ["2", "3"] {
        status_until(&addr, &token, "the learner catches up", |s| {
            s["nodes"].as_array().is_some_and(|n| {
                n.iter()
                    .any(|n| n["node_id"] == id.parse::<u64>().unwrap() && n["lag"] == 0)
            })
        });
        ok(cli(&addr, &token, &["cluster", "promote", id]));
    }
    let status = status_until(&addr, &token, "three voters", |s| {
        s["voters"].as_array().is_some_and(|v| v.len() == 3)
    });
    let leader = status["leader"].as_u64().expect("a leader");

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let applied = ok(cli(
        &addr,
        &token,
        &["apply", "-f", examples.to_str().unwrap()],
    ));
    assert!(applied.contains("Tenant/acme created"), "{applied}");
    let resolved = ok(cli(
        &addr,
        &token,
        &[
            "skills",
            "resolve",
            "--tenant",
            "acme",
            "--tool",
            "api-create",
            "--user",
            "john",
        ],
    ));
    let resolved: Value = serde_json::from_str(&resolved).unwrap();
    assert_eq!(
        resolved["resolved_context"],
        "Always include a request ID in API calls.\nUse ISO 8601 dates, amounts in EUR.\napi-create requires approval for amounts > 10000."
    );
    // Applying the same files again changes nothing.
    let again = ok(cli(
        &addr,
        &token,
        &["apply", "-f", examples.to_str().unwrap()],
    ));
    assert!(
        !again.contains("created") && !again.contains("updated"),
        "{again}"
    );

    // Every tenant gets a home among the voters; status counts them per node, on every node.
    let placement = common::until("every tenant placed", Duration::from_secs(30), || {
        let out = cli(
            &nodes[2].grpc,
            &token,
            &["cluster", "placement", "-o", "json"],
        );
        let rows: Value = serde_json::from_slice(&out.stdout).ok()?;
        let rows = rows.as_array()?.clone();
        rows.iter().all(|t| t["home"].is_u64()).then_some(rows)
    });
    assert!(
        placement.iter().any(|t| t["tenant"] == "acme"),
        "{placement:?}"
    );
    for row in &placement {
        let home = row["home"].as_u64().unwrap();
        assert!((1..=3).contains(&home), "{row}");
    }
    status_until(&nodes[1].grpc, &token, "homes counted", |s| {
        let counted: u64 = s["nodes"].as_array().map_or(0, |n| {
            n.iter().filter_map(|n| n["tenants_homed"].as_u64()).sum()
        });
        counted == placement.len() as u64
    });
    let text = ok(cli(&addr, &token, &["cluster", "placement"]));
    assert!(text.lines().any(|l| l.starts_with("acme ")), "{text}");

    // SIGKILL the leader's process.
    let position = nodes.iter().position(|n| n.id == leader).unwrap();
    let mut killed = nodes.remove(position);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    let survivor = nodes[0].grpc.clone();
    let status = status_until(&survivor, &token, "a new leader", |s| {
        s["leader"].as_u64().is_some_and(|l| l != leader)
    });
    assert_ne!(status["leader"].as_u64(), Some(leader));

    // The survivors still serve what was written, and take new writes.
    let skills = ok(cli(
        &survivor,
        &token,
        &["list", "skills", "--linearizable"],
    ));
    assert!(skills.contains("Skill/acme/acme-formats"), "{skills}");
    let extra = dir.path().join("extra.yaml");
    std::fs::write(&extra, gatehouse_testkit::yaml::tenant("after-kill")).unwrap();
    let out = ok(cli(
        &nodes[1].grpc,
        &token,
        &["apply", "-f", extra.to_str().unwrap()],
    ));
    assert!(out.contains("Tenant/after-kill created"), "{out}");
    let got = ok(cli(
        &survivor,
        &token,
        &[
            "-o",
            "json",
            "get",
            "tenant",
            "after-kill",
            "--linearizable",
        ],
    ));
    let got: Value = serde_json::from_str(got.trim()).unwrap();
    assert_eq!(got["resource"]["metadata"]["name"], "after-kill");
}

#[test]
fn a_node_joins_with_a_key_file_that_appears_after_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(1, dir.path(), &["--bootstrap"], None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key")).unwrap();
    let key_file = dir.path().join("shared/admin.key");
    let joining = {
        let (dir, via, key) = (dir.path().to_owned(), first.grpc.clone(), key_file.clone());
        std::thread::spawn(move || {
            let key = key.to_str().unwrap().to_owned();
            serve(2, &dir, &["--join", &via, "--join-token-file", &key], None)
        })
    };
    // The joiner has started (its data directory exists) before the key is there to read.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.path().join("node-2").exists() {
        assert!(Instant::now() < deadline, "node 2 did not start");
        std::thread::park_timeout(Duration::from_millis(20));
    }
    std::fs::create_dir_all(key_file.parent().unwrap()).unwrap();
    std::fs::write(&key_file, &token).unwrap();
    let second = joining.join().expect("node 2 joined");
    let token = token.trim();
    status_until(&first.grpc, token, "node 2 is a learner", |s| {
        s["learners"]
            .as_array()
            .is_some_and(|l| l.contains(&2.into()))
    });
    drop(second);
}

#[test]
fn serve_refuses_a_bad_configuration_with_every_problem() {
    let out = Command::new(BIN)
        .args([
            "serve",
            "--grpc",
            "nowhere",
            "--bootstrap",
            "--join",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in ["node-id", "data-dir", "grpc", "bootstrap and join"] {
        assert!(err.contains(expected), "missing {expected} in {err}");
    }
}

/// A plain HTTP/1.0 GET on loopback: the response, headers and body.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the HTTP listener answers");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn gatehouse_environment_variables_configure_serve_and_an_unknown_one_is_only_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("from-env");
    // Settings from the environment, the client's own variables beside them: the node starts.
    let mut node = Command::new(BIN)
        .args([
            "serve",
            "--bootstrap",
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .env("GATEHOUSE_NODE_ID", "7")
        .env("GATEHOUSE_DATA_DIR", &data)
        .env("GATEHOUSE_A2A_PUBLIC_URL", "https://peers.example/")
        .env("GATEHOUSE_A2A_GRPC_URL", "peers.example:443")
        .env("GATEHOUSE_ADDR", "127.0.0.1:1")
        .env("GATEHOUSE_TOKEN", "gate_not-a-server-setting")
        // A wrapper script's own variable and a misspelt one: named in a warning, no more.
        .env("GATEHOUSE_BIN", "/opt/gatehouse/bin/gatehouse")
        .env("GATEHOUSE_HEARTBEET_MS", "50")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("from-env.log")).unwrap())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(node.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    // The Agent Card gives the addresses peers reach the node at, from the environment.
    let http = first
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    let card = http_get(&http, "/.well-known/agent-card.json");
    node.kill().unwrap();
    node.wait().unwrap();
    assert!(first.starts_with("node 7 serving"), "{first}");
    let log = std::fs::read_to_string(dir.path().join("from-env.log")).unwrap();
    for name in ["GATEHOUSE_BIN", "GATEHOUSE_HEARTBEET_MS"] {
        assert!(
            log.contains(&format!(
                "{name} is in the environment but names no setting"
            )),
            "{log}"
        );
    }
    assert!(!log.contains('\x1b'), "colour codes in a log file: {log}");
    assert!(
        card.contains("\"url\":\"https://peers.example/a2a\""),
        "{card}"
    );
    assert!(card.contains("\"url\":\"peers.example:443\""), "{card}");
    assert!(
        data.join("admin.key").exists(),
        "the data dir came from GATEHOUSE_DATA_DIR"
    );

    // Values that do not fit their settings are all reported, and nothing starts.
    let out = Command::new(BIN)
        .args(["serve", "--bootstrap"])
        .env("GATEHOUSE_NODE_ID", "seven")
        .env("GATEHOUSE_HEARTBEAT_MS", "fast")
        .env("GATEHOUSE_DATA_DIR", dir.path().join("never"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in ["GATEHOUSE_NODE_ID", "GATEHOUSE_HEARTBEAT_MS"] {
        assert!(err.contains(expected), "missing {expected} in {err}");
    }
    assert!(!dir.path().join("never").exists());
}

#[test]
fn a_wrong_key_is_refused_and_a_missing_key_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let node = serve(1, dir.path(), &["--bootstrap"], None);
    let out = cli(&node.grpc, "gate_not-a-key", &["cluster", "status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Unauthenticated"));
    let out = Command::new(BIN)
        .args(["--addr", &node.grpc, "cluster", "status"])
        .env_remove("GATEHOUSE_TOKEN")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no API key"));
}

/// A `gatehouse dev` process, killed when dropped, with the addresses it printed.
struct Dev {
    child: Child,
    grpc: String,
    credentials: Value,
    /// What it printed on start, up to its last line.
    banner: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dev(dir: &Path) -> Dev {
    let log = std::fs::File::create(dir.join("dev.log")).expect("a log file");
    let mut child = Command::new(BIN)
        .args(["dev", "--data-dir", dir.join("data").to_str().unwrap()])
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("gatehouse dev starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut grpc = None;
    let mut banner = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        banner.push_str(&line);
        banner.push('\n');
        if let Some(addr) = line.trim().strip_prefix("gRPC") {
            grpc = Some(addr.trim().to_owned());
        }
        if line.starts_with("Ctrl-C stops the node") {
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    let grpc = grpc.unwrap_or_else(|| {
        let log = std::fs::read_to_string(dir.join("dev.log")).unwrap_or_default();
        panic!("gatehouse dev named no gRPC address; its log:\n{log}")
    });
    let credentials =
        serde_json::from_slice(&std::fs::read(dir.join("data/credentials.json")).unwrap())
            .expect("credentials.json is JSON");
    Dev {
        child,
        grpc,
        credentials,
        banner,
    }
}

/// The README's quickstart, through the real binary: `gatehouse dev` writes three keys; a
/// read-only call runs at once with the demo skills; a transfer waits, its own agent cannot
/// approve it, the approver can, `call --wait` sees it succeed, and the ledger outside the
/// registry shows it ran once. A restart resumes with the same keys and tenant.
#[test]
fn the_dev_cluster_walks_a_destructive_call_through_approval() {
    let dir = tempfile::tempdir().unwrap();
    let node = dev(dir.path());
    let key = |who: &str| node.credentials[who].as_str().unwrap().to_owned();
    // The banner names the keys' file and prints none of them.
    assert!(node.banner.contains("credentials.json"), "{}", node.banner);
    for who in ["admin", "agent", "approver"] {
        assert!(!node.banner.contains(&key(who)), "{who}: {}", node.banner);
    }
    let (agent, approver) = (key("agent"), key("approver"));
    assert!(key("admin").starts_with("gate_"));

    let echoed = ok(cli(
        &node.grpc,
        &agent,
        &[
            "call",
            "demo.echo",
            "--tenant",
            "demo",
            "--args",
            r#"{"text":"hi"}"#,
        ],
    ));
    assert!(echoed.contains("succeeded"), "{echoed}");
    assert!(
        echoed.contains("Dana prefers short answers."),
        "the user's skill: {echoed}"
    );

    let waiting = Command::new(BIN)
        .args(["--addr", &node.grpc, "--token", &agent])
        .args(["call", "demo.transfer", "--tenant", "demo"])
        .args([
            "--args",
            r#"{"from":"alice","to":"bob","amount":25}"#,
            "--wait",
            "60",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the CLI runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let listed = ok(cli(
            &node.grpc,
            &approver,
            &["approvals", "list", "--tenant", "demo"],
        ));
        if let Some(id) = listed.split_whitespace().find(|w| w.starts_with("call_")) {
            break id.to_owned();
        }
        assert!(Instant::now() < deadline, "no pending call listed");
        std::thread::park_timeout(Duration::from_millis(100));
    };
    let ledger_path = dir.path().join("data/builtin/demo/demo-ledger.json");
    assert!(!ledger_path.exists(), "the transfer ran before approval");

    let own = cli(
        &node.grpc,
        &agent,
        &["approvals", "approve", &id, "--reason", "mine"],
    );
    assert!(!own.status.success(), "the call's own agent approved it");
    assert!(String::from_utf8_lossy(&own.stderr).contains("PermissionDenied"));

    // The approver approves what it was shown: with no answer, a "no", or a hash other than
    // the call's, nothing is approved; a "y" to the shown tool and arguments approves.
    let approve = ["approvals", "approve", &id, "--reason", "checked"];
    for (answer, extra) in [("", None), ("n\n", None), ("", Some("0".repeat(64)))] {
        let mut args = approve.to_vec();
        if let Some(hash) = &extra {
            args.extend(["--args-sha256", hash]);
        }
        let refused = cli_answering(&node.grpc, &approver, &args, answer);
        assert!(
            !refused.status.success(),
            "approved with {answer:?} {extra:?}"
        );
    }
    let unanswered = cli_answering(&node.grpc, &approver, &approve, "");
    let asked = String::from_utf8_lossy(&unanswered.stderr);
    assert!(
        asked.contains("demo.transfer")
            && asked.contains(r#"{"amount":25,"from":"alice","to":"bob"}"#)
            && asked.contains("destructive")
            && asked.contains("--args-sha256"),
        "the prompt shows tool, arguments and mode, and says how to script it: {asked}"
    );
    let record = ok(cli(
        &node.grpc,
        &approver,
        &["-o", "json", "approvals", "get", &id],
    ));
    assert!(record.contains(r#""state":"pending""#), "{record}");
    let approved = ok(cli_answering(&node.grpc, &approver, &approve, "y\n"));
    assert!(
        approved.contains(&format!(
            "approved {id} of tool demo.transfer (mode destructive)"
        )),
        "{approved}"
    );
    let out = ok(waiting.wait_with_output().expect("call --wait ends"));
    assert!(out.contains(&id) && out.contains("succeeded"), "{out}");
    let ledger: Value = serde_json::from_slice(&std::fs::read(&ledger_path).unwrap()).unwrap();
    assert_eq!(ledger["balances"]["alice"], 975);
    assert_eq!(ledger["balances"]["bob"], 1025);
    let runs: Vec<&Value> = ledger["transfers"].as_array().unwrap().iter().collect();
    assert_eq!(runs.len(), 1, "one execution: {ledger}");
    assert_eq!(runs[0]["call_id"], id.as_str());

    // The audit log tells the same story, hash-chained: the read-only call, the proposal, the
    // approval, and the execution on the home.
    let data = dir.path().join("data");
    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let tail = Command::new(BIN)
            .args(["audit", "tail", "--json", "-n", "100", "--data-dir"])
            .arg(&data)
            .output()
            .unwrap();
        let records: Vec<Value> = ok(tail)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let found = |kind: &str, decision: Option<&str>, outcome: &str| {
            records.iter().any(|r| {
                r["kind"] == kind
                    && decision.is_none_or(|d| r["decision"] == d)
                    && r["outcome"].as_str().unwrap_or("").starts_with(outcome)
            })
        };
        if found("tool_call", None, "succeeded")
            && found("tool_call", None, "pending")
            && found("approval", Some("approve"), "approved")
            && found("tool_call", Some("execute"), "succeeded")
        {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "audit records missing: {records:#?}"
        );
        std::thread::park_timeout(Duration::from_millis(100));
    };
    assert!(
        records
            .iter()
            .filter(|r| r["call_id"] == id.as_str())
            .all(|r| r["trace_id"] == id.trim_start_matches("call_")),
        "every record of the call names its trace"
    );
    let verified = Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(ok(verified).contains("audit log intact"));

    drop(node);
    let again = dev(dir.path());
    assert_eq!(again.credentials["agent"], agent.as_str());
    let echoed = ok(cli(
        &again.grpc,
        &agent,
        &[
            "call",
            "demo.echo",
            "--tenant",
            "demo",
            "--args",
            r#"{"text":"back"}"#,
        ],
    ));
    assert!(echoed.contains("succeeded"), "{echoed}");
}
