//! `gatehouse serve` configuration: a TOML file whose keys are the flags' names, `GATEHOUSE_*`
//! environment variables over the file, flags over both, defaults under all, and one `validate`
//! that reports every problem at once.

use gatehouse_actors::ActorSettings;
use gatehouse_cluster::ENV_PREFIX;
use gatehouse_cluster::grants::{CredentialConfig, Grants, grants_from_config};
use gatehouse_cluster::net::{OpenNetwork, SharedFilter};
use gatehouse_cluster::tls::NodeTls;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_gateway::auth::JwtIssuerConfig;
use gatehouse_gateway::metrics::{MetricsSettings, ScrapeToken};
use gatehouse_gateway::telemetry::OtlpSettings;
use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The file's shape, and the flags': every field optional so two can be overlaid.
#[derive(Debug, Clone, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RawServeConfig {
    /// This node's Raft id (>= 1). Never reuse the id of a node that was ever a member.
    #[arg(long)]
    pub node_id: Option<u64>,
    /// Where the node keeps its Raft log, state, keys and identity.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// gRPC listen address (port 0: pick one on first start, and keep it after).
    #[arg(long)]
    pub grpc: Option<String>,
    /// HTTP listen address: health, readiness, and the MCP front at `/mcp`.
    #[arg(long)]
    pub http: Option<String>,
    /// Create a one-node cluster and write an admin API key to DATA_DIR/admin.key.
    #[arg(long)]
    #[serde(default)]
    pub bootstrap: bool,
    /// Ask the member at this gRPC address to add this node as a learner.
    #[arg(long, value_name = "ADDR")]
    pub join: Option<String>,
    /// With --join: read the admin key from this file instead of --token or GATEHOUSE_TOKEN,
    /// waiting while joining for it to appear (a first member's DATA_DIR/admin.key on a
    /// shared volume).
    #[arg(long, value_name = "PATH")]
    pub join_token_file: Option<PathBuf>,
    /// Raft heartbeat interval.
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// Lower bound of the randomised election timeout.
    #[arg(long)]
    pub election_min_ms: Option<u64>,
    /// Upper bound of the randomised election timeout.
    #[arg(long)]
    pub election_max_ms: Option<u64>,
    /// How long one snapshot chunk may take to install on a follower.
    #[arg(long)]
    pub install_snapshot_timeout_ms: Option<u64>,
    /// Build a snapshot (and purge the log behind it) after this many new entries.
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// A tenant's home that has not answered the leader for this long is replaced at once
    /// (pending and approved calls move to the new home).
    #[arg(long)]
    pub home_unreachable_after_ms: Option<u64>,
    /// A tenant actor idle for this long stops, unless it is home to unfinished calls.
    #[arg(long)]
    pub passivate_after_secs: Option<u64>,
    /// Finished calls and idempotency records are kept this long, then purged.
    #[arg(long)]
    pub call_retention_hours: Option<u64>,
    /// The largest request body `/mcp` reads (default 1 MiB); a bigger one is answered 413.
    #[arg(long)]
    pub mcp_max_body_bytes: Option<usize>,
    /// How long a `tools/call` that needs approval waits for it before answering
    /// `approval_pending` (default 0, at most 10000).
    #[arg(long)]
    pub mcp_approval_wait_ms: Option<u64>,
    /// Browser origins allowed to call `/mcp` (`https://app.example.com:443`,
    /// `http://localhost:*`). A request with any other `Origin` header is refused with 403;
    /// none is allowed by default. Requests without an `Origin` header are not browsers'.
    #[arg(long = "mcp-allowed-origin", value_name = "ORIGIN")]
    #[serde(default)]
    pub mcp_allowed_origins: Vec<String>,
    /// `Host` header values `/mcp` answers (`gatehouse.example.com`, `10.0.0.5:7400`), against
    /// DNS rebinding. Default: the loopback names; `*` accepts any host.
    #[arg(long = "mcp-allowed-host", value_name = "HOST")]
    #[serde(default)]
    pub mcp_allowed_hosts: Vec<String>,
    /// `/readyz` answers 503 while this node's applied index trails the leader's commit index
    /// by more than this many entries (default 1000).
    #[arg(long)]
    pub ready_max_lag: Option<u64>,
    /// The base URL A2A peers reach this node's HTTP listener at (`https://gatehouse.example`),
    /// for the Agent Card's JSON-RPC interface. Default: the `Host` the peer used.
    #[arg(long)]
    pub a2a_public_url: Option<String>,
    /// The `host:port` A2A peers reach this node's gRPC listener at, for the Agent Card.
    /// Default: the node's gRPC address.
    #[arg(long)]
    pub a2a_grpc_url: Option<String>,
    /// An OpenTelemetry collector's OTLP/gRPC address (`http://127.0.0.1:4317`): the node's
    /// `call` and `execute` spans are exported there in batches. None by default: nothing is
    /// exported and no exporter runs. Plain `http://` only; put a collector beside the node to
    /// forward over TLS.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// The `service.name` the exported spans carry (default `gatehouse`); the node id is their
    /// `service.instance.id`.
    #[arg(long)]
    pub otlp_service_name: Option<String>,
    /// PEM certificate chain of this node. With `tls-key` (and `tls-ca`), the gRPC and the HTTP
    /// listener serve TLS only, and this node reaches its peers over TLS. Its subject alternative
    /// names must cover the address peers and clients use (the IP or name in `grpc`/`join`).
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls-cert`.
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// PEM certificate(s) of the CA this node trusts for its peers' certificates (required with
    /// `tls-cert`; give the system bundle if the nodes' certificates come from a public CA).
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Mutual TLS between nodes (needs `tls-cert`, `tls-key`, `tls-ca`): this node presents its
    /// certificate when it calls a peer, and refuses Raft RPCs, forwarded writes and joins that
    /// come over a connection without a client certificate from `tls-ca`. Other clients (CLI,
    /// approvers, MCP and A2A) still connect without one.
    #[arg(long)]
    #[serde(default)]
    pub peer_mtls: bool,
    /// JWT issuers whose tokens the HTTP fronts accept (file only: one `[[jwt]]` table each).
    #[arg(skip)]
    #[serde(default)]
    pub jwt: Vec<JwtIssuerConfig>,
    /// The credentials Upstreams may name, and the tenants that may name each (file only: one
    /// `[[credential]]` table each; see `gatehouse_cluster::grants`).
    #[arg(skip)]
    #[serde(default)]
    pub credential: Vec<CredentialConfig>,
    /// A TOML file of more `[[credential]]` tables, read at start: upstream secrets kept apart
    /// from the rest of the configuration. Never inside data-dir.
    #[arg(long, value_name = "PATH")]
    pub credentials_file: Option<PathBuf>,
    /// Built-in tools (echo, sleep, fail, transfer) enabled for a tenant, as `TENANT:TOOL`, or
    /// `TENANT:*` for all of them. None by default: a tenant's built-in Upstream is refused.
    #[arg(long = "builtin", value_name = "TENANT:TOOL")]
    #[serde(default)]
    pub builtins: Vec<String>,
    /// Label call metrics and pending approvals with tenant and tool names, and circuit
    /// breakers with upstream names. Off by default: `/metrics` names no tenant.
    #[arg(long)]
    #[serde(default)]
    pub metrics_tenant_labels: bool,
    /// A file holding the token `/metrics` then requires (`Authorization: Bearer <token>`),
    /// read at start. Without it `/metrics` is open, as `/healthz` and `/readyz` always are.
    #[arg(long, value_name = "PATH")]
    pub metrics_token_file: Option<PathBuf>,
}

/// `GATEHOUSE_*` variables that are not settings of the file: the command-line client's address,
/// key (a joining node's key is `--token`'s) and CA, the file's own path (`--config`), and the
/// test tooling's Python environment.
pub const NOT_SERVER_SETTINGS: [&str; 5] = [
    "GATEHOUSE_ADDR",
    "GATEHOUSE_TOKEN",
    "GATEHOUSE_CA",
    "GATEHOUSE_CONFIG",
    "GATEHOUSE_VENV",
];

/// Settings whose value is a list: comma-separated in the environment.
const LIST_SETTINGS: [&str; 3] = ["mcp-allowed-origins", "mcp-allowed-hosts", "builtins"];

/// Settings made of tables, which only the file gives, and where they go.
const FILE_ONLY: [(&str, &str); 2] = [
    ("jwt", "JWT issuers are set in the file's [[jwt]] tables"),
    (
        "credential",
        "credentials are set in the file's [[credential]] tables, or in credentials-file",
    ),
];

impl RawServeConfig {
    /// The settings `vars` (the process environment, in production) give: every `GATEHOUSE_*`
    /// variable but [`NOT_SERVER_SETTINGS`]. A variable that names no setting, or whose value does
    /// not fit it, is a problem; all of them are reported at once. JWT issuers and credentials
    /// come from the file only.
    pub fn from_env(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<RawServeConfig, ConfigErrors> {
        let mut table = toml::Table::new();
        let mut problems = Vec::new();
        let mut vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, _)| {
                name.starts_with(ENV_PREFIX) && !NOT_SERVER_SETTINGS.contains(&name.as_str())
            })
            .collect();
        vars.sort();
        for (name, value) in vars {
            let key = name[ENV_PREFIX.len()..]
                .to_ascii_lowercase()
                .replace('_', "-");
            if let Some((_, why)) = FILE_ONLY.iter().find(|(setting, _)| *setting == key) {
                problems.push(format!("{name}: {why}"));
                continue;
            }
            match env_value(&key, &value) {
                Ok(value) => {
                    table.insert(key, value);
                }
                Err(why) => problems.push(format!("{name}={value:?}: {why}")),
            }
        }
        if !problems.is_empty() {
            return Err(ConfigErrors(problems));
        }
        table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigErrors(vec![format!("environment: {e}")]))
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// `self` (the flags) over `file`.
    pub fn over(self, file: RawServeConfig) -> RawServeConfig {
        RawServeConfig {
            node_id: self.node_id.or(file.node_id),
            data_dir: self.data_dir.or(file.data_dir),
            grpc: self.grpc.or(file.grpc),
            http: self.http.or(file.http),
            bootstrap: self.bootstrap || file.bootstrap,
            join: self.join.or(file.join),
            join_token_file: self.join_token_file.or(file.join_token_file),
            heartbeat_ms: self.heartbeat_ms.or(file.heartbeat_ms),
            election_min_ms: self.election_min_ms.or(file.election_min_ms),
            election_max_ms: self.election_max_ms.or(file.election_max_ms),
            install_snapshot_timeout_ms: self
                .install_snapshot_timeout_ms
                .or(file.install_snapshot_timeout_ms),
            snapshot_every: self.snapshot_every.or(file.snapshot_every),
            home_unreachable_after_ms: self
                .home_unreachable_after_ms
                .or(file.home_unreachable_after_ms),
            passivate_after_secs: self.passivate_after_secs.or(file.passivate_after_secs),
            call_retention_hours: self.call_retention_hours.or(file.call_retention_hours),
            ready_max_lag: self.ready_max_lag.or(file.ready_max_lag),
            a2a_public_url: self.a2a_public_url.or(file.a2a_public_url),
            a2a_grpc_url: self.a2a_grpc_url.or(file.a2a_grpc_url),
            otlp_endpoint: self.otlp_endpoint.or(file.otlp_endpoint),
            otlp_service_name: self.otlp_service_name.or(file.otlp_service_name),
            tls_cert: self.tls_cert.or(file.tls_cert),
            tls_key: self.tls_key.or(file.tls_key),
            tls_ca: self.tls_ca.or(file.tls_ca),
            peer_mtls: self.peer_mtls || file.peer_mtls,
            jwt: if self.jwt.is_empty() {
                file.jwt
            } else {
                self.jwt
            },
            mcp_max_body_bytes: self.mcp_max_body_bytes.or(file.mcp_max_body_bytes),
            mcp_approval_wait_ms: self.mcp_approval_wait_ms.or(file.mcp_approval_wait_ms),
            mcp_allowed_origins: if self.mcp_allowed_origins.is_empty() {
                file.mcp_allowed_origins
            } else {
                self.mcp_allowed_origins
            },
            mcp_allowed_hosts: if self.mcp_allowed_hosts.is_empty() {
                file.mcp_allowed_hosts
            } else {
                self.mcp_allowed_hosts
            },
            credential: if self.credential.is_empty() {
                file.credential
            } else {
                self.credential
            },
            credentials_file: self.credentials_file.or(file.credentials_file),
            builtins: if self.builtins.is_empty() {
                file.builtins
            } else {
                self.builtins
            },
            metrics_tenant_labels: self.metrics_tenant_labels || file.metrics_tenant_labels,
            metrics_token_file: self.metrics_token_file.or(file.metrics_token_file),
        }
    }

    /// The validated configuration, or every problem found. `token` is the admin key a joining
    /// node presents.
    pub fn validate(self, token: Option<String>) -> Result<ServeConfig, ConfigErrors> {
        let mut problems = Vec::new();
        let node_id = match self.node_id {
            Some(0) | None => {
                problems.push("node-id: required, 1 or more".to_owned());
                0
            }
            Some(id) => id,
        };
        let data_dir = self.data_dir.unwrap_or_else(|| {
            problems.push("data-dir: required".to_owned());
            PathBuf::new()
        });
        let mut addr = |name: &str, value: Option<String>| -> SocketAddr {
            let text = value.unwrap_or_else(|| "127.0.0.1:0".to_owned());
            text.parse().unwrap_or_else(|_| {
                problems.push(format!(
                    "{name}: {text:?} is not host:port (an IP address and a port)"
                ));
                SocketAddr::from(([127, 0, 0, 1], 0))
            })
        };
        let grpc = addr("grpc", self.grpc);
        let http = addr("http", self.http);
        let start = match (self.bootstrap, self.join) {
            (true, Some(_)) => {
                problems.push("bootstrap and join: give one or the other".to_owned());
                Start::Resume
            }
            (true, None) => Start::Bootstrap,
            (false, Some(addr)) => match (token, self.join_token_file) {
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
                if self.join_token_file.is_some() {
                    problems.push("join-token-file: only with join".to_owned());
                }
                Start::Resume
            }
        };
        let defaults = RaftTimings::default();
        let raft = RaftTimings {
            heartbeat: self
                .heartbeat_ms
                .map_or(defaults.heartbeat, Duration::from_millis),
            election_min: self
                .election_min_ms
                .map_or(defaults.election_min, Duration::from_millis),
            election_max: self
                .election_max_ms
                .map_or(defaults.election_max, Duration::from_millis),
            install_snapshot_timeout: self
                .install_snapshot_timeout_ms
                .map_or(defaults.install_snapshot_timeout, Duration::from_millis),
            snapshot_every: self.snapshot_every.unwrap_or(defaults.snapshot_every),
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
        let mut actors = ActorSettings::default();
        if let Some(ms) = self.home_unreachable_after_ms {
            actors.home_unreachable_after = Duration::from_millis(ms);
        }
        if actors.home_unreachable_after <= raft.election_max {
            problems.push(format!(
                "home-unreachable-after-ms ({:?}) must be above election-max-ms ({:?}): a home \
                 is not lost before the cluster could elect around it",
                actors.home_unreachable_after, raft.election_max
            ));
        }
        match self.passivate_after_secs {
            Some(0) => problems.push("passivate-after-secs: must be above 0".to_owned()),
            Some(s) => actors.passivate_after = Duration::from_secs(s),
            None => {}
        }
        match self.call_retention_hours {
            Some(0) => problems.push("call-retention-hours: must be above 0".to_owned()),
            Some(h) => actors.retention = Duration::from_secs(h * 3600),
            None => {}
        }
        for (i, issuer) in self.jwt.iter().enumerate() {
            problems.extend(issuer.problems(i));
            if self.jwt[..i]
                .iter()
                .any(|earlier| earlier.issuer == issuer.issuer)
            {
                problems.push(format!(
                    "jwt[{i}].issuer: {:?} is configured twice",
                    issuer.issuer
                ));
            }
        }
        let mut mcp = McpSettings::default();
        match self.mcp_max_body_bytes {
            Some(0) => problems.push("mcp-max-body-bytes: must be above 0".to_owned()),
            Some(bytes) => mcp.max_body_bytes = bytes,
            None => {}
        }
        match self.mcp_approval_wait_ms {
            Some(ms) if ms > MAX_APPROVAL_WAIT.as_millis() as u64 => problems.push(format!(
                "mcp-approval-wait-ms: at most {} (a client's request must not hang)",
                MAX_APPROVAL_WAIT.as_millis()
            )),
            Some(ms) => mcp.approval_wait = Duration::from_millis(ms),
            None => {}
        }
        mcp.allowed_origins = self.mcp_allowed_origins;
        if !self.mcp_allowed_hosts.is_empty() {
            mcp.allowed_hosts = self.mcp_allowed_hosts;
        }
        let a2a = A2aAdvertised {
            public_url: self
                .a2a_public_url
                .map(|url| url.trim_end_matches('/').to_owned()),
            grpc_url: self.a2a_grpc_url,
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
        let otlp = otlp_settings(self.otlp_endpoint, self.otlp_service_name, &mut problems);
        let tls = tls_settings(
            TlsFiles {
                cert: self.tls_cert,
                key: self.tls_key,
                ca: self.tls_ca,
                peer_mtls: self.peer_mtls,
            },
            &mut problems,
        );
        let grants = grants_from_config(
            &self.credential,
            self.credentials_file.as_deref(),
            &self.builtins,
            &data_dir,
            &mut problems,
        );
        let metrics = MetricsSettings {
            tenant_labels: self.metrics_tenant_labels,
            token: self
                .metrics_token_file
                .and_then(|path| match ScrapeToken::read(&path) {
                    Ok(token) => Some(token),
                    Err(why) => {
                        problems.push(format!("metrics-token-file: {why}"));
                        None
                    }
                }),
        };
        if !problems.is_empty() {
            return Err(ConfigErrors(problems));
        }
        Ok(ServeConfig {
            node_id,
            data_dir,
            grpc,
            http,
            start,
            raft,
            actors,
            jwt: self.jwt,
            mcp,
            ready_max_lag: self.ready_max_lag.unwrap_or(DEFAULT_READY_MAX_LAG),
            a2a,
            otlp,
            tls,
            grants,
            metrics,
            filter: Arc::new(OpenNetwork),
        })
    }
}

/// The `service.name` of exported spans unless `otlp-service-name` says otherwise.
pub const DEFAULT_OTLP_SERVICE_NAME: &str = "gatehouse";

/// The OTLP settings, when an endpoint is given; what is wrong with them goes to `problems`.
fn otlp_settings(
    endpoint: Option<String>,
    service_name: Option<String>,
    problems: &mut Vec<String>,
) -> Option<OtlpSettings> {
    let service_name = service_name.unwrap_or_else(|| DEFAULT_OTLP_SERVICE_NAME.to_owned());
    if service_name.trim().is_empty() {
        problems.push("otlp-service-name: must not be empty".to_owned());
    }
    let endpoint = endpoint?;
    if let Err(why) = check_otlp_endpoint(&endpoint) {
        problems.push(format!("otlp-endpoint: {endpoint:?} {why}"));
    }
    Some(OtlpSettings {
        endpoint,
        service_name,
    })
}

/// An OTLP/gRPC endpoint this node can reach: `http://host:port`.
fn check_otlp_endpoint(endpoint: &str) -> Result<(), &'static str> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| "is not a URL (http://host:port)")?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "uses https, which this build does not speak: use http:// to a \
                        collector beside the node",
            );
        }
        _ => return Err("must start with http://"),
    }
    match uri.authority() {
        Some(authority) if !authority.host().is_empty() && authority.port_u16().is_some() => Ok(()),
        _ => Err("must name a host and a port (OTLP/gRPC is usually port 4317)"),
    }
}

/// The TLS settings as given.
struct TlsFiles {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    ca: Option<PathBuf>,
    peer_mtls: bool,
}

/// The node's TLS material when TLS is configured, its files read and checked; every problem
/// goes to `problems`.
fn tls_settings(files: TlsFiles, problems: &mut Vec<String>) -> Option<NodeTls> {
    let TlsFiles {
        cert,
        key,
        ca,
        peer_mtls,
    } = files;
    if peer_mtls && (cert.is_none() || key.is_none() || ca.is_none()) {
        problems.push("peer-mtls: needs tls-cert, tls-key and tls-ca".to_owned());
    }
    match (cert, key, ca) {
        (None, None, None) => None,
        (None, None, Some(_)) => {
            problems.push("tls-ca: only with tls-cert and tls-key".to_owned());
            None
        }
        (Some(cert), Some(key), Some(ca)) => match NodeTls::load(&cert, &key, &ca, peer_mtls) {
            Ok(tls) => Some(tls),
            Err(found) => {
                problems.extend(found);
                None
            }
        },
        (Some(_), Some(_), None) => {
            problems.push(
                "tls-ca: required with tls-cert: the CA that signed the other nodes' \
                 certificates, which this node verifies them against"
                    .to_owned(),
            );
            None
        }
        (Some(_), None, _) | (None, Some(_), _) => {
            problems.push("tls-cert and tls-key: give both or neither".to_owned());
            None
        }
    }
}

/// One variable's value as the setting `key` takes it: a list, a number or a flag where the
/// setting is one, else text. A key that is no setting is refused by name.
fn env_value(key: &str, value: &str) -> Result<toml::Value, String> {
    let candidates = if LIST_SETTINGS.contains(&key) {
        let items = value
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| toml::Value::String(v.to_owned()))
            .collect();
        vec![toml::Value::Array(items)]
    } else {
        let mut candidates = Vec::new();
        if let Ok(n) = value.trim().parse::<i64>() {
            candidates.push(toml::Value::Integer(n));
        }
        if let Ok(b) = value.trim().parse::<bool>() {
            candidates.push(toml::Value::Boolean(b));
        }
        candidates.push(toml::Value::String(value.to_owned()));
        candidates
    };
    let mut last = String::new();
    for candidate in candidates {
        let mut one = toml::Table::new();
        one.insert(key.to_owned(), candidate.clone());
        match one.try_into::<RawServeConfig>() {
            Ok(_) => return Ok(candidate),
            Err(e) => last = e.message().to_owned(),
        }
    }
    Err(last)
}

#[derive(Debug)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} configuration problem(s):", self.0.len())?;
        for p in &self.0 {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

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

/// The longest `mcp-approval-wait-ms` may be.
pub const MAX_APPROVAL_WAIT: Duration = Duration::from_secs(10);

/// The addresses the Agent Card gives, when peers reach the node through a proxy or a published
/// port rather than where it listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct A2aAdvertised {
    pub public_url: Option<String>,
    pub grpc_url: Option<String>,
}

#[derive(Clone)]
pub struct ServeConfig {
    pub node_id: u64,
    pub data_dir: PathBuf,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub start: Start,
    pub raft: RaftTimings,
    pub actors: ActorSettings,
    /// Trusted JWT issuers, for the HTTP fronts.
    pub jwt: Vec<JwtIssuerConfig>,
    pub mcp: McpSettings,
    /// `/readyz` fails while applied trails the leader's commit index by more entries.
    pub ready_max_lag: u64,
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
            .field("http", &self.http)
            .field("start", &self.start)
            .field("raft", &self.raft)
            .field("actors", &self.actors)
            .field("jwt", &self.jwt)
            .field("mcp", &self.mcp)
            .field("ready_max_lag", &self.ready_max_lag)
            .field("a2a", &self.a2a)
            .field("otlp", &self.otlp)
            .field("tls", &self.tls)
            .field("grants", &self.grants)
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_cluster::grants::BuiltinTool;
    use gatehouse_gateway::auth::JwtKeySource;

    /// The README's configuration table is the reference operators read: a setting missing
    /// from it is undocumented.
    #[test]
    fn every_setting_has_a_row_in_the_readme_configuration_table() {
        let readme = include_str!("../../../README.md");
        let start = readme
            .find("### Configuration")
            .expect("README has a Configuration section");
        let section = &readme[start..];
        let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
        let command = <RawServeConfig as clap::Args>::augment_args(clap::Command::new("serve"));
        let missing: Vec<String> = command
            .get_arguments()
            .map(|arg| arg.get_id().as_str().replace('_', "-"))
            .filter(|key| !section.contains(&format!("| `{key}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "settings without a row in README's configuration table: {missing:?}"
        );
        assert!(section.contains("[[jwt]]"), "the jwt tables are described");
        assert!(
            section.contains("[[credential]]"),
            "the credential tables are described"
        );
    }

    fn env(vars: &[(&str, &str)]) -> Result<RawServeConfig, ConfigErrors> {
        RawServeConfig::from_env(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
    }

    #[test]
    fn environment_variables_set_settings_by_name_and_type() {
        let raw = env(&[
            ("GATEHOUSE_NODE_ID", "3"),
            ("GATEHOUSE_DATA_DIR", "/var/lib/gatehouse"),
            ("GATEHOUSE_HEARTBEAT_MS", "250"),
            ("GATEHOUSE_BOOTSTRAP", "true"),
            ("GATEHOUSE_JOIN", "10.0.0.1:7401"),
            (
                "GATEHOUSE_MCP_ALLOWED_ORIGINS",
                "https://a.example, https://b.example",
            ),
            // The client's own settings and other programs' variables are left alone.
            ("GATEHOUSE_ADDR", "127.0.0.1:7401"),
            ("GATEHOUSE_TOKEN", "gate_x"),
            ("GATEHOUSE_CONFIG", "/etc/gatehouse/gatehouse.toml"),
            ("PATH", "/usr/bin"),
        ])
        .unwrap();
        assert_eq!(raw.node_id, Some(3));
        assert_eq!(raw.data_dir, Some(PathBuf::from("/var/lib/gatehouse")));
        assert_eq!(raw.heartbeat_ms, Some(250));
        assert!(raw.bootstrap);
        assert_eq!(raw.join.as_deref(), Some("10.0.0.1:7401"));
        assert_eq!(
            raw.mcp_allowed_origins,
            ["https://a.example", "https://b.example"]
        );
    }

    #[test]
    fn grants_and_metrics_settings_come_from_every_layer_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let token = dir.path().join("metrics.token");
        std::fs::write(&token, "scrape-me\n").unwrap();
        let file: RawServeConfig = toml::from_str(&format!(
            "node-id = 1\ndata-dir = {:?}\nbuiltins = [\"demo:echo\"]\n\
             metrics-token-file = {:?}\n\n[[credential]]\nname = \"stripe\"\n\
             env = \"STRIPE_KEY\"\ntenants = [\"acme\"]\n",
            data.display().to_string(),
            token.display().to_string(),
        ))
        .unwrap();
        let from_env = env(&[
            ("GATEHOUSE_BUILTINS", "lab:transfer, lab:echo"),
            ("GATEHOUSE_METRICS_TENANT_LABELS", "true"),
        ])
        .unwrap();
        assert_eq!(from_env.builtins, ["lab:transfer", "lab:echo"]);
        let config = from_env.over(file.clone()).validate(None).unwrap();
        assert!(config.metrics.tenant_labels);
        assert!(
            config
                .metrics
                .token
                .as_ref()
                .is_some_and(|t| t.admits(Some("Bearer scrape-me")))
        );
        let grants = &config.grants;
        assert!(grants.builtin_enabled("lab", BuiltinTool::Transfer));
        assert!(
            !grants.builtin_enabled("demo", BuiltinTool::Echo),
            "the environment's list replaces the file's"
        );
        assert!(grants.credential_for(Some("acme"), "stripe").is_some());
        assert!(!format!("{config:?}").contains("scrape-me"));

        // Tables come from the file only.
        let errors = env(&[("GATEHOUSE_CREDENTIAL", "x")]).unwrap_err().0;
        assert!(errors[0].contains("[[credential]] tables"), "{errors:?}");

        let errors = RawServeConfig {
            builtins: vec!["demo:rm".into()],
            metrics_token_file: Some(dir.path().join("absent.token")),
            credential: vec![CredentialConfig {
                name: "peer".into(),
                file: Some(data.join("cluster.key")),
                tenants: vec!["acme".into()],
                ..Default::default()
            }],
            ..file
        }
        .validate(None)
        .unwrap_err()
        .0;
        let has = |prefix: &str| errors.iter().any(|e| e.starts_with(prefix));
        assert!(has("builtins: \"demo:rm\""), "{errors:?}");
        assert!(has("metrics-token-file: reading"), "{errors:?}");
        assert!(has("credential[0].file:"), "{errors:?}");
    }

    #[test]
    fn the_a2a_addresses_are_checked_and_kept() {
        let base = RawServeConfig {
            node_id: Some(1),
            data_dir: Some("/tmp/x".into()),
            bootstrap: true,
            ..RawServeConfig::default()
        };
        let config = RawServeConfig {
            a2a_public_url: Some("https://gatehouse.example/".into()),
            a2a_grpc_url: Some("gatehouse.example:443".into()),
            ..base.clone()
        }
        .validate(None)
        .unwrap();
        assert_eq!(
            config.a2a.public_url.as_deref(),
            Some("https://gatehouse.example")
        );
        assert_eq!(
            config.a2a.grpc_url.as_deref(),
            Some("gatehouse.example:443")
        );
        let ConfigErrors(problems) = RawServeConfig {
            a2a_public_url: Some("gatehouse.example".into()),
            a2a_grpc_url: Some("grpc://gatehouse.example:443".into()),
            ..base
        }
        .validate(None)
        .unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn a_numeric_looking_text_setting_stays_text() {
        let raw = env(&[("GATEHOUSE_DATA_DIR", "2026"), ("GATEHOUSE_GRPC", "7401")]).unwrap();
        assert_eq!(raw.data_dir, Some(PathBuf::from("2026")));
        assert_eq!(raw.grpc.as_deref(), Some("7401"));
    }

    #[test]
    fn unknown_and_misfit_variables_are_all_reported() {
        let ConfigErrors(problems) = env(&[
            ("GATEHOUSE_HEARTBEET_MS", "50"),
            ("GATEHOUSE_NODE_ID", "three"),
            ("GATEHOUSE_JWT", "x"),
        ])
        .unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("GATEHOUSE_HEARTBEET_MS")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("GATEHOUSE_NODE_ID")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("GATEHOUSE_JWT")),
            "{problems:?}"
        );
    }

    #[test]
    fn flags_win_over_the_environment_which_wins_over_the_file() {
        let file = RawServeConfig {
            heartbeat_ms: Some(100),
            election_min_ms: Some(1_000),
            snapshot_every: Some(10),
            ..RawServeConfig::default()
        };
        let from_env = env(&[
            ("GATEHOUSE_HEARTBEAT_MS", "200"),
            ("GATEHOUSE_ELECTION_MIN_MS", "2000"),
        ])
        .unwrap();
        let flags = RawServeConfig {
            heartbeat_ms: Some(300),
            ..RawServeConfig::default()
        };
        let merged = flags.over(from_env.over(file));
        assert_eq!(merged.heartbeat_ms, Some(300));
        assert_eq!(merged.election_min_ms, Some(2_000));
        assert_eq!(merged.snapshot_every, Some(10));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let raw = RawServeConfig {
            grpc: Some("localhost".into()),
            bootstrap: true,
            join: Some("127.0.0.1:1".into()),
            heartbeat_ms: Some(600),
            ..Default::default()
        };
        let errors = raw.validate(None).unwrap_err().0;
        let starts: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap())
            .collect();
        assert_eq!(
            starts,
            [
                "node-id",
                "data-dir",
                "grpc",
                "bootstrap and join",
                "heartbeat-ms (600ms) must be below election-min-ms (500ms)"
            ]
        );
    }

    #[test]
    fn flags_override_the_file() {
        let file: RawServeConfig = toml::from_str(
            "node-id = 1\ndata-dir = \"/var/lib/gatehouse\"\ngrpc = \"127.0.0.1:7001\"\nheartbeat-ms = 50\n",
        )
        .unwrap();
        let flags = RawServeConfig {
            grpc: Some("127.0.0.1:7101".into()),
            ..Default::default()
        };
        let config = flags.over(file).validate(None).unwrap();
        assert_eq!(config.grpc, "127.0.0.1:7101".parse().unwrap());
        assert_eq!(config.node_id, 1);
        assert_eq!(config.raft.heartbeat, Duration::from_millis(50));
        assert_eq!(config.start, Start::Resume);
        assert_eq!(config.ready_max_lag, DEFAULT_READY_MAX_LAG);
    }

    #[test]
    fn ready_max_lag_is_read_from_the_file_and_a_flag_wins() {
        let file: RawServeConfig =
            toml::from_str("node-id = 1\ndata-dir = \"/d\"\nready-max-lag = 50\n").unwrap();
        let config = RawServeConfig::default()
            .over(file.clone())
            .validate(None)
            .unwrap();
        assert_eq!(config.ready_max_lag, 50);
        let flags = RawServeConfig {
            ready_max_lag: Some(7),
            ..Default::default()
        };
        assert_eq!(flags.over(file).validate(None).unwrap().ready_max_lag, 7);
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused() {
        let err = toml::from_str::<RawServeConfig>("node_id = 1\n").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn mcp_settings_are_bounded_and_default_to_no_browser_origin() {
        let base = RawServeConfig {
            node_id: Some(1),
            data_dir: Some("/tmp/x".into()),
            ..Default::default()
        };
        let config = base.clone().validate(None).unwrap();
        assert_eq!(config.mcp, McpSettings::default());
        assert!(config.mcp.allowed_origins.is_empty());
        assert_eq!(config.mcp.max_body_bytes, 1024 * 1024);
        assert_eq!(config.mcp.approval_wait, Duration::ZERO);

        let too_long = RawServeConfig {
            mcp_approval_wait_ms: Some(10_001),
            mcp_max_body_bytes: Some(0),
            ..base.clone()
        };
        let errors = too_long.validate(None).unwrap_err().0;
        assert!(errors.iter().any(|e| e.starts_with("mcp-approval-wait-ms")));
        assert!(errors.iter().any(|e| e.starts_with("mcp-max-body-bytes")));

        let file: RawServeConfig = toml::from_str(
            "mcp-approval-wait-ms = 2000\nmcp-allowed-origins = [\"https://app.example:443\"]\n",
        )
        .unwrap();
        let config = RawServeConfig { ..base }.over(file).validate(None).unwrap();
        assert_eq!(config.mcp.approval_wait, Duration::from_millis(2000));
        assert_eq!(config.mcp.allowed_origins, ["https://app.example:443"]);
    }

    #[test]
    fn otlp_export_is_off_by_default_and_its_endpoint_is_checked() {
        let base = RawServeConfig {
            node_id: Some(1),
            data_dir: Some("/tmp/x".into()),
            ..Default::default()
        };
        assert_eq!(base.clone().validate(None).unwrap().otlp, None);

        let file: RawServeConfig =
            toml::from_str("otlp-endpoint = \"http://127.0.0.1:4317\"\n").unwrap();
        let config = base.clone().over(file).validate(None).unwrap();
        assert_eq!(
            config.otlp,
            Some(OtlpSettings {
                endpoint: "http://127.0.0.1:4317".into(),
                service_name: DEFAULT_OTLP_SERVICE_NAME.into(),
            })
        );

        let from_env = env(&[
            ("GATEHOUSE_OTLP_ENDPOINT", "http://collector:4317"),
            ("GATEHOUSE_OTLP_SERVICE_NAME", "gatehouse-eu"),
        ])
        .unwrap();
        let config = base.clone().over(from_env).validate(None).unwrap();
        let otlp = config.otlp.expect("configured");
        assert_eq!(otlp.endpoint, "http://collector:4317");
        assert_eq!(otlp.service_name, "gatehouse-eu");

        for (endpoint, why) in [
            ("not a url", "is not a URL"),
            ("127.0.0.1:4317", "must start with http://"),
            ("https://collector:4317", "uses https"),
            ("grpc://collector:4317", "must start with http://"),
            ("http://collector", "must name a host and a port"),
        ] {
            let bad = RawServeConfig {
                otlp_endpoint: Some(endpoint.into()),
                otlp_service_name: Some(" ".into()),
                ..base.clone()
            };
            let errors = bad.validate(None).unwrap_err().0;
            assert!(
                errors
                    .iter()
                    .any(|e| e.starts_with("otlp-endpoint") && e.contains(why)),
                "{endpoint}: {errors:?}"
            );
            assert!(errors.iter().any(|e| e.starts_with("otlp-service-name")));
        }
    }

    #[test]
    fn joining_needs_a_token() {
        let raw = RawServeConfig {
            node_id: Some(2),
            data_dir: Some("/tmp/x".into()),
            join: Some("127.0.0.1:7001".into()),
            ..Default::default()
        };
        assert!(raw.clone().validate(None).is_err());
        let config = raw.clone().validate(Some("k".into())).unwrap();
        assert_eq!(
            config.start,
            Start::Join {
                addr: "127.0.0.1:7001".into(),
                key: JoinKey::Token("k".into()),
            }
        );
        assert!(!format!("{config:?}").contains("\"k\""), "{config:?}");
    }

    #[test]
    fn the_deployment_examples_are_valid_configs() {
        let examples = [
            (
                "single-node",
                include_str!("../../../deploy/config/single-node.toml"),
            ),
            (
                "cluster-member",
                include_str!("../../../deploy/config/cluster-member.toml"),
            ),
            (
                "multi-region-member",
                include_str!("../../../deploy/config/multi-region-member.toml"),
            ),
        ];
        for (name, text) in examples {
            let raw: RawServeConfig =
                toml::from_str(text).unwrap_or_else(|e| panic!("{name}.toml: {e}"));
            let config = raw
                .validate(None)
                .unwrap_or_else(|e| panic!("{name}.toml: {e}"));
            match name {
                "single-node" => assert_eq!(config.start, Start::Bootstrap),
                _ => assert!(
                    matches!(
                        config.start,
                        Start::Join {
                            key: JoinKey::File(_),
                            ..
                        }
                    ),
                    "{name}.toml: {:?}",
                    config.start
                ),
            }
        }
    }

    #[test]
    fn a_join_token_file_replaces_the_token_and_is_read_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.key");
        let file: RawServeConfig = toml::from_str(&format!(
            "node-id = 2\ndata-dir = \"/d\"\njoin = \"10.0.0.1:7400\"\njoin-token-file = {:?}\n",
            path.display().to_string()
        ))
        .unwrap();
        let config = RawServeConfig::default()
            .over(file.clone())
            .validate(None)
            .unwrap();
        let Start::Join { key, .. } = config.start else {
            panic!("not a join: {:?}", config.start);
        };
        assert!(key.read().is_err(), "the file does not exist yet");
        std::fs::write(&path, "").unwrap();
        assert!(key.read().unwrap_err().to_string().contains("is empty"));
        std::fs::write(&path, "gate_abc\n").unwrap();
        assert_eq!(key.read().unwrap(), "gate_abc");

        let errors = file.clone().validate(Some("k".into())).unwrap_err().0;
        assert!(errors.iter().any(|e| e.contains("not both")), "{errors:?}");
        let without_join = RawServeConfig { join: None, ..file };
        let errors = without_join.validate(None).unwrap_err().0;
        assert_eq!(errors, ["join-token-file: only with join"]);
    }

    /// A node configuration with these TLS settings.
    fn with_tls(
        cert: Option<&Path>,
        key: Option<&Path>,
        ca: Option<&Path>,
        peer_mtls: bool,
    ) -> RawServeConfig {
        RawServeConfig {
            node_id: Some(1),
            data_dir: Some("/d".into()),
            tls_cert: cert.map(Path::to_owned),
            tls_key: key.map(Path::to_owned),
            tls_ca: ca.map(Path::to_owned),
            peer_mtls,
            ..Default::default()
        }
    }

    /// A CA and a node certificate signed by it, as PEM files in `dir`: (cert, key, ca).
    fn pem_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let paths = (
            dir.join("node.pem"),
            dir.join("node.key"),
            dir.join("ca.pem"),
        );
        std::fs::write(&paths.0, cert.pem()).unwrap();
        std::fs::write(&paths.1, key.serialize_pem()).unwrap();
        std::fs::write(&paths.2, ca_cert.pem()).unwrap();
        paths
    }

    #[test]
    fn tls_files_are_read_and_kept_with_peer_mtls() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, ca) = pem_files(dir.path());
        let file: RawServeConfig = toml::from_str(&format!(
            "node-id = 1\ndata-dir = \"/d\"\ntls-cert = {:?}\ntls-key = {:?}\ntls-ca = {:?}\n\
             peer-mtls = true\n",
            cert.display().to_string(),
            key.display().to_string(),
            ca.display().to_string()
        ))
        .unwrap();
        let config = RawServeConfig::default().over(file).validate(None).unwrap();
        let tls = config.tls.expect("TLS is on");
        assert!(tls.peer_mtls);
        // The key's bytes are never printed.
        let printed = format!("{tls:?}");
        assert!(
            printed.contains("node.key") && !printed.contains("PRIVATE"),
            "{printed}"
        );
        assert!(
            with_tls(None, None, None, false)
                .validate(None)
                .unwrap()
                .tls
                .is_none()
        );
        let from_env = env(&[("GATEHOUSE_PEER_MTLS", "true"), ("GATEHOUSE_CA", "/x")]).unwrap();
        assert!(
            from_env.peer_mtls,
            "GATEHOUSE_CA is the client's, not a setting"
        );
    }

    #[test]
    fn a_tls_cert_without_its_key_or_ca_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, ca) = pem_files(dir.path());
        let problems = |raw: RawServeConfig| raw.validate(None).unwrap_err().0;
        assert_eq!(
            problems(with_tls(Some(&cert), None, Some(&ca), false)),
            ["tls-cert and tls-key: give both or neither"]
        );
        assert_eq!(
            problems(with_tls(None, Some(&key), None, false)),
            ["tls-cert and tls-key: give both or neither"]
        );
        let no_ca = problems(with_tls(Some(&cert), Some(&key), None, false));
        assert!(
            no_ca[0].starts_with("tls-ca: required with tls-cert"),
            "{no_ca:?}"
        );
        assert_eq!(
            problems(with_tls(None, None, Some(&ca), false)),
            ["tls-ca: only with tls-cert and tls-key"]
        );
    }

    #[test]
    fn peer_mtls_needs_the_ca_and_the_node_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = pem_files(dir.path());
        let without_ca = with_tls(Some(&cert), Some(&key), None, true)
            .validate(None)
            .unwrap_err()
            .0;
        assert_eq!(without_ca.len(), 2, "{without_ca:?}");
        assert_eq!(
            without_ca[0],
            "peer-mtls: needs tls-cert, tls-key and tls-ca"
        );
        assert!(
            without_ca[1].starts_with("tls-ca: required"),
            "{without_ca:?}"
        );
        let alone = with_tls(None, None, None, true)
            .validate(None)
            .unwrap_err()
            .0;
        assert_eq!(alone, ["peer-mtls: needs tls-cert, tls-key and tls-ca"]);
    }

    #[test]
    fn missing_and_invalid_tls_files_are_each_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, ca) = pem_files(dir.path());
        let missing = dir.path().join("absent.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let errors = with_tls(Some(&missing), Some(&garbage), Some(&garbage), false)
            .validate(None)
            .unwrap_err()
            .0;
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(
            errors[0].starts_with(&format!("tls-cert: reading {}", missing.display())),
            "{errors:?}"
        );
        assert!(
            errors[1].starts_with(&format!(
                "tls-key: {} holds no PEM private key",
                garbage.display()
            )),
            "{errors:?}"
        );
        assert_eq!(
            errors[2],
            format!("tls-ca: {} holds no PEM certificate", garbage.display())
        );

        // A key that belongs to another certificate.
        let other = tempfile::tempdir().unwrap();
        let (_, other_key, _) = pem_files(other.path());
        let mismatched = with_tls(Some(&cert), Some(&other_key), Some(&ca), false)
            .validate(None)
            .unwrap_err()
            .0;
        assert!(
            mismatched[0].starts_with("tls-cert and tls-key:")
                && mismatched[0].contains("do not make a server identity"),
            "{mismatched:?}"
        );
        assert!(
            with_tls(Some(&cert), Some(&key), Some(&ca), false)
                .validate(None)
                .is_ok()
        );
    }

    #[test]
    fn jwt_issuers_are_read_from_the_file_with_their_defaults() {
        let file: RawServeConfig = toml::from_str(
            "node-id = 1\ndata-dir = \"/d\"\n\n[[jwt]]\nissuer = \"https://idp.example\"\n\
             audience = \"gatehouse\"\nalgorithms = [\"RS256\"]\n\
             jwks-file = \"/etc/idp.jwks.json\"\n",
        )
        .unwrap();
        let config = RawServeConfig::default().over(file).validate(None).unwrap();
        assert_eq!(config.jwt.len(), 1);
        let issuer = &config.jwt[0];
        assert_eq!(issuer.audience.as_deref(), Some("gatehouse"));
        assert_eq!(issuer.leeway_secs, 30);
        assert_eq!(
            issuer.key_source(),
            Some(JwtKeySource::Jwks(Path::new("/etc/idp.jwks.json")))
        );
    }

    #[test]
    fn jwt_issuers_with_confusable_or_missing_keys_are_refused() {
        let issuer = |algorithms: &[&str], secret: bool, public: bool| JwtIssuerConfig {
            issuer: "https://idp.example".into(),
            algorithms: algorithms.iter().map(|a| a.to_string()).collect(),
            hs256_secret_file: secret.then(|| "/s".into()),
            public_key_file: public.then(|| "/p.pem".into()),
            ..Default::default()
        };
        let raw = RawServeConfig {
            node_id: Some(1),
            data_dir: Some("/d".into()),
            jwt: vec![
                issuer(&["RS256", "HS256"], false, true),
                issuer(&["none"], true, false),
                issuer(&["RS256"], true, false),
                issuer(&["RS256"], true, true),
                issuer(&["XY999"], false, true),
            ],
            ..Default::default()
        };
        let errors = raw.validate(None).unwrap_err().0;
        let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
        assert!(
            has("jwt[0].algorithms: HS256 is a shared-secret algorithm"),
            "{errors:?}"
        );
        assert!(
            has("jwt[1].algorithms: \"none\" is never accepted"),
            "{errors:?}"
        );
        assert!(
            has("jwt[2].algorithms: RS256 needs a public key"),
            "{errors:?}"
        );
        assert!(has("jwt[3]: give exactly one of"), "{errors:?}");
        assert!(
            has("jwt[4].algorithms: \"XY999\" is not a JWS algorithm"),
            "{errors:?}"
        );
        assert!(
            has("jwt[1].issuer: \"https://idp.example\" is configured twice"),
            "{errors:?}"
        );
    }
}
