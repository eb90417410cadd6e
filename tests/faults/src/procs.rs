//! The cluster's node processes: `gatehouse serve`, each on a loopback address of its own
//! (127.0.0.1N) so that firewall rules can cut one pair of nodes; SIGKILL, SIGSTOP/SIGCONT and
//! restarts from the data directory. A node started on port 0 records the address it got and
//! binds it again when restarted. Peers reach each node through its delay proxy
//! ([`crate::proxy`], on 127.0.1.1N), whose address the node advertises; clients connect directly.

use crate::proxy::Proxy;
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One node, running or not.
#[derive(Debug)]
pub struct Node {
    pub id: u64,
    /// `host:port` of its gRPC listener, as recorded on its first start.
    pub grpc: String,
    /// `host:port` of its HTTP listener (MCP at `/mcp`, A2A at `/a2a`).
    pub http: String,
    /// `host:port` of its delay proxy: the gRPC address it advertises, which peers reach it by.
    pub advertised: String,
    child: Option<Child>,
    paused: bool,
}

impl Node {
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn ip(&self) -> String {
        ip_of(self.id)
    }
}

/// The loopback address of node `id`.
pub fn ip_of(id: u64) -> String {
    format!("127.0.0.{}", 10 + id)
}

/// The loopback address of node `id`'s delay proxy: apart from every node's, so that a firewall
/// rule against a node's address never matches its proxy's, or another's.
pub fn proxy_ip_of(id: u64) -> String {
    format!("127.0.1.{}", 10 + id)
}

/// Every node of the campaign, by id.
#[derive(Debug)]
pub struct Procs {
    bin: PathBuf,
    dir: PathBuf,
    pub nodes: BTreeMap<u64, Node>,
    /// Each node's delay proxy, started before the node and kept across its restarts.
    proxies: BTreeMap<u64, Proxy>,
}

/// The nodes' log filter: `warn`, or `GATEHOUSE_FAULTS_NODE_LOG` (say `warn,openraft=info` to
/// see elections in `node-N.log`).
fn node_log() -> String {
    std::env::var("GATEHOUSE_FAULTS_NODE_LOG").unwrap_or_else(|_| "warn".to_owned())
}

/// The upper bound of the election timeout `TIMINGS` sets: the availability goal is writes
/// back within it plus a second.
pub const ELECTION_MAX_MS: u64 = 600;

/// Raft timings for a cluster on loopback: elections in well under a second.
const TIMINGS: [&str; 6] = [
    "--heartbeat-ms",
    "50",
    "--election-min-ms",
    "300",
    "--election-max-ms",
    "600",
];

impl Procs {
    pub fn new(bin: PathBuf, dir: PathBuf) -> Procs {
        Procs {
            bin,
            dir,
            nodes: BTreeMap::new(),
            proxies: BTreeMap::new(),
        }
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// Starts node `id` for the first time, with `extra` arguments (`--bootstrap`, `--join`).
    pub fn start(&mut self, id: u64, extra: &[&str], token: Option<&str>) -> anyhow::Result<()> {
        let ip = ip_of(id);
        let proxy = Proxy::start(format!("{}:0", proxy_ip_of(id)).parse()?)
            .with_context(|| format!("node {id}'s delay proxy"))?;
        let advertised = proxy.addr().to_string();
        self.proxies.insert(id, proxy);
        let (child, grpc, http) = self.spawn(id, &format!("{ip}:0"), extra, token)?;
        self.proxies[&id].set_target(grpc.parse().context("the node's gRPC address")?);
        self.nodes.insert(
            id,
            Node {
                id,
                grpc,
                http,
                advertised,
                child: Some(child),
                paused: false,
            },
        );
        Ok(())
    }

    /// Starts node `id` again from its data directory, where it was.
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.nodes.get(&id).context("an unknown node")?;
        if node.running() {
            return Ok(());
        }
        let grpc = node.grpc.clone();
        let (child, bound, _) = self.spawn(id, &grpc, &[], None)?;
        if bound != grpc {
            bail!("node {id} came back on {bound}, not {grpc}");
        }
        let node = self.nodes.get_mut(&id).context("an unknown node")?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    fn spawn(
        &self,
        id: u64,
        grpc: &str,
        extra: &[&str],
        token: Option<&str>,
    ) -> anyhow::Result<(Child, String, String)> {
        let data = self.data_dir(id);
        let advertised = self.proxies.get(&id).context("no delay proxy")?.addr();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{id}.log")))?;
        let mut command = Command::new(&self.bin);
        command
            .args(["serve", "--node-id", &id.to_string()])
            .arg("--data-dir")
            .arg(&data)
            .args(["--grpc", grpc, "--http", &format!("{}:0", ip_of(id))])
            .args(["--advertise-grpc", &advertised.to_string()])
            .args(TIMINGS)
            // The campaign's MCP client calls each node by its own loopback address.
            .args(["--mcp-allowed-host", "*"])
            .args(extra)
            .env("RUST_LOG", node_log())
            // The campaign's own setting, not the node's (which warns of unknown GATEHOUSE_*).
            .env_remove("GATEHOUSE_FAULTS_NODE_LOG")
            .stdout(Stdio::piped())
            .stderr(log);
        match token {
            Some(token) => command.env("GATEHOUSE_TOKEN", token),
            None => command.env_remove("GATEHOUSE_TOKEN"),
        };
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        // "node N serving gRPC on ADDR and HTTP on ADDR"; the rest is drained so the node never
        // writes into a full pipe.
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let line = lines.next().and_then(Result::ok).unwrap_or_default();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
        let words: Vec<&str> = line.split_whitespace().collect();
        let address_of = |listener: &str| {
            words
                .iter()
                .position(|w| *w == listener)
                .and_then(|i| words.get(i + 2))
                .map(|s| (*s).to_owned())
        };
        let (Some(grpc), Some(http)) = (address_of("gRPC"), address_of("HTTP")) else {
            let _ = child.kill();
            bail!(
                "node {id} did not start: it said {line:?}; see its log in {}",
                self.dir.display()
            );
        };
        Ok((child, grpc, http))
    }

    /// SIGKILL.
    pub fn kill(&mut self, id: u64) {
        if let Some(node) = self.nodes.get_mut(&id)
            && let Some(mut child) = node.child.take()
        {
            let _ = child.kill();
            let _ = child.wait();
            node.paused = false;
        }
    }

    /// SIGTERM, and wait for the node to stop (SIGKILL after `grace`).
    pub fn stop(&mut self, id: u64, grace: std::time::Duration) {
        let Some(node) = self.nodes.get_mut(&id) else {
            return;
        };
        let Some(mut child) = node.child.take() else {
            return;
        };
        if node.paused {
            signal(child.id(), "CONT");
            node.paused = false;
        }
        signal(child.id(), "TERM");
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGSTOP: the process is frozen, its sockets open and silent.
    pub fn pause(&mut self, id: u64) {
        if let Some(node) = self.nodes.get_mut(&id)
            && let Some(child) = &node.child
            && !node.paused
        {
            signal(child.id(), "STOP");
            node.paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        if let Some(node) = self.nodes.get_mut(&id)
            && let Some(child) = &node.child
            && node.paused
        {
            signal(child.id(), "CONT");
            node.paused = false;
        }
    }

    /// Ids of the nodes whose process runs and is not paused.
    pub fn live(&self) -> Vec<u64> {
        self.nodes
            .values()
            .filter(|n| n.running() && !n.paused)
            .map(|n| n.id)
            .collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Delays every chunk to node `id` and from it, through its proxy, by `delay`.
    pub fn set_delay(&self, id: u64, delay: std::time::Duration) {
        if let Some(proxy) = self.proxies.get(&id) {
            proxy.set_delay(delay);
        }
    }

    /// No proxy delays anything.
    pub fn clear_delays(&self) {
        for proxy in self.proxies.values() {
            proxy.set_delay(std::time::Duration::ZERO);
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `kill -SIG pid`: the crate forbids `unsafe`, and the signal is the whole point.
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}
