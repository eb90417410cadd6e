//! The gateway under test: a real `gatehouse` process, its own data directory, a tenant whose
//! MCP upstream is the bench's `McpUpstream`, and the process's CPU time from /proc.

use anyhow::{Context, bail};
use gatehouse_cluster::node_files::Identity;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::Admin;
use gatehouse_tests::mcp_wire::RawMcp;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TENANT: &str = "bench";
/// The upstream's name in the registry: its tools are `demo.echo`, `demo.add`, ...
pub const UPSTREAM: &str = "demo";
pub const AGENT_KEY: &str = "gate_bench-agent-0000000000000000000000000";

/// A running `gatehouse` node, killed when dropped.
pub struct Gateway {
    child: Child,
    pub mcp_url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GATEHOUSE_BIN`, else `gatehouse` beside the bench's own target directory (the bench runs
/// from `target/<profile>/deps/`).
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("GATEHOUSE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("the bench's own path has no target directory")?;
    let bin = profile_dir.join("gatehouse");
    if !bin.exists() {
        bail!(
            "{} is missing: build it first (cargo build --release --bin gatehouse, as \
             scripts/bench-mcp does) or set GATEHOUSE_BIN",
            bin.display()
        );
    }
    Ok(bin)
}

impl Gateway {
    /// Starts `gatehouse dev` (one node) on loopback ports of its own, applies the bench tenant
    /// with `upstream_url` as its MCP upstream, and waits until its MCP front lists the tools.
    pub fn start(bin: &Path, upstream_url: &str) -> anyhow::Result<Gateway> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("node");
        let log = std::fs::File::create(dir.path().join("node.log"))?;
        // `gatehouse dev`: one node with the demo tenant; the bench adds its own tenant.
        let mut child = Command::new(bin)
            .args(["dev", "--data-dir"])
            .arg(&data)
            .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        // It prints its guide once its keys are written; the rest of its output is drained so
        // it never writes into a closed pipe.
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut said = Vec::new();
        for line in lines.by_ref() {
            let line = line?;
            let ready = line.starts_with("gatehouse dev:");
            said.push(line);
            if ready {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        let failed = |what: &str| {
            let log = std::fs::read_to_string(dir.path().join("node.log")).unwrap_or_default();
            format!("the gateway wrote no {what}; it said {said:?}; its log:\n{log}")
        };
        let identity: Identity = std::fs::read_to_string(data.join("node.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .with_context(|| failed("node.json"))?;
        let credentials: serde_json::Value = std::fs::read_to_string(data.join("credentials.json"))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .with_context(|| failed("credentials.json"))?;
        let admin_key = credentials["admin"]
            .as_str()
            .context("credentials.json names no admin key")?
            .to_owned();
        let gateway = Gateway {
            child,
            mcp_url: format!("http://{}/mcp", identity.http),
            _dir: dir,
        };
        let admin = Admin::new(identity.grpc, admin_key);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            admin.apply(resources(upstream_url)).await?;
            gateway.wait_listed(Duration::from_secs(30)).await
        })?;
        Ok(gateway)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the MCP front lists `demo.echo` to the agent.
    async fn wait_listed(&self, timeout: Duration) -> anyhow::Result<()> {
        let client = RawMcp::new(&self.mcp_url, Some(AGENT_KEY));
        let deadline = Instant::now() + timeout;
        let wanted = format!("{UPSTREAM}.echo");
        loop {
            let answer = client.list_tools().await?;
            let listed = answer
                .message
                .pointer("/result/tools")
                .and_then(|t| t.as_array())
                .is_some_and(|tools| tools.iter().any(|t| t["name"] == wanted.as_str()));
            if listed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the gateway's MCP front did not list {wanted} within {timeout:?}; last \
                     answer (HTTP {}): {}",
                    answer.status,
                    answer.text
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Opens `n` MCP sessions as a 2025-11-25 client does (`initialize`, then `initialized`)
    /// and leaves them open; answers how many the gateway gave a session id.
    pub async fn open_sessions(&self, n: usize) -> anyhow::Result<usize> {
        let http = reqwest::Client::new();
        let mut opened = 0;
        for i in 0..n {
            let initialize = json!({
                "jsonrpc": "2.0", "id": i, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "bench-memory", "version": "0"},
                },
            });
            let answer = http
                .post(&self.mcp_url)
                .bearer_auth(AGENT_KEY)
                .header("Accept", "application/json, text/event-stream")
                .json(&initialize)
                .send()
                .await?;
            let Some(session) = answer.headers().get("mcp-session-id").cloned() else {
                bail!(
                    "initialize was answered HTTP {} without a session",
                    answer.status()
                );
            };
            answer.bytes().await?;
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            http.post(&self.mcp_url)
                .bearer_auth(AGENT_KEY)
                .header("Accept", "application/json, text/event-stream")
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25")
                .json(&initialized)
                .send()
                .await?
                .bytes()
                .await?;
            opened += 1;
        }
        Ok(opened)
    }
}

/// A process's resident memory, from /proc/<pid>/status.
pub fn resident_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/<pid>/status")
}

fn resources(upstream_url: &str) -> Vec<gatehouse_proto::v1::Resource> {
    let tool = |name: &str, description: &str, schema: serde_json::Value| {
        resource(
            "Tool",
            &format!("{UPSTREAM}.{name}"),
            Some(TENANT),
            json!({"description": description, "inputSchema": schema, "approvalMode": "read_only"}),
        )
    };
    vec![
        resource("Tenant", TENANT, None, json!({})),
        principal(
            "bench-agent",
            AGENT_KEY,
            json!({TENANT: ["agent"]}),
            Some("bench-user"),
        ),
        resource(
            "Upstream",
            UPSTREAM,
            Some(TENANT),
            json!({"type": "mcp", "url": upstream_url, "trusted": true}),
        ),
        tool(
            "echo",
            "Answers the text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        ),
        tool(
            "add",
            "Adds two numbers.",
            json!({
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            }),
        ),
        resource(
            "Skill",
            "bench-brief",
            None,
            json!({
                "scope": {"type": "tenant", "tenant": TENANT},
                "instructions": "Answer in one line.",
            }),
        ),
    ]
}

/// A process's user plus system CPU time so far, from /proc/<pid>/stat.
pub fn cpu_time(pid: u32, ticks_per_second: f64) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("an unreadable /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15.
    let ticks: u64 = fields
        .get(11)
        .zip(fields.get(12))
        .map(|(u, s)| anyhow::Ok(u.parse::<u64>()? + s.parse::<u64>()?))
        .context("no utime/stime in /proc stat")??;
    Ok(Duration::from_secs_f64(ticks as f64 / ticks_per_second))
}

/// Seconds of CPU the process uses per second while nobody calls it, sampled over `sample`.
pub fn idle_cpu_per_second(
    pid: u32,
    ticks_per_second: f64,
    sample: Duration,
) -> anyhow::Result<f64> {
    let before = cpu_time(pid, ticks_per_second)?;
    std::thread::sleep(sample);
    let after = cpu_time(pid, ticks_per_second)?;
    Ok(after.saturating_sub(before).as_secs_f64() / sample.as_secs_f64())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`); 100 if it cannot be asked.
pub fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
