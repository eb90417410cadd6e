//! Validation: the raw settings, every layer laid, made into a [`ServeConfig`] step by step. Each
//! step reads its own settings and returns what it found wrong with them; the problems of every
//! step are reported at once, in the order the steps run.

use super::jwt::jwt_issuers;
use super::otlp::otlp_settings;
use super::problems::{Checked, ConfigErrors, Problems};
use super::raw::RawServeConfig;
use super::serve::{
    A2aAdvertised, DEFAULT_READY_MAX_LAG, JoinKey, MAX_HTTP_THREADS, RaftTimings, ServeConfig,
    Start,
};
use super::tls::{TlsFiles, tls_settings};
use gatehouse_actors::ActorSettings;
use gatehouse_cluster::grants::{CredentialConfig, Grants, grants_from_config};
use gatehouse_cluster::net::OpenNetwork;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_gateway::metrics::{MetricsSettings, ScrapeToken};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

impl RawServeConfig {
    /// The validated configuration, or every problem found. `token` is the admin key a joining
    /// node presents.
    pub fn validate(self, token: Option<String>) -> Result<ServeConfig, ConfigErrors> {
        let mut problems = Problems::default();
        let node_id = problems.keep(node_id(self.node_id));
        let data_dir = problems.keep(data_dir(self.data_dir));
        let grpc = problems.keep(listen_addr("grpc", self.grpc));
        let http = problems.keep(listen_addr("http", self.http));
        let advertise_grpc = problems.keep(advertised_addr(self.advertise_grpc));
        let start = problems.keep(start(
            self.bootstrap,
            self.join,
            self.join_token_file,
            token,
        ));
        let raft = problems.keep(raft_timings(
            self.heartbeat_ms,
            self.election_min_ms,
            self.election_max_ms,
            self.install_snapshot_timeout_ms,
            self.snapshot_every,
        ));
        let actors = problems.keep(actor_settings(
            self.home_unreachable_after_ms,
            self.passivate_after_secs,
            self.call_retention_hours,
            raft.election_max,
        ));
        let jwt = problems.keep(jwt_issuers(self.jwt));
        let mcp = problems.keep(mcp_settings(
            self.mcp_max_body_bytes,
            self.mcp_approval_wait_ms,
            self.mcp_allowed_origins,
            self.mcp_allowed_hosts,
        ));
        let http_threads = problems.keep(http_threads(self.http_threads));
        let a2a = problems.keep(a2a_advertised(self.a2a_public_url, self.a2a_grpc_url));
        let otlp = problems.keep(otlp_settings(self.otlp_endpoint, self.otlp_service_name));
        let tls = problems.keep(tls_settings(TlsFiles {
            cert: self.tls_cert,
            key: self.tls_key,
            ca: self.tls_ca,
            peer_mtls: self.peer_mtls,
        }));
        let grants = problems.keep(grants(
            &self.credential,
            self.credentials_file.as_deref(),
            &self.builtins,
            &data_dir,
        ));
        let metrics = problems.keep(metrics_settings(
            self.metrics_tenant_labels,
            self.metrics_token_file,
        ));
        problems.or_value(ServeConfig {
            node_id,
            data_dir,
            grpc,
            advertise_grpc,
            http,
            start,
            raft,
            actors,
            jwt,
            mcp,
            ready_max_lag: self.ready_max_lag.unwrap_or(DEFAULT_READY_MAX_LAG),
            http_threads,
            a2a,
            otlp,
            tls,
            grants,
            metrics,
            filter: Arc::new(OpenNetwork),
        })
    }
}

/// `node-id`: required, and never 0.
fn node_id(id: Option<u64>) -> Checked<u64> {
    match id {
        Some(0) | None => Checked::with(0, vec!["node-id: required, 1 or more".to_owned()]),
        Some(id) => Checked::ok(id),
    }
}

/// `data-dir`: required.
fn data_dir(dir: Option<PathBuf>) -> Checked<PathBuf> {
    match dir {
        Some(dir) => Checked::ok(dir),
        None => Checked::with(PathBuf::new(), vec!["data-dir: required".to_owned()]),
    }
}

/// The listen address setting `name` gives: an IP address and a port, `127.0.0.1:0` when not
/// given.
fn listen_addr(name: &str, value: Option<String>) -> Checked<SocketAddr> {
    let text = value.unwrap_or_else(|| "127.0.0.1:0".to_owned());
    match text.parse() {
        Ok(addr) => Checked::ok(addr),
        Err(_) => Checked::with(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            vec![format!(
                "{name}: {text:?} is not host:port (an IP address and a port)"
            )],
        ),
    }
}

/// Threads for the HTTP listener: one per core unless set, at most [`MAX_HTTP_THREADS`].
fn http_threads(value: Option<usize>) -> Checked<usize> {
    match value {
        None => Checked::ok(crate::front::threads()),
        Some(n) if n <= MAX_HTTP_THREADS => Checked::ok(n),
        Some(n) => Checked::with(
            MAX_HTTP_THREADS,
            vec![format!(
                "http-threads: {n} is more than {MAX_HTTP_THREADS}; one per core is the most \
                 that helps"
            )],
        ),
    }
}

/// A `host:port` to dial this node at: a name or an IP address, and a port other than 0.
fn advertised_addr(value: Option<String>) -> Checked<Option<String>> {
    let Some(text) = value else {
        return Checked::ok(None);
    };
    let port = text
        .rsplit_once(':')
        .filter(|(host, _)| !host.is_empty() && !host.contains("://"))
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .filter(|port| *port != 0);
    match port {
        Some(_) => Checked::ok(Some(text)),
        None => Checked::with(
            None,
            vec![format!(
                "advertise-grpc: {text:?} is not host:port (a name or an IP address, and a port \
                 other than 0)"
            )],
        ),
    }
}

/// How the node starts: `bootstrap`; `join`, with the admin key from `token` or from
/// `join-token-file`; or neither, carrying on from the data directory.
fn start(
    bootstrap: bool,
    join: Option<String>,
    join_token_file: Option<PathBuf>,
    token: Option<String>,
) -> Checked<Start> {
    let mut problems = Vec::new();
    let start = match (bootstrap, join) {
        (true, Some(_)) => {
            problems.push("bootstrap and join: give one or the other".to_owned());
            Start::Resume
        }
        (true, None) => Start::Bootstrap,
        (false, Some(addr)) => match (token, join_token_file) {
            (Some(token), None) => Start::Join {
                addr,
                key: JoinKey::Token(token),
            },
            (None, Some(path)) => Start::Join {
                addr,
                key: JoinKey::File(path),
            },
            (Some(_), Some(_)) => {
                problems.push(
                    "join-token-file: give it or --token/GATEHOUSE_TOKEN, not both".to_owned(),
                );
                Start::Resume
            }
            (None, None) => {
                problems.push(
                    "join: needs the cluster's admin key (--token, GATEHOUSE_TOKEN or \
                     join-token-file)"
                        .to_owned(),
                );
                Start::Resume
            }
        },
        (false, None) => {
            if join_token_file.is_some() {
                problems.push("join-token-file: only with join".to_owned());
            }
            Start::Resume
        }
    };
    Checked::with(start, problems)
}

/// The Raft timings, over their defaults: the election timeout's bounds in order, the heartbeat
/// below both, and snapshots taken at some point.
fn raft_timings(
    heartbeat_ms: Option<u64>,
    election_min_ms: Option<u64>,
    election_max_ms: Option<u64>,
    install_snapshot_timeout_ms: Option<u64>,
    snapshot_every: Option<u64>,
) -> Checked<RaftTimings> {
    let mut problems = Vec::new();
    let defaults = RaftTimings::default();
    let raft = RaftTimings {
        heartbeat: heartbeat_ms.map_or(defaults.heartbeat, Duration::from_millis),
        election_min: election_min_ms.map_or(defaults.election_min, Duration::from_millis),
        election_max: election_max_ms.map_or(defaults.election_max, Duration::from_millis),
        install_snapshot_timeout: install_snapshot_timeout_ms
            .map_or(defaults.install_snapshot_timeout, Duration::from_millis),
        snapshot_every: snapshot_every.unwrap_or(defaults.snapshot_every),
        logs_kept_after_snapshot: defaults.logs_kept_after_snapshot,
    };
    if raft.election_min >= raft.election_max {
        problems.push(format!(
            "election-min-ms ({:?}) must be below election-max-ms ({:?})",
            raft.election_min, raft.election_max
        ));
    }
    if raft.heartbeat >= raft.election_min {
        problems.push(format!(
            "heartbeat-ms ({:?}) must be below election-min-ms ({:?})",
            raft.heartbeat, raft.election_min
        ));
    }
    if raft.snapshot_every == 0 {
        problems.push("snapshot-every: must be above 0".to_owned());
    }
    Checked::with(raft, problems)
}

/// The tenant actors' settings, over their defaults. A home is declared unreachable only after
/// `election_max`, the longest the cluster may take to elect around it.
fn actor_settings(
    home_unreachable_after_ms: Option<u64>,
    passivate_after_secs: Option<u64>,
    call_retention_hours: Option<u64>,
    election_max: Duration,
) -> Checked<ActorSettings> {
    let mut problems = Vec::new();
    let mut actors = ActorSettings::default();
    if let Some(ms) = home_unreachable_after_ms {
        actors.home_unreachable_after = Duration::from_millis(ms);
    }
    if actors.home_unreachable_after <= election_max {
        problems.push(format!(
            "home-unreachable-after-ms ({:?}) must be above election-max-ms ({:?}): a home \
             is not lost before the cluster could elect around it",
            actors.home_unreachable_after, election_max
        ));
    }
    match passivate_after_secs {
        Some(0) => problems.push("passivate-after-secs: must be above 0".to_owned()),
        Some(s) => actors.passivate_after = Duration::from_secs(s),
        None => {}
    }
    match call_retention_hours {
        Some(0) => problems.push("call-retention-hours: must be above 0".to_owned()),
        Some(h) => actors.retention = Duration::from_secs(h * 3600),
        None => {}
    }
    Checked::with(actors, problems)
}

/// The longest `mcp-approval-wait-ms` may be.
pub const MAX_APPROVAL_WAIT: Duration = Duration::from_secs(10);

/// The MCP front's settings, over their defaults; no browser origin is allowed unless named.
fn mcp_settings(
    max_body_bytes: Option<usize>,
    approval_wait_ms: Option<u64>,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
) -> Checked<McpSettings> {
    let mut problems = Vec::new();
    let mut mcp = McpSettings::default();
    match max_body_bytes {
        Some(0) => problems.push("mcp-max-body-bytes: must be above 0".to_owned()),
        Some(bytes) => mcp.max_body_bytes = bytes,
        None => {}
    }
    match approval_wait_ms {
        Some(ms) if ms > MAX_APPROVAL_WAIT.as_millis() as u64 => problems.push(format!(
            "mcp-approval-wait-ms: at most {} (a client's request must not hang)",
            MAX_APPROVAL_WAIT.as_millis()
        )),
        Some(ms) => mcp.approval_wait = Duration::from_millis(ms),
        None => {}
    }
    mcp.allowed_origins = allowed_origins;
    if !allowed_hosts.is_empty() {
        mcp.allowed_hosts = allowed_hosts;
    }
    Checked::with(mcp, problems)
}

/// The addresses the Agent Card gives: an http(s) URL without its trailing slash, and a gRPC
/// `host:port`.
fn a2a_advertised(public_url: Option<String>, grpc_url: Option<String>) -> Checked<A2aAdvertised> {
    let mut problems = Vec::new();
    let a2a = A2aAdvertised {
        public_url: public_url.map(|url| url.trim_end_matches('/').to_owned()),
        grpc_url,
    };
    if let Some(url) = &a2a.public_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        problems.push(format!(
            "a2a-public-url: {url:?} must be an http:// or https:// URL"
        ));
    }
    if let Some(addr) = &a2a.grpc_url
        && (addr.is_empty() || addr.contains("://"))
    {
        problems.push(format!(
            "a2a-grpc-url: {addr:?} must be host:port, as A2A cards give gRPC addresses"
        ));
    }
    Checked::with(a2a, problems)
}

/// The credentials and built-in tools tenants' upstreams may use on this node, read and checked
/// by `gatehouse_cluster::grants`.
fn grants(
    credentials: &[CredentialConfig],
    credentials_file: Option<&Path>,
    builtins: &[String],
    data_dir: &Path,
) -> Checked<Grants> {
    let mut problems = Vec::new();
    let grants = grants_from_config(
        credentials,
        credentials_file,
        builtins,
        data_dir,
        &mut problems,
    );
    Checked::with(grants, problems)
}

/// Whether `/metrics` names tenants, and the token it requires, read from its file at start.
fn metrics_settings(tenant_labels: bool, token_file: Option<PathBuf>) -> Checked<MetricsSettings> {
    let mut problems = Vec::new();
    let token = token_file.and_then(|path| match ScrapeToken::read(&path) {
        Ok(token) => Some(token),
        Err(why) => {
            problems.push(format!("metrics-token-file: {why}"));
            None
        }
    });
    Checked::with(
        MetricsSettings {
            tenant_labels,
            token,
        },
        problems,
    )
}
