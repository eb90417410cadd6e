//! The MCP front's overhead: read-only `tools/call`s to a Rust (rmcp) MCP server, once directly
//! and once through a `gatehouse` node, with the same client, runs alternating so the two are
//! measured under the same conditions and the overhead is a ratio from one process's run.
//!
//! The upstream (`McpUpstream`) runs in this process; the gateway is a separate `gatehouse`
//! process, so its CPU time per call comes from its own accounting in /proc. The client sends
//! stateless 2026-07-28 requests over keep-alive connections, sequentially and from concurrent
//! sessions. `--compare NAME=CMD` puts another MCP gateway beside them (compare.rs), called by
//! the same client in the same rounds, routes rotated within each round. It prints figures and
//! asserts nothing about them; every loop is bounded in count. `--help` lists the settings.

#[path = "mcp_gateway/compare.rs"]
mod compare;
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
                   [--compare NAME=CMD [--compare-config FILE] [--compare-path P] [--compare-tool T]]
  --calls N      calls per run (default 2000)
  --rounds R     rounds; each runs every route, sequential and concurrent (default 3)
  --sessions C   concurrent sessions in the concurrent runs (default 16)
  --direct-only  only the direct runs (no gateway process)
  --memory N     after the rounds, open N MCP sessions (2025-11-25, initialize) on the
                 gateway and print its resident memory before and after, per session
  --compare NAME=CMD
                 another MCP gateway, started by the shell command CMD, put beside Gatehouse:
                 {config} in CMD is the filled config file, {host} {port} {upstream} the
                 listener and the upstream's URL; it must serve MCP without auth
  --compare-config FILE
                 a config template; {{host}}, {{port}} and {{upstream}} are filled in
  --compare-path P  where it serves MCP (default /mcp)
  --compare-tool T  the upstream's echo tool as it names it (default echo)
Before the rounds every route takes 500 calls in each shape, not measured.
The gateway binary is target/<profile>/gatehouse (scripts/bench-mcp builds it) or GATEHOUSE_BIN.
Example: scripts/bench-mcp --compare agentgateway='/path/to/agentgateway -f {config}' \\
           --compare-config tests/benches/mcp_gateway/agentgateway.yaml";

/// How long the idle gateways' CPU use is sampled.
const IDLE_SAMPLE: Duration = Duration::from_secs(2);

/// Calls each route takes in each shape before the rounds, not measured. A fixed number, so
/// that `scripts/bench-mcp-instructions`, which subtracts a run of N calls from one of 3N,
/// still counts the 4N measured calls only.
const WARMUP: usize = 500;

struct Settings {
    calls: usize,
    rounds: usize,
    sessions: usize,
    direct_only: bool,
    memory_sessions: usize,
    compare: Option<compare::Spec>,
}

fn parse() -> anyhow::Result<Option<Settings>> {
    let mut s = Settings {
        calls: 2000,
        rounds: 3,
        sessions: 16,
        direct_only: false,
        memory_sessions: 0,
        compare: None,
    };
    let (mut config, mut path, mut tool) = (None, None, None);
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
            "--memory" => s.memory_sessions = value()?.parse()?,
            "--compare" => s.compare = Some(compare::Spec::parse(&value()?)?),
            "--compare-config" => config = Some(std::path::PathBuf::from(value()?)),
            "--compare-path" => path = Some(value()?),
            "--compare-tool" => tool = Some(value()?),
            "--help" | "-h" => return Ok(None),
            // cargo bench passes --bench to every harness.
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other}\n{HELP}"),
        }
    }
    if s.calls == 0 || s.rounds == 0 || s.sessions == 0 {
        anyhow::bail!("--calls, --rounds and --sessions must be above 0");
    }
    match &mut s.compare {
        Some(spec) => {
            spec.config = config;
            spec.path = path.unwrap_or(spec.path.clone());
            spec.tool = tool.unwrap_or(spec.tool.clone());
        }
        None if config.is_some() || path.is_some() || tool.is_some() => {
            anyhow::bail!("--compare-config, --compare-path and --compare-tool need --compare")
        }
        None => {}
    }
    Ok(Some(s))
}

/// One way to the upstream: straight, or through a gateway process.
struct Route {
    name: String,
    target: Target,
    /// The gateway process whose CPU is counted; `None` for the direct route.
    pid: Option<u32>,
    /// What the idle gateway burns per second, taken off its CPU per call.
    idle_per_second: f64,
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

    /// Gateway CPU per call, less what the idle process burns meanwhile (heartbeats, timers).
    fn cpu_per_call(&self, idle_per_second: f64) -> Option<f64> {
        if self.cpu_calls == 0 {
            return None;
        }
        let idle = idle_per_second * self.cpu_elapsed.as_secs_f64();
        let net = (micros(self.cpu) - idle * 1e6).max(0.0);
        Some(net / self.cpu_calls as f64)
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
    let ticks = gateway::ticks_per_second();
    let arguments = json!({"text": "bench"});
    let mut routes = vec![Route {
        name: "direct".into(),
        target: Target {
            url: upstream.url(),
            key: None,
            tool: "echo".into(),
            arguments: arguments.clone(),
        },
        pid: None,
        idle_per_second: 0.0,
    }];
    let gatehouse = if settings.direct_only {
        None
    } else {
        Some(Gateway::start(&gateway::binary()?, &upstream.url())?)
    };
    if let Some(g) = &gatehouse {
        routes.push(Route {
            name: "gatehouse".into(),
            target: Target {
                url: g.mcp_url.clone(),
                key: Some(gateway::AGENT_KEY.into()),
                tool: format!("{}.echo", gateway::UPSTREAM),
                arguments: arguments.clone(),
            },
            pid: Some(g.pid()),
            idle_per_second: 0.0,
        });
    }
    let other = match &settings.compare {
        Some(spec) if !settings.direct_only => {
            Some((spec, compare::Other::start(spec, &upstream.url())?))
        }
        _ => None,
    };
    if let Some((spec, o)) = &other {
        routes.push(Route {
            name: spec.name.clone(),
            target: Target {
                url: o.url.clone(),
                key: None,
                tool: spec.tool.clone(),
                arguments,
            },
            pid: Some(o.pid()),
            idle_per_second: 0.0,
        });
    }
    for route in &mut routes {
        if let Some(pid) = route.pid {
            route.idle_per_second = gateway::idle_cpu_per_second(pid, ticks, IDLE_SAMPLE)?;
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "mcp gateway bench: read-only tools/call `echo` via rmcp upstream, stateless 2026-07-28 \
         over keep-alive; {} calls x {} rounds per cell; {cores} cores shared by client, \
         upstream and gateways",
        settings.calls, settings.rounds
    );
    for route in routes.iter().filter(|r| r.pid.is_some()) {
        println!(
            "idle {}: {:.2} ms CPU per second (taken off its CPU per call)",
            route.name,
            route.idle_per_second * 1e3
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let shapes = [("sequential", 1), ("concurrent", settings.sessions)];
    let mut tallies: Vec<Vec<Tally>> = shapes
        .iter()
        .map(|_| routes.iter().map(|_| Tally::default()).collect())
        .collect();
    // One pass over every route in each shape before the rounds: the first calls of a process
    // (its connections, caches, heap) and of the machine fell on the routes that come first in
    // round 1, direct then Gatehouse, and the rotation below could not even that out. In one
    // run Gatehouse's first sequential round moved 2,494 calls/s against 2,843 and 3,157 in
    // the next two, and direct's 4,264 against 5,344 and 5,542, while the gateway run third
    // moved the same in all three.
    for &(_, sessions) in &shapes {
        for route in &routes {
            let clients = runtime.block_on(load::connect(&route.target, sessions))?;
            runtime.block_on(load::run(&clients, &route.target, WARMUP))?;
        }
    }
    println!("  warmed up: {WARMUP} calls per route and shape, not measured");
    for round in 0..settings.rounds {
        for (shape, &(label, sessions)) in shapes.iter().enumerate() {
            // Rotate which route goes first, so none always runs on a warmer machine.
            for turn in 0..routes.len() {
                let index = (turn + round) % routes.len();
                let route = &routes[index];
                let clients = runtime.block_on(load::connect(&route.target, sessions))?;
                let cpu_before = route.pid.map(|p| gateway::cpu_time(p, ticks)).transpose()?;
                let run = runtime.block_on(load::run(&clients, &route.target, settings.calls))?;
                let cpu_after = route.pid.map(|p| gateway::cpu_time(p, ticks)).transpose()?;
                let tally = &mut tallies[shape][index];
                if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
                    tally.cpu += after.saturating_sub(before);
                    tally.cpu_calls += run.latencies.len();
                    tally.cpu_elapsed += run.elapsed;
                }
                println!(
                    "  round {} {label:>10} ({sessions:>2} sessions) {:>12}: {:>8.0} calls/s",
                    round + 1,
                    route.name,
                    run.calls_per_second()
                );
                tally.calls_per_second.push(run.calls_per_second());
                tally.latencies.extend(run.latencies);
            }
        }
    }

    println!(
        "\n{:<36} {:>9} {:>9} {:>10} {:>16}",
        "", "p50 us", "p99 us", "calls/s", "gateway CPU/call"
    );
    for (shape, &(label, sessions)) in shapes.iter().enumerate() {
        let row = &mut tallies[shape];
        for (route, tally) in routes.iter().zip(row.iter_mut()) {
            let cpu = tally
                .cpu_per_call(route.idle_per_second)
                .map_or("-".into(), |us| format!("{us:.1} us"));
            println!(
                "{:<36} {:>9.0} {:>9.0} {:>10.0} {:>16}",
                format!("{label} x{sessions} {}", route.name),
                micros(tally.p(0.50)),
                micros(tally.p(0.99)),
                tally.calls_per_second(),
                cpu
            );
        }
        let direct = Figures::of(&mut row[0], 0.0);
        for (index, route) in routes.iter().enumerate().skip(1) {
            let through = Figures::of(&mut row[index], route.idle_per_second);
            println!(
                "{:<36} {:>8.2}x {:>8.2}x {:>9.2}x   ({} / direct)",
                format!("{label} x{sessions} {} overhead", route.name),
                through.p50 / direct.p50,
                through.p99 / direct.p99,
                through.calls_per_second / direct.calls_per_second,
                route.name,
            );
        }
        // Gatehouse beside the other gateway: CPU per call, and latency added over direct.
        if routes.len() == 3 {
            let ours = Figures::of(&mut row[1], routes[1].idle_per_second);
            let theirs = Figures::of(&mut row[2], routes[2].idle_per_second);
            let cpu = match (ours.cpu, theirs.cpu) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                _ => "-".into(),
            };
            println!(
                "{:<36} added p50 {:.2}x, added p99 {:.2}x, calls/s {:.2}x, CPU/call {cpu}   \
                 (gatehouse / {})",
                format!("{label} x{sessions} beside"),
                (ours.p50 - direct.p50) / (theirs.p50 - direct.p50),
                (ours.p99 - direct.p99) / (theirs.p99 - direct.p99),
                ours.calls_per_second / theirs.calls_per_second,
                routes[2].name,
            );
        }
    }
    if let Some(g) = gatehouse.as_ref().filter(|_| settings.memory_sessions > 0) {
        let before = gateway::resident_kib(g.pid())?;
        let opened = runtime.block_on(g.open_sessions(settings.memory_sessions))?;
        let after = gateway::resident_kib(g.pid())?;
        println!(
            "\ngatehouse resident memory: {before} KiB after the rounds, {after} KiB with {opened} \
             MCP sessions open: {:.1} KiB per session",
            after.saturating_sub(before) as f64 / opened.max(1) as f64
        );
    }
    drop(other);
    drop(gatehouse);
    Ok(())
}

/// One cell's figures, in microseconds and calls per second.
struct Figures {
    p50: f64,
    p99: f64,
    calls_per_second: f64,
    cpu: Option<f64>,
}

impl Figures {
    fn of(tally: &mut Tally, idle_per_second: f64) -> Figures {
        Figures {
            p50: micros(tally.p(0.50)),
            p99: micros(tally.p(0.99)),
            calls_per_second: tally.calls_per_second(),
            cpu: tally.cpu_per_call(idle_per_second),
        }
    }
}
