//! The command line: the clap tree, and dispatch to `cmd`, where each command keeps the
//! arguments it takes and the flags every command shares (`client::Remote`, `Output`).

use crate::cmd;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "A governed tool gateway for AI agents"
)]
pub struct Cli {
    #[command(flatten)]
    pub remote: cmd::client::Remote,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size of the serve flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node.
    Serve(cmd::serve::ServeArgs),
    /// A one-node dev cluster on 127.0.0.1 with tenant `demo`, built-in demo tools and skills.
    Dev(cmd::dev::DevArgs),
    /// Membership and status of the cluster.
    Cluster {
        #[command(subcommand)]
        command: cmd::cluster::ClusterCommand,
    },
    /// Create or update the resources in a file or directory.
    Apply {
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
    },
    /// Show one resource.
    Get(cmd::resources::ResourceArgs),
    /// List resources of a kind.
    List {
        /// Tenant, Principal, Upstream, Tool, Skill or Policy (any case, singular or plural).
        kind: String,
        #[arg(long)]
        tenant: Option<String>,
        /// Read after every write committed so far.
        #[arg(long)]
        linearizable: bool,
    },
    /// Delete one resource.
    Delete(cmd::resources::ResourceArgs),
    /// Check declarative files (a file or a directory of .yaml/.yml files); exit 1 on any problem.
    Validate {
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
    },
    /// Skills: resolve the cascade for a call.
    Skills {
        #[command(subcommand)]
        command: cmd::skills::SkillsCommand,
    },
    /// Make a new API key: prints the key once, and the SHA-256 a Principal stores.
    Keygen,
    /// Call a tool through the gateway; with --wait, follow a call that needs approval.
    Call(cmd::call::CallArgs),
    /// Calls that wait for approval: list, watch, show, approve, reject, cancel, resolve.
    Approvals {
        #[command(subcommand)]
        command: cmd::approvals::ApprovalsCommand,
    },
    /// This node's audit log, read from its data directory: verify the hash chain, tail it.
    Audit {
        #[command(subcommand)]
        command: cmd::audit::AuditCommand,
    },
    /// Backups: save the cluster's state to a file, restore one into a new cluster.
    Snapshot {
        #[command(subcommand)]
        command: cmd::snapshot::SnapshotCommand,
    },
    /// Turn another description of tools into resources to review and apply.
    Import {
        #[command(subcommand)]
        command: cmd::import::ImportCommand,
    },
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let remote = cli.remote;
    match cli.command {
        Command::Serve(args) => cmd::serve::run(args, remote.token),
        Command::Dev(args) => cmd::dev::run(args),
        Command::Cluster { command } => cmd::remote(cmd::cluster::run(&remote, command)),
        Command::Apply { path } => cmd::remote(cmd::resources::apply(&remote, &path)),
        Command::Get(args) => cmd::remote(cmd::resources::get(&remote, args)),
        Command::List {
            kind,
            tenant,
            linearizable,
        } => cmd::remote(cmd::resources::list(&remote, kind, tenant, linearizable)),
        Command::Delete(args) => cmd::remote(cmd::resources::delete(&remote, args)),
        Command::Validate { path } => cmd::validate::run(&path, remote.output),
        Command::Skills {
            command: cmd::skills::SkillsCommand::Resolve(args),
        } => {
            if args.offline {
                cmd::skills::resolve(&args)
            } else {
                cmd::remote(cmd::skills::resolve_remote(&remote, args))
            }
        }
        Command::Keygen => cmd::keygen::run(),
        Command::Call(args) => cmd::remote(cmd::call::run(&remote, args)),
        Command::Approvals { command } => cmd::remote(cmd::approvals::run(&remote, command)),
        Command::Import {
            command:
                cmd::import::ImportCommand::Openapi {
                    file,
                    upstream,
                    tenant,
                    output,
                },
        } => cmd::import::openapi(&file, &upstream, tenant.as_deref(), output.as_deref()),
        Command::Audit { command } => cmd::audit::run(command, remote.output),
        Command::Snapshot {
            command: cmd::snapshot::SnapshotCommand::Save { file },
        } => cmd::remote(cmd::snapshot::save(&remote, &file)),
        Command::Snapshot {
            command: cmd::snapshot::SnapshotCommand::Restore(args),
        } => cmd::snapshot::restore(&args),
    }
}
