//! The file's shape and the flags': the raw settings before anything is checked, read from a
//! TOML file, and laid one layer over another.

use gatehouse_cluster::grants::CredentialConfig;
use gatehouse_gateway::auth::JwtIssuerConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};

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
    /// The `host:port` peers and joining nodes reach this node's gRPC listener at, recorded in
    /// the membership (behind NAT, a port forward or a proxy). Default: the gRPC listen address.
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise_grpc: Option<String>,
    /// HTTP listen address: health and readiness, metrics, the MCP front at `/mcp`, A2A (`/a2a`
    /// and the Agent Card), and the approvals console (`/console`) with its API (`/api/v1`).
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
    /// Threads serving the HTTP listener (MCP, A2A, the console), each running its requests on
    /// a runtime of its own; 0 serves it on the node's shared runtime (default: one per core).
    #[arg(long)]
    pub http_threads: Option<usize>,
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

impl RawServeConfig {
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
            advertise_grpc: self.advertise_grpc.or(file.advertise_grpc),
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
            http_threads: self.http_threads.or(file.http_threads),
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
}
