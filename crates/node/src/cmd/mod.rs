//! One module per command.

pub mod approvals;
pub mod audit;
pub mod call;
pub mod client;
pub mod cluster;
pub mod dev;
pub mod import;
pub mod keygen;
pub mod resources;
pub mod serve;
pub mod skills;
pub mod snapshot;
pub mod validate;

use clap::ValueEnum;
use std::future::Future;
use std::process::ExitCode;

/// How a command that prints data prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Runs a command that talks to the cluster on a small runtime of its own.
pub fn remote(work: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(work)
}
