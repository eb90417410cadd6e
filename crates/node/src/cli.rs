//! The command line.

use crate::cmd;
use crate::config::RawServeConfig;
use clap::{Args, Parser, Subcommand, ValueEnum};
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
    pub remote: Remote,
    #[command(subcommand)]
    pub command: Command,
}

/// Where a command that talks to the cluster goes, and with which key.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// Any node's gRPC address: `host:port`, or `https://host:port` for a node that serves TLS
    /// (with --ca).
    #[arg(
        long,
        global = true,
        env = "GATEHOUSE_ADDR",
        default_value = "127.0.0.1:7401"
    )]
    pub addr: String,
    /// PEM file of the CA that signed the node's certificate: the connection is TLS, verified
    /// against it.
    #[arg(long, global = true, env = "GATEHOUSE_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// An API key (for a new cluster: the one in DATA_DIR/admin.key).
    #[arg(long, global = true, env = "GATEHOUSE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Output format for commands that print data.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

// Parsed once at start: the size of the serve flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a node.
    Serve(ServeArgs),
    /// A one-node dev cluster on 127.0.0.1 with tenant `demo`, built-in demo tools and skills.
    Dev(cmd::dev::DevArgs),
    /// Membership and status of the cluster.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Create or update the resources in a file or directory.
    Apply {
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
    },
    /// Show one resource.
    Get(ResourceArgs),
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
    Delete(ResourceArgs),
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
        command: ImportCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An OpenAPI 3.0/3.1 document (JSON or YAML): one Tool per operation of an HTTP upstream.
    Openapi {
        file: PathBuf,
        /// The Upstream the tools call.
        #[arg(long)]
        upstream: String,
        /// The tenant the tools belong to; shared when absent.
        #[arg(long)]
        tenant: Option<String>,
        /// Where to write the YAML stream; standard output when absent.
        #[arg(long, value_name = "OUT")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A TOML file with the same names as these flags (`GATEHOUSE_*` variables over it, flags
    /// over both).
    #[arg(long, value_name = "FILE", env = "GATEHOUSE_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub raw: RawServeConfig,
}

#[derive(Debug, Args)]
pub struct ResourceArgs {
    pub kind: String,
    pub name: String,
    #[arg(long)]
    pub tenant: Option<String>,
    /// Read after every write committed so far.
    #[arg(long)]
    pub linearizable: bool,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Leader, term, voters, learners, and each node's applied index and lag.
    Status,
    /// Add a node as a learner (it receives the log but does not vote).
    AddLearner {
        #[arg(long)]
        node_id: u64,
        #[arg(long)]
        grpc: String,
    },
    /// Make a learner a voter.
    Promote { node_id: u64 },
    /// Take a node out of the cluster.
    Remove { node_id: u64 },
    /// Wait until a node has every log entry the leader has, printing its progress.
    WaitCaughtUp {
        node_id: u64,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0)]
        timeout: f64,
    },
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
            command: SkillsCommand::Resolve(args),
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
                ImportCommand::Openapi {
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
