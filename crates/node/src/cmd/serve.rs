//! `gatehouse serve`: run a node until SIGINT or SIGTERM.

use crate::config::RawServeConfig;
use crate::exit::Exit;
use crate::server;
use clap::Args;
use gatehouse_cluster::handover::Handover;
use gatehouse_gateway::telemetry::Telemetry;
use std::path::PathBuf;

/// How long a stopping node waits for its tasks before it exits regardless.
pub(crate) const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML file with the same names as these flags (`GATEHOUSE_*` variables over it, flags
    /// over both).
    #[arg(long, value_name = "FILE", env = "GATEHOUSE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The cluster's admin key, for `--join` (or give join-token-file).
    #[arg(
        long,
        env = "GATEHOUSE_TOKEN",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub token: Option<String>,
    #[command(flatten)]
    pub raw: RawServeConfig,
}

pub fn run(args: ServeArgs) -> anyhow::Result<Exit> {
    let token = args.token.clone();
    let file = match &args.config {
        Some(path) => RawServeConfig::from_file(path)?,
        None => RawServeConfig::default(),
    };
    let env = RawServeConfig::from_env(std::env::vars())?;
    let config = args.raw.over(env.raw.over(file)).validate(token)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // The exporter's connection is made on the runtime.
    let telemetry = {
        let _runtime = runtime.enter();
        Telemetry::install(config.otlp.as_ref(), config.node_id)?
    };
    for name in &env.unknown {
        tracing::warn!(
            "{name} is in the environment but names no setting of gatehouse serve; ignored"
        );
    }
    let served = runtime.block_on(async {
        let data_dir = config.data_dir.clone();
        let node = server::start(config).await?;
        say(format_args!(
            "node {} serving gRPC on {} and HTTP on {}",
            node.id, node.grpc_addr, node.http_addr
        ));
        if node.admin_key.is_some() {
            say(format_args!(
                "new cluster: admin API key written to {}",
                data_dir.join("admin.key").display()
            ));
        }
        wait_for_signal().await?;
        let id = node.id;
        say(format_args!("node {id} stopping"));
        match tokio::time::timeout(SHUTDOWN_GRACE, node.shutdown()).await {
            Ok(Handover::Done { to, term }) => say(format_args!(
                "node {id} handed leadership to node {to} in term {term}"
            )),
            Ok(Handover::NotNeeded | Handover::Failed(_)) => {}
            Err(_) => {
                tracing::warn!("shutdown did not finish within {SHUTDOWN_GRACE:?}; exiting anyway");
            }
        }
        say(format_args!("node {id} stopped"));
        anyhow::Ok(())
    });
    // Spans of the calls that finished before the stop are exported before the process ends,
    // also when the node stopped on an error.
    telemetry.shutdown();
    served?;
    // Whatever is still running (a blocking flush, a stuck task) gets the same grace, no more.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    Ok(Exit::Done)
}

/// Logs to stderr, `RUST_LOG` over a default that keeps openraft's chatter out; no spans are
/// exported.
pub(crate) fn init_logging() {
    // Without OTLP settings nothing is built that could fail.
    let _ = Telemetry::install(None, 0);
}

pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// A line on stdout. A supervisor that closed the pipe must not bring the node down.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
