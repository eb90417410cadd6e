//! The command line: the clap tree, and dispatch to `cmd`, where each command keeps the
//! arguments it takes. Commands that talk to a node take the connection flags
//! (`client::RemoteArgs`), commands that print data take `-o` (`cmd::OutputArgs`); the node's
//! own commands (`serve`, `dev`) take neither.

use crate::cmd::client::{Before, Remote, RemoteArgs};
use crate::cmd::{self, OutputArgs};
use crate::exit::{Exit, Usage};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "A governed tool gateway for AI agents",
    after_help = "Exit codes: 0 done, 1 failed, 2 usage error, 3 refused by the cluster, \
                  4 unreachable, 5 pending approval, 6 outcome unknown."
)]
pub struct Cli {
    #[command(flatten)]
    pub before: Before,
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
    /// Membership and status of the cluster, and where each tenant lives.
    Cluster {
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        out: OutputArgs,
        #[command(subcommand)]
        command: cmd::cluster::ClusterCommand,
    },
    /// Create or update the resources in a file or directory.
    Apply {
        /// A YAML file, or a directory of .yaml/.yml files.
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Show one resource.
    Get(cmd::resources::ResourceArgs),
    /// List resources of a kind.
    List {
        /// Tenant, Principal, Upstream, Tool, Skill, Policy or Webhook (any case, singular or plural).
        kind: String,
        /// Only the resources of this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Read after every write committed so far.
        #[arg(long)]
        linearizable: bool,
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Delete one resource.
    Delete(cmd::resources::ResourceArgs),
    /// Check declarative files (a file or a directory of .yaml/.yml files); exit 1 on any problem.
    Validate {
        /// A YAML file, or a directory of .yaml/.yml files.
        #[arg(short = 'f', long = "file", value_name = "PATH")]
        path: PathBuf,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Skills: resolve the cascade for a call.
    Skills {
        #[command(subcommand)]
        command: cmd::skills::SkillsCommand,
    },
    /// Make a new API key: prints the key once, and the SHA-256 a Principal stores.
    Keygen {
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Call a tool through the gateway; with --wait, follow a call that needs approval.
    Call(cmd::call::CallArgs),
    /// Calls that wait for approval: list, watch, show, approve, reject, cancel, resolve.
    Approvals {
        #[command(flatten)]
        remote: RemoteArgs,
        #[command(flatten)]
        out: OutputArgs,
        #[command(subcommand)]
        command: cmd::approvals::ApprovalsCommand,
    },
    /// This node's audit log, read from its data directory: verify the hash chain, tail it.
    Audit {
        #[command(flatten)]
        out: OutputArgs,
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

pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let before = cli.before;
    let remote = |args: RemoteArgs, out: Option<OutputArgs>| {
        Remote::new(args, out.unwrap_or_default(), &before)
    };
    let output = |out: OutputArgs| out.output.or(before.output).unwrap_or_default();
    // A command that prints ends quietly when its reader goes away (`| head`); a node never
    // dies of a peer closing a socket.
    if !matches!(cli.command, Command::Serve(_) | Command::Dev(_)) {
        sigpipe::reset();
    }
    match cli.command {
        Command::Serve(mut args) => {
            // `gatehouse --token KEY serve --join ...` is how a joining node was given its key.
            args.token = before.token.clone().or(args.token);
            let others = Before {
                token: None,
                ..before.clone()
            };
            refuse_client_flags("serve", &others)?;
            cmd::serve::run(args)
        }
        Command::Dev(args) => {
            refuse_client_flags("dev", &before)?;
            cmd::dev::run(args)
        }
        Command::Cluster {
            remote: args,
            out,
            command,
        } => cmd::remote(cmd::cluster::run(&remote(args, Some(out)), command)),
        Command::Apply {
            path,
            remote: args,
            out,
        } => cmd::remote(cmd::resources::apply(&remote(args, Some(out)), &path)),
        Command::Get(args) => {
            let r = remote(args.remote.clone(), Some(args.out));
            cmd::remote(cmd::resources::get(&r, args))
        }
        Command::List {
            kind,
            tenant,
            linearizable,
            remote: args,
            out,
        } => cmd::remote(cmd::resources::list(
            &remote(args, Some(out)),
            kind,
            tenant,
            linearizable,
        )),
        Command::Delete(args) => {
            let r = remote(args.remote.clone(), Some(args.out));
            cmd::remote(cmd::resources::delete(&r, args))
        }
        Command::Validate { path, out } => cmd::validate::run(&path, output(out)),
        Command::Skills {
            command: cmd::skills::SkillsCommand::Resolve(args),
        } => {
            if args.offline {
                cmd::skills::resolve(&args)
            } else {
                let r = remote(args.remote.clone(), None);
                cmd::remote(cmd::skills::resolve_remote(&r, args))
            }
        }
        Command::Keygen { out } => cmd::keygen::run(output(out)),
        Command::Call(args) => {
            let r = remote(args.remote.clone(), Some(args.out));
            cmd::remote(cmd::call::run(&r, args))
        }
        Command::Approvals {
            remote: args,
            out,
            command,
        } => cmd::remote(cmd::approvals::run(&remote(args, Some(out)), command)),
        Command::Import {
            command:
                cmd::import::ImportCommand::Openapi {
                    file,
                    upstream,
                    tenant,
                    output,
                },
        } => cmd::import::openapi(&file, &upstream, tenant.as_deref(), output.as_deref()),
        Command::Audit { out, command } => cmd::audit::run(command, output(out)),
        Command::Snapshot {
            command: cmd::snapshot::SnapshotCommand::Save { file, remote: args },
        } => cmd::remote(cmd::snapshot::save(&remote(args, None), &file)),
        Command::Snapshot {
            command: cmd::snapshot::SnapshotCommand::Restore(args),
        } => cmd::snapshot::restore(&args),
    }
}

/// `serve` and `dev` are nodes, not clients: a client flag before them would silently mean
/// nothing, so it is a mistake to say. (An offline command before which a wrapper script
/// always puts `--addr` and `--token` just does not use them.)
fn refuse_client_flags(command: &str, before: &Before) -> anyhow::Result<()> {
    let given = [
        ("--addr", before.addr.is_some()),
        ("--ca", before.ca.is_some()),
        ("--token", before.token.is_some()),
        ("-o", before.output.is_some()),
    ];
    match given.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(Usage(format!(
            "{flag} is for the commands that talk to a node or print data; `{command}` is a node"
        ))
        .into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::Output;
    use clap::CommandFactory;

    /// Every flag and argument of every command, with the path of commands that leads to it.
    fn every_arg(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in command.get_arguments() {
            out.push((path.to_owned(), arg.clone()));
        }
        for sub in command.get_subcommands() {
            every_arg(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    #[test]
    fn every_flag_and_argument_has_help() {
        let mut args = Vec::new();
        every_arg(&Cli::command(), "gatehouse", &mut args);
        let bare: Vec<String> = args
            .iter()
            .filter(|(_, a)| !matches!(a.get_id().as_str(), "help" | "version"))
            .filter(|(_, a)| a.get_help().is_none() && a.get_long_help().is_none())
            .map(|(path, a)| format!("{path}: {}", a.get_id()))
            .collect();
        assert!(bare.is_empty(), "without help text: {bare:#?}");
    }

    #[test]
    fn client_flags_are_only_on_client_commands() {
        let mut cli = Cli::command();
        cli.build();
        let has = |path: &[&str], flag: &str| {
            let mut command = &cli;
            for name in path {
                command = command.find_subcommand(name).expect(name);
            }
            command.get_arguments().any(|a| a.get_long() == Some(flag))
        };
        for node in [&["serve"][..], &["dev"]] {
            for flag in ["addr", "token", "ca", "output"] {
                if !(node == ["serve"] && flag == "token") {
                    assert!(!has(node, flag), "{node:?} offers --{flag}");
                }
            }
        }
        for offline in [&["keygen"][..], &["validate"], &["audit", "tail"]] {
            assert!(!has(offline, "addr"), "{offline:?} offers --addr");
            assert!(has(offline, "output"), "{offline:?} lacks -o");
        }
        for client in [
            &["list"][..],
            &["get"],
            &["call"],
            &["apply"],
            &["approvals", "approve"],
            &["cluster", "status"],
            &["snapshot", "save"],
        ] {
            assert!(has(client, "addr"), "{client:?} lacks --addr");
            assert!(has(client, "token"), "{client:?} lacks --token");
        }
    }

    #[test]
    fn client_flags_read_the_same_before_and_after_the_command() {
        let parsed = |argv: &[&str]| {
            let cli = Cli::try_parse_from(argv).expect("parses");
            let Command::List {
                remote: args, out, ..
            } = cli.command
            else {
                panic!("not list")
            };
            Remote::new(args, out, &cli.before)
        };
        let before = parsed(&[
            "gatehouse",
            "--addr",
            "10.0.0.1:7401",
            "-o",
            "json",
            "list",
            "tools",
        ]);
        let after = parsed(&[
            "gatehouse",
            "list",
            "tools",
            "--addr",
            "10.0.0.1:7401",
            "-o",
            "json",
        ]);
        assert_eq!(before.addr, "10.0.0.1:7401");
        assert_eq!(
            (after.addr.as_str(), after.output),
            (before.addr.as_str(), before.output)
        );
        assert_eq!(before.output, Output::Json);
    }

    #[test]
    fn a_client_flag_before_a_node_command_is_a_usage_error() {
        let cli = Cli::try_parse_from(["gatehouse", "--addr", "x:1", "dev"]).expect("parses");
        let error = run(cli).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Exit::Usage);
        assert!(error.to_string().contains("--addr"), "{error}");
    }
}
