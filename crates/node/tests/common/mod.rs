//! Real `gatehouse` processes for the process-level tests: `gatehouse serve` on loopback with
//! fast Raft timings, and the command line against a node.

#![allow(dead_code)] // each test file uses what it needs

pub mod browser;
pub mod pki;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_gatehouse");

/// A node process, killed when dropped.
#[derive(Debug)]
pub struct Node {
    pub id: u64,
    pub child: Child,
    pub grpc: String,
    pub http: String,
    /// Every line the node printed on stdout after its first, as it prints them.
    pub said: Arc<Mutex<Vec<String>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raft timings fast enough for tests on loopback.
pub const FAST_RAFT: [&str; 6] = [
    "--heartbeat-ms",
    "50",
    "--election-min-ms",
    "300",
    "--election-max-ms",
    "600",
];

/// Writes `dir/credentials.toml`, declaring the credential `billing` that examples/gateway's
/// upstream names (granted to globex), and answers the flag that gives it to `serve`.
pub fn examples_credentials(dir: &Path) -> [String; 2] {
    let path = dir.join("credentials.toml");
    std::fs::write(
        &path,
        "[[credential]]\nname = \"billing\"\nenv = \"BILLING_TOKEN\"\ntenants = [\"globex\"]\n",
    )
    .expect("writing credentials.toml");
    ["--credentials-file".to_owned(), path.display().to_string()]
}

/// `gatehouse serve` as node `id`, its data under `dir/node-ID` and its log in `dir/node-ID.log`,
/// on ports the kernel picks, with fast Raft timings; `extra` arguments after the common ones.
pub fn serve(id: u64, dir: &Path, extra: &[&str], token: Option<&str>) -> Node {
    serve_timed(id, dir, &FAST_RAFT, extra, token)
}

/// [`serve`] with the Raft timing flags given.
pub fn serve_timed(
    id: u64,
    dir: &Path,
    timings: &[&str],
    extra: &[&str],
    token: Option<&str>,
) -> Node {
    spawn(id, dir, timings, extra, token, Some("warn"))
}

/// [`serve`] logging what an operator's node logs: no `RUST_LOG`, the node's own default.
pub fn serve_default_log(id: u64, dir: &Path, extra: &[&str], token: Option<&str>) -> Node {
    spawn(id, dir, &FAST_RAFT, extra, token, None)
}

fn spawn(
    id: u64,
    dir: &Path,
    timings: &[&str],
    extra: &[&str],
    token: Option<&str>,
    rust_log: Option<&str>,
) -> Node {
    let data = dir.join(format!("node-{id}"));
    // A restarted node's log goes on after its earlier life's.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("node-{id}.log")))
        .expect("a log file");
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--node-id", &id.to_string()])
        .args(["--data-dir", data.to_str().unwrap()])
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(timings)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(log);
    match rust_log {
        Some(levels) => command.env("RUST_LOG", levels),
        None => command.env_remove("RUST_LOG"),
    };
    if let Some(token) = token {
        command.env("GATEHOUSE_TOKEN", token);
    }
    let mut child = command.spawn().expect("gatehouse serve starts");
    // "node N serving gRPC on ADDR and HTTP on ADDR"; the rest is kept, and read as it comes
    // so the node never writes into a full or closed pipe.
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = lines.next().and_then(Result::ok).unwrap_or_default();
    let said = Arc::new(Mutex::new(Vec::new()));
    let keep = said.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep.lock().expect("said lock").push(line);
        }
    });
    let words: Vec<&str> = line.split_whitespace().collect();
    let address_of = |listener: &str| {
        words
            .iter()
            .position(|w| *w == listener)
            .and_then(|i| words.get(i + 2))
            .map(|s| (*s).to_owned())
            .unwrap_or_else(|| {
                let log =
                    std::fs::read_to_string(dir.join(format!("node-{id}.log"))).unwrap_or_default();
                panic!("node {id} said {line:?}; its log:\n{log}")
            })
    };
    Node {
        id,
        grpc: address_of("gRPC"),
        http: address_of("HTTP"),
        child,
        said,
    }
}

/// The command line with `args`, as given.
pub fn gatehouse(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the gatehouse binary runs")
}

/// What a command printed on its standard output.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command line against the node at `addr`.
pub fn cli(addr: &str, token: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["--addr", addr, "--token", token])
        .args(args)
        .output()
        .expect("the CLI runs")
}

/// The command line against `addr` as `token`, with `input` on its standard input.
pub fn cli_answering(addr: &str, token: &str, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(["--addr", addr, "--token", token])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the CLI runs");
    let mut stdin = child.stdin.take().expect("a piped stdin");
    stdin
        .write_all(input.as_bytes())
        .expect("the CLI reads its input");
    drop(stdin);
    child.wait_with_output().expect("the CLI ends")
}

/// A fresh API key and its digest, from `gatehouse keygen -o json`.
pub fn keygen() -> (String, String) {
    let out = ok(gatehouse(&["keygen", "-o", "json"]));
    let key: Value = serde_json::from_str(&out).expect("keygen prints JSON");
    (
        key["api_key"].as_str().unwrap().to_owned(),
        key["api_key_sha256"].as_str().unwrap().to_owned(),
    )
}

/// Proposes a call of `tenant`'s `tool` with `args` through `gatehouse call` at `addr`; it must
/// wait for approval (exit 5, state pending). Its id.
pub fn propose_pending(addr: &str, key: &str, tenant: &str, tool: &str, args: &Value) -> String {
    let args = args.to_string();
    let call = [
        "call", tool, "--tenant", tenant, "--args", &args, "-o", "json",
    ];
    let out = cli(addr, key, &call);
    assert_eq!(
        out.status.code(),
        Some(5),
        "a call waiting for approval exits 5: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let envelope: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(envelope["state"], "pending");
    envelope["call_id"].as_str().expect("an id").to_owned()
}

/// Polls `check` until it gives a value, failing the test after `within`.
pub fn until<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Three voters: node 1 bootstraps, 2 and 3 join it and are promoted once caught up; `extra`
/// goes to every node. The nodes, and the admin key node 1 made.
pub fn three_voters(dir: &Path, extra: &[&str]) -> (Vec<Node>, String) {
    let first = serve(1, dir, &[extra, &["--bootstrap"]].concat(), None);
    let token = std::fs::read_to_string(dir.join("node-1/admin.key"))
        .expect("the first node writes its admin key")
        .trim()
        .to_owned();
    let mut nodes = vec![first];
    for id in [2u64, 3] {
        let join = [extra, &["--join", &nodes[0].grpc]].concat();
        nodes.push(serve(id, dir, &join, Some(&token)));
        let addr = nodes[0].grpc.clone();
        until("the learner catches up", Duration::from_secs(30), || {
            let out = cli(&addr, &token, &["-o", "json", "cluster", "status"]);
            let status: Value = serde_json::from_slice(&out.stdout).ok()?;
            let caught_up = status["nodes"]
                .as_array()?
                .iter()
                .any(|n| n["node_id"] == id && n["lag"] == 0);
            caught_up.then_some(())
        });
        ok(cli(&addr, &token, &["cluster", "promote", &id.to_string()]));
    }
    (nodes, token)
}

/// What a command printed, after checking it succeeded.
pub fn ok(out: Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `cluster status -o json` from `addr`, retried until `check` holds or 30 s pass.
pub fn status_until(addr: &str, token: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(addr, token, &["-o", "json", "cluster", "status"]);
        if out.status.success() {
            let status: Value = serde_json::from_slice(&out.stdout).expect("status is JSON");
            if check(&status) {
                return status;
            }
        }
        assert!(Instant::now() < deadline, "{what}: not within 30 s");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}
