//! The command line.

use crate::cmd;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "A governed tool gateway for AI agents"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check declarative files (a file or a directory of .yaml/.yml files); exit 1 on any problem.
    Validate {
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
    },
    /// Skills: resolve the cascade for a call.
    Skills {
        #[command(subcommand)]
        command: SkillsCommand,
    },
    /// Make a new API key: prints the key once, and the SHA-256 a Principal stores.
    Keygen,
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Print the resolved context and the trace, as JSON.
    Resolve(ResolveArgs),
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Resolve from files, without a cluster.
    #[arg(long, requires = "path")]
    pub offline: bool,
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub path: Option<PathBuf>,
    #[arg(long)]
    pub tenant: String,
    #[arg(long)]
    pub tool: String,
    #[arg(long)]
    pub user: Option<String>,
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate { path } => cmd::validate::run(&path),
        Command::Skills {
            command: SkillsCommand::Resolve(args),
        } => cmd::skills::resolve(&args),
        Command::Keygen => cmd::keygen::run(),
    }
}
