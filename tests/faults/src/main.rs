//! `gatehouse-faults`: runs one seeded fault campaign against real `gatehouse serve` processes
//! and prints its report; exits 1 when a checker found an anomaly.

use clap::Parser;
use gatehouse_faults::campaign::{self, Settings};
use gatehouse_faults::history::FaultKind;
use gatehouse_faults::{nemesis, report};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(about = "A seeded fault campaign against a real gatehouse cluster")]
struct Args {
    /// The schedule's seed; a random one when absent (it is printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// How long faults are injected, in seconds.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The quiet time between one fault healed (a leader back) and the next, in milliseconds:
    /// drawn from half of it to all of it.
    #[arg(long, default_value_t = 1000)]
    every_ms: u64,
    /// How long each fault is held before it is healed: MIN..MAX milliseconds, drawn evenly.
    #[arg(long, default_value = "500..2500", value_name = "MIN..MAX")]
    hold_ms: nemesis::Hold,
    /// Stop after this many rounds (every kind once a round), or at --seconds if sooner.
    #[arg(long)]
    rounds: Option<usize>,
    /// Only these kinds of fault (comma-separated, snake_case); every kind when absent.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// The gatehouse binary; the one beside this binary (or GATEHOUSE_BIN) by default.
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Keep the nodes' data, logs and the history here; a temporary directory otherwise.
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(clean) if clean => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("the campaign could not run: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> anyhow::Result<bool> {
    let kinds = if args.kinds.is_empty() {
        nemesis::ALL.to_vec()
    } else {
        args.kinds
            .iter()
            .map(|k| serde_json::from_value::<FaultKind>(serde_json::Value::String(k.clone())))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("--kinds: {e}"))?
    };
    let temp = tempfile_dir(args.dir.as_ref())?;
    let settings = Settings {
        seed: args.seed.unwrap_or_else(rand::random),
        duration: Duration::from_secs(args.seconds),
        every: Duration::from_millis(args.every_ms.max(200)),
        hold: args.hold_ms,
        rounds: args.rounds,
        kinds,
        bin: args.bin.unwrap_or_else(campaign::default_bin),
        dir: temp.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(campaign::run(&settings))?;
    print!("{}", report::render(&outcome));
    let history = temp.join("history.json");
    std::fs::write(&history, serde_json::to_vec(&outcome.history)?)?;
    println!("history: {}", history.display());
    if args.dir.is_none() && outcome.anomalies.is_empty() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    Ok(outcome.anomalies.is_empty())
}

/// `dir`, made if needed, or a new directory under the system's temporary one (kept when the
/// campaign finds an anomaly, so its logs can be read).
fn tempfile_dir(dir: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("gatehouse-faults-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
