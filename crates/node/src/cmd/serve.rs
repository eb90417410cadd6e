//! `gatehouse serve`: run a node until SIGINT or SIGTERM.

use crate::cli::ServeArgs;
use crate::config::RawServeConfig;
use crate::server;
use std::process::ExitCode;

pub fn run(args: ServeArgs, token: Option<String>) -> anyhow::Result<ExitCode> {
    let file = match &args.config {
        Some(path) => RawServeConfig::from_file(path)?,
        None => RawServeConfig::default(),
    };
    let config = args.raw.over(file).validate(token)?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let data_dir = config.data_dir.clone();
        let node = server::start(config).await?;
        println!(
            "node {} serving gRPC on {} and HTTP on {}",
            node.id, node.grpc_addr, node.http_addr
        );
        if node.admin_key.is_some() {
            println!(
                "new cluster: admin API key written to {}",
                data_dir.join("admin.key").display()
            );
        }
        wait_for_signal().await?;
        println!("node {} stopping", node.id);
        node.shutdown().await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
