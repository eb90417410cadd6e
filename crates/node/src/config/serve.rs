//! The validated configuration a node starts from, and the parts of it that are more than one
//! setting.

use gatehouse_actors::ActorSettings;
use gatehouse_cluster::grants::Grants;
use gatehouse_cluster::net::SharedFilter;
use gatehouse_cluster::tls::NodeTls;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_gateway::auth::JwtIssuerConfig;
use gatehouse_gateway::metrics::MetricsSettings;
use gatehouse_gateway::telemetry::OtlpSettings;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// What a node starts from: every setting read and checked, defaults filled in.
#[derive(Clone)]
pub struct ServeConfig {
    pub node_id: u64,
    pub data_dir: PathBuf,
    pub grpc: SocketAddr,
    /// Where peers reach the gRPC listener, when not where it listens.
    pub advertise_grpc: Option<String>,
    pub http: SocketAddr,
    pub start: Start,
    pub raft: RaftTimings,
    pub actors: ActorSettings,
    /// Trusted JWT issuers, for the HTTP fronts.
    pub jwt: Vec<JwtIssuerConfig>,
    pub mcp: McpSettings,
    /// `/readyz` fails while applied trails the leader's commit index by more entries.
    pub ready_max_lag: u64,
    /// Threads serving the HTTP listener; 0: the node's shared runtime (`front`).
    pub http_threads: usize,
    /// Where A2A peers reach this node, when not where it listens.
    pub a2a: A2aAdvertised,
    /// Where spans are exported; `None`: nowhere.
    pub otlp: Option<OtlpSettings>,
    /// TLS on both listeners and towards peers, when configured.
    pub tls: Option<NodeTls>,
    /// The credentials and built-in tools tenants' upstreams may use on this node.
    pub grants: Grants,
    /// Whether `/metrics` names tenants, and the token it requires.
    pub metrics: MetricsSettings,
    /// Between this node and its peers; only tests change it.
    pub filter: SharedFilter,
}

impl fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeConfig")
            .field("node_id", &self.node_id)
            .field("data_dir", &self.data_dir)
            .field("grpc", &self.grpc)
            .field("advertise_grpc", &self.advertise_grpc)
            .field("http", &self.http)
            .field("start", &self.start)
            .field("raft", &self.raft)
            .field("actors", &self.actors)
            .field("jwt", &self.jwt)
            .field("mcp", &self.mcp)
            .field("ready_max_lag", &self.ready_max_lag)
            .field("http_threads", &self.http_threads)
            .field("a2a", &self.a2a)
            .field("otlp", &self.otlp)
            .field("tls", &self.tls)
            .field("grants", &self.grants)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

/// How the node comes into its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    Bootstrap,
    Join {
        addr: String,
        key: JoinKey,
    },
    /// Carry on from the data directory.
    Resume,
}

/// The admin key a joining node presents.
#[derive(Clone, PartialEq, Eq)]
pub enum JoinKey {
    Token(String),
    /// Read when joining; a missing or empty file is waited for as long as the join retries.
    File(PathBuf),
}

impl JoinKey {
    /// The key, without the file's trailing newline.
    pub fn read(&self) -> anyhow::Result<String> {
        match self {
            JoinKey::Token(token) => Ok(token.clone()),
            JoinKey::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
                let key = text.trim();
                anyhow::ensure!(!key.is_empty(), "{} is empty", path.display());
                Ok(key.to_owned())
            }
        }
    }
}

// The key itself never reaches a log line.
impl fmt::Debug for JoinKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinKey::Token(_) => f.write_str("Token(..)"),
            JoinKey::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// Raft timings. The defaults suit one region (sub-millisecond to a few milliseconds between
/// nodes); the README gives settings for regions 50-150 ms apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTimings {
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
    pub install_snapshot_timeout: Duration,
    pub snapshot_every: u64,
    /// Log entries kept behind a snapshot, so a follower a little behind catches up from the
    /// log rather than a whole snapshot.
    pub logs_kept_after_snapshot: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        RaftTimings {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(500),
            election_max: Duration::from_millis(1_000),
            install_snapshot_timeout: Duration::from_secs(10),
            snapshot_every: 10_000,
            logs_kept_after_snapshot: 1_000,
        }
    }
}

/// How far (in log entries) a node may trail the leader's commit index and still be ready.
pub const DEFAULT_READY_MAX_LAG: u64 = 1_000;

/// The most threads `http-threads` may ask for.
pub const MAX_HTTP_THREADS: usize = 256;

/// The addresses the Agent Card gives, when peers reach the node through a proxy or a published
/// port rather than where it listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct A2aAdvertised {
    pub public_url: Option<String>,
    pub grpc_url: Option<String>,
}
