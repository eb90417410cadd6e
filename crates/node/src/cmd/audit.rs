//! `gatehouse audit`: check and read a node's audit log on its own disk (no cluster needed).

use super::Output;
use crate::config::RawServeConfig;
use crate::exit::{Exit, Usage};
use anyhow::Context;
use clap::{Args, Subcommand};
use gatehouse_audit::Record;
use gatehouse_cluster::node_files::AUDIT_DIR;
use gatehouse_fronts::time::rfc3339;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check every record's hash and link and the log's end; exit 1 on any problem.
    Verify(LogArgs),
    /// Print the last records, oldest first.
    Tail {
        #[command(flatten)]
        log: LogArgs,
        /// How many records.
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        /// One JSON record per line, exactly as stored (the same as `-o jsonl`).
        #[arg(long)]
        json: bool,
    },
}

/// Which node's log: the same data directory `gatehouse serve` was given.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// The node's data directory (its `serve --data-dir`); the log is in DIR/audit.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The node's `serve --config` file, to take its data-dir from.
    #[arg(long, value_name = "FILE", conflicts_with = "data_dir")]
    pub config: Option<PathBuf>,
}

impl LogArgs {
    fn audit_dir(&self) -> anyhow::Result<PathBuf> {
        let data_dir = match (&self.data_dir, &self.config) {
            (Some(dir), _) => dir.clone(),
            (None, Some(file)) => RawServeConfig::from_file(file)?
                .data_dir
                .with_context(|| format!("{} has no data-dir", file.display()))?,
            (None, None) => {
                return Err(Usage(
                    "give the node's data directory (--data-dir) or its --config file".into(),
                )
                .into());
            }
        };
        // The directory came from the command line: one without a log is a usage mistake.
        let dir = data_dir.join(AUDIT_DIR);
        if !dir.is_dir() {
            return Err(Usage(format!("no audit log in {}", data_dir.display())).into());
        }
        Ok(dir)
    }
}

pub fn run(command: AuditCommand, output: Output) -> anyhow::Result<Exit> {
    match command {
        AuditCommand::Verify(log) => verify(&log),
        AuditCommand::Tail { log, n, json } => {
            tail(&log, n, if json { Output::Jsonl } else { output })
        }
    }
}

fn verify(log: &LogArgs) -> anyhow::Result<Exit> {
    match gatehouse_audit::verify(&log.audit_dir()?) {
        Ok(verified) => {
            println!(
                "audit log intact: {} records, last seq {}, head {}",
                verified.records, verified.last_seq, verified.head_hash
            );
            if verified.torn_bytes > 0 {
                println!(
                    "({} bytes of an unfinished last write follow it; the node cuts them when it starts)",
                    verified.torn_bytes
                );
            }
            Ok(Exit::Done)
        }
        Err(problem) => {
            println!("audit log damaged: {problem}");
            Ok(Exit::Failed)
        }
    }
}

fn tail(log: &LogArgs, n: usize, output: Output) -> anyhow::Result<Exit> {
    let records = gatehouse_audit::tail(&log.audit_dir()?, n)?;
    match output {
        Output::Text => records.iter().for_each(|r| println!("{}", line(r))),
        json => json.print_list(
            records
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?,
        ),
    }
    Ok(Exit::Done)
}

/// `seq time kind tenant chain target mode decision outcome`, then what identifies the call.
fn line(record: &Record) -> String {
    let e = &record.entry;
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let kind = serde_json::to_value(e.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let chain = if e.chain.is_empty() {
        "-".to_owned()
    } else {
        e.chain.join(">")
    };
    let mut text = format!(
        "{:>6} {} {kind} tenant={} chain={chain} target={} mode={} decision={} outcome={}",
        record.seq,
        rfc3339(record.at_ms),
        or_dash(&e.tenant),
        or_dash(&e.target),
        or_dash(&e.mode),
        or_dash(&e.decision),
        e.outcome,
    );
    let extras = [
        ("call", &e.call_id),
        ("claim", &e.claim_id),
        ("args", &e.args_sha256),
        ("output", &e.output_sha256),
        ("trace", &e.trace_id),
    ];
    for (name, value) in extras {
        if let Some(value) = value {
            text.push_str(&format!(" {name}={value}"));
        }
    }
    if let Some(len) = e.output_len {
        text.push_str(&format!(" output_len={len}"));
    }
    text
}
