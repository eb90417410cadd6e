//! The MCP front's overhead: read-only `tools/call`s to a Rust (rmcp) MCP server, once directly
//! and once through a `gatehouse` node, with the same client, runs alternating so the two are
//! measured under the same conditions and the overhead is a ratio from one process's run.
//!
//! The upstream (`McpUpstream`) runs in this process; the gateway is a separate `gatehouse`
//! process, so its CPU time per call comes from its own accounting in /proc. The client sends
//! stateless 2026-07-28 requests over keep-alive connections, sequentially and from concurrent
//! sessions. It prints figures and asserts nothing about them; every loop is bounded in count.
//! `--help` lists the settings.

#[path = "mcp_gateway/gateway.rs"]
mod gateway;
#[path = "mcp_gateway/load.rs"]
mod load;

use gatehouse_tests::McpUpstream;
use gateway::Gateway;
use load::{Target, quantile};
use serde_json::json;
use std::time::Duration;

const HELP: &str = "usage: mcp_gateway [--calls N] [--rounds R] [--sessions C] [--direct-only]
  --calls N      calls per run (default 2000)
  --rounds R     rounds; each runs direct and gateway, sequential and concurrent (default 3)
  --sessions C   concurrent sessions in the concurrent runs (default 16)
  --direct-only  only the direct runs (no gateway process)
The gateway binary is target/<profile>/gatehouse (scripts/bench-mcp builds it) or GATEHOUSE_BIN.";

/// How long the idle gateway's CPU use is sampled.
const IDLE_SAMPLE: Duration = Duration::from_secs(2);

struct Settings {
    calls: usize,
    rounds: usize,
    sessions: usize,
    direct_only: bool,
}

fn parse() -> anyhow::Result<Option<Settings>> {
    let mut s = Settings {
        calls: 2000,
        rounds: 3,
        sessions: 16,
        direct_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--calls" => s.calls = value()?.parse()?,
            "--rounds" => s.rounds = value()?.parse()?,
            "--sessions" => s.sessions = value()?.parse()?,
            "--direct-only" => s.direct_only = true,
            "--help" | "-h" => return Ok(None),
            // cargo bench passes --bench to every harness.
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other}\n{HELP}"),
        }
    }
    if s.calls == 0 || s.rounds == 0 || s.sessions == 0 {
        anyhow::bail!("--calls, --rounds and --sessions must be above 0");
    }
    Ok(Some(s))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Direct,
    Gateway,
}

/// Everything measured for one (concurrency, route) over all rounds.
#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    calls_per_second: Vec<f64>,
    /// Gateway CPU time over the measured calls, and their count.
    cpu: Duration,
    cpu_calls: usize,
    /// Wall time of the runs whose CPU was measured.
    cpu_elapsed: Duration,
}

impl Tally {
    fn p(&mut self, q: f64) -> Duration {
        self.latencies.sort_unstable();
        quantile(&self.latencies, q)
    }

    /// The median of the rounds' throughputs.
    fn calls_per_second(&self) -> f64 {
        let mut all = self.calls_per_second.clone();
        all.sort_by(f64::total_cmp);
        all.get(all.len() / 2).copied().unwrap_or(0.0)
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> anyhow::Result<()> {
    let Some(settings) = parse()? else {
        println!("{HELP}");
        return Ok(());
    };
    let upstream = McpUpstream::start();
    let gateway = if settings.direct_only {
        None
    } else {
        Some(Gateway::start(&gateway::binary()?, &upstream.url())?)
    };
    let ticks = gateway::ticks_per_second();
    // What the idle gateway burns per second, taken off its CPU per call.
    let idle_per_second = match &gateway {
        Some(g) => gateway::idle_cpu_per_second(g.pid(), ticks, IDLE_SAMPLE)?,
        None => 0.0,
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "mcp gateway bench: read-only tools/call `echo` via rmcp upstream, stateless 2026-07-28 \
         over keep-alive; {} calls x {} rounds per cell; {cores} cores shared by client, \
         upstream and gateway",
        settings.calls, settings.rounds
    );
    if gateway.is_some() {
        println!(
            "idle gateway: {:.2} ms CPU per second (taken off its CPU per call)",
            idle_per_second * 1e3
        );
    }

    let arguments = json!({"text": "bench"});
    let direct = Target {
        url: upstream.url(),
        key: None,
        tool: "echo".into(),
        arguments: arguments.clone(),
    };
    let through = gateway.as_ref().map(|g| Target {
        url: g.mcp_url.clone(),
        key: Some(gateway::AGENT_KEY.into()),
        tool: format!("{}.echo", gateway::UPSTREAM),
        arguments,
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let shapes = [("sequential", 1), ("concurrent", settings.sessions)];
    let mut tallies: Vec<[Tally; 2]> = shapes.iter().map(|_| Default::default()).collect();
    for round in 0..settings.rounds {
        for (shape, &(label, sessions)) in shapes.iter().enumerate() {
            // Alternate which route goes first, so neither always runs on a warmer machine.
            let order = if round % 2 == 0 {
                [Via::Direct, Via::Gateway]
            } else {
                [Via::Gateway, Via::Direct]
            };
            for via in order {
                let (target, pid) = match (via, &through, &gateway) {
                    (Via::Direct, _, _) => (&direct, None),
                    (Via::Gateway, Some(target), Some(g)) => (target, Some(g.pid())),
                    (Via::Gateway, _, _) => continue,
                };
                let clients = runtime.block_on(load::connect(target, sessions))?;
                let cpu_before = pid.map(|p| gateway::cpu_time(p, ticks)).transpose()?;
                let run = runtime.block_on(load::run(&clients, target, settings.calls))?;
                let cpu_after = pid.map(|p| gateway::cpu_time(p, ticks)).transpose()?;
                let tally = &mut tallies[shape][via as usize];
                if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
                    tally.cpu += after.saturating_sub(before);
                    tally.cpu_calls += run.latencies.len();
                    tally.cpu_elapsed += run.elapsed;
                }
                println!(
                    "  round {} {label:>10} ({sessions:>2} sessions) {:>7}: {:>8.0} calls/s",
                    round + 1,
                    name(via),
                    run.calls_per_second()
                );
                tally.calls_per_second.push(run.calls_per_second());
                tally.latencies.extend(run.latencies);
            }
        }
    }

    println!(
        "\n{:<24} {:>9} {:>9} {:>10} {:>16}",
        "", "p50 us", "p99 us", "calls/s", "gateway CPU/call"
    );
    for (shape, &(label, sessions)) in shapes.iter().enumerate() {
        let [direct, through] = &mut tallies[shape];
        for (via, tally) in [(Via::Direct, &mut *direct), (Via::Gateway, &mut *through)] {
            if tally.latencies.is_empty() {
                continue;
            }
            let cpu = if tally.cpu_calls > 0 {
                // Less what the idle node burns meanwhile (heartbeats, timers).
                let idle = idle_per_second * tally.cpu_elapsed.as_secs_f64();
                let net = (micros(tally.cpu) - idle * 1e6).max(0.0);
                format!("{:.1} us", net / tally.cpu_calls as f64)
            } else {
                "-".into()
            };
            println!(
                "{:<24} {:>9.0} {:>9.0} {:>10.0} {:>16}",
                format!("{label} x{sessions} {}", name(via)),
                micros(tally.p(0.50)),
                micros(tally.p(0.99)),
                tally.calls_per_second(),
                cpu
            );
        }
        if !through.latencies.is_empty() {
            println!(
                "{:<24} {:>8.2}x {:>8.2}x {:>9.2}x   (gateway / direct)",
                format!("{label} x{sessions} overhead"),
                micros(through.p(0.50)) / micros(direct.p(0.50)),
                micros(through.p(0.99)) / micros(direct.p(0.99)),
                through.calls_per_second() / direct.calls_per_second(),
            );
        }
    }
    drop(gateway);
    Ok(())
}

fn name(via: Via) -> &'static str {
    match via {
        Via::Direct => "direct",
        Via::Gateway => "gateway",
    }
}
