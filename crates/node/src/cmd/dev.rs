//! `gatehouse dev`: the main job on a fresh machine. A one-node cluster on 127.0.0.1 with
//! embedded storage, tenant `demo`, the built-in upstream `demo` (`demo.echo`, `demo.transfer`,
//! the built-in tools dev mode enables for `demo` and no other tenant) and a skill at each level
//! of the cascade. Keys are made on first start and written to `DATA_DIR/credentials.json`
//! (0600); later starts resume the same cluster and keys. The banner names that file and never
//! prints a key: a terminal's scrollback and a CI log are not places for one.

use super::serve::{SHUTDOWN_GRACE, init_logging, say, wait_for_signal};
use crate::config::RawServeConfig;
use crate::exit::Exit;
use crate::server::{self, NodeHandle};
use anyhow::Context;
use gatehouse_cluster::node_files::{new_key, write_atomically};
use gatehouse_registry::Command;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::documents;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The demo tenant's resources, with the keys' digests left to fill in.
const DEMO: &str = include_str!("dev.yaml");

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where the dev cluster keeps its log, state, audit and credentials.
    #[arg(long, default_value = "gatehouse-dev")]
    pub data_dir: PathBuf,
    /// HTTP address: MCP at /mcp, A2A at /a2a, the approvals console at /console, health,
    /// readiness and metrics.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub http: String,
    /// gRPC address: approvals, registry, cluster.
    #[arg(long, default_value = "127.0.0.1:7401")]
    pub grpc: String,
}

/// `DATA_DIR/credentials.json`: the dev cluster's three keys.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub admin: String,
    pub agent: String,
    pub approver: String,
}

/// The built-in tools dev mode enables, for tenant `demo` only.
pub const DEV_BUILTINS: [&str; 2] = ["demo:echo", "demo:transfer"];

pub fn run(args: DevArgs) -> anyhow::Result<Exit> {
    let config = RawServeConfig {
        node_id: Some(1),
        data_dir: Some(args.data_dir.clone()),
        grpc: Some(args.grpc),
        http: Some(args.http),
        bootstrap: true,
        builtins: DEV_BUILTINS.map(str::to_owned).to_vec(),
        ..RawServeConfig::default()
    }
    .validate(None)?;
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let node = server::start(config).await?;
        ensure_demo(&node, &args.data_dir).await?;
        print_guide(&node, &args.data_dir);
        wait_for_signal().await?;
        say(format_args!("dev cluster stopping"));
        if tokio::time::timeout(SHUTDOWN_GRACE, node.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("shutdown did not finish within {SHUTDOWN_GRACE:?}; exiting anyway");
        }
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    Ok(Exit::Done)
}

/// Applies the demo tenant on the first start and writes the keys; later starts read them.
pub async fn ensure_demo(node: &NodeHandle, data_dir: &Path) -> anyhow::Result<Credentials> {
    let path = data_dir.join("credentials.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        return serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()));
    }
    let admin = match &node.admin_key {
        Some(key) => key.clone(),
        None => std::fs::read_to_string(data_dir.join("admin.key"))
            .context("this dev cluster has no admin.key: start with a new --data-dir")?
            .trim()
            .to_owned(),
    };
    let credentials = Credentials {
        admin,
        agent: new_key("agent"),
        approver: new_key("approver"),
    };
    let text = DEMO
        .replace("{agent_sha256}", &sha256_hex(credentials.agent.as_bytes()))
        .replace(
            "{approver_sha256}",
            &sha256_hex(credentials.approver.as_bytes()),
        );
    let parsed = documents::parse("dev.yaml", &text);
    let resources = parsed.into_resources();
    node.cluster
        .propose(Command::Put { resources })
        .await
        .context("applying the demo tenant")?;
    let json = serde_json::to_vec_pretty(&credentials)?;
    write_atomically(&path, &json, 0o600)?;
    Ok(credentials)
}

fn print_guide(node: &NodeHandle, data_dir: &Path) {
    let creds = data_dir.join("credentials.json");
    say(format_args!(
        "\
gatehouse dev: one node, tenant `demo`, tools demo.echo (read_only) and demo.transfer (destructive)
  MCP endpoint   http://{http}/mcp   (streamable HTTP; header  Authorization: Bearer <agent key>)
  gRPC           {grpc}
  keys           {creds}   (admin, agent, approver; never printed)

Connect an MCP client with the agent key from that file, e.g. the Python SDK (mcp 2.3):
  agent = json.load(open(\"{creds}\"))[\"agent\"]
  http = httpx2.AsyncClient(headers={{\"Authorization\": f\"Bearer {{agent}}\"}})
  async with Client(streamable_http_client(\"http://{http}/mcp\", http_client=http)) as mcp: ...
Call demo.transfer: it waits for approval. Approve it with
  export GATEHOUSE_ADDR={grpc} GATEHOUSE_TOKEN=$(python3 -c 'import json;print(json.load(open(\"{creds}\"))[\"approver\"])')
  gatehouse approvals list
  gatehouse approvals approve CALL_ID
then ask the agent to poll gatehouse.call_status with the call id.
Ctrl-C stops the node; `gatehouse dev` again resumes it with the same data.",
        http = node.http_addr,
        grpc = node.grpc_addr,
        creds = creds.display(),
    ));
}
