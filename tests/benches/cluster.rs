//! The cluster benchmark: registry write throughput and commit latency of a durable three-node
//! gatehouse cluster on loopback, the time a new learner takes to catch up on a loaded
//! registry, and the same write load against a three-member etcd cluster for comparison.
//!
//! It prints figures and asserts nothing about them. Everything listens on 127.0.0.1 only, and
//! every load loop is bounded in time and in count. `--help` lists the settings.

// The crate root is this file, so its modules live beside it in `cluster/` by path (a file
// directly in `benches/` would be a benchmark of its own).
#[path = "cluster/etcd.rs"]
mod etcd;
#[path = "cluster/gatehouse.rs"]
mod gatehouse;
#[path = "cluster/load.rs"]
mod load;
#[path = "cluster/settings.rs"]
mod settings;

use gatehouse_node::config::RaftTimings;
use load::{Level, Window, ms};
use settings::{HELP, Route, Settings};
use std::time::{Duration, Instant};

/// etcd's levels, by route.
type EtcdLevels = Vec<(Route, Vec<Level>)>;

/// The nodes run in this process: they get the allocator the `gatehouse` binary ships with.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let Some(settings) = Settings::parse(std::env::args().skip(1))? else {
        println!("{HELP}");
        return Ok(());
    };
    // Installed before the harness tries to install its own: node logs would bury the figures.
    // Errors only, on stderr, unless RUST_LOG says otherwise, and not openraft's line per
    // failed RPC (the learner joining), as a node logs.
    gatehouse_gateway::telemetry::install_stderr_logs("error");
    let started = Instant::now();
    let window = Window {
        warmup: settings.warmup,
        measure: settings.seconds,
        max_writes: settings.max_writes,
    };
    let value = load::value(settings.value_bytes);
    println!(
        "cluster bench: levels {:?}, {:.1} s per level after {:.1} s warm-up, {}-byte values",
        settings.levels,
        settings.seconds.as_secs_f64(),
        settings.warmup.as_secs_f64(),
        value.len()
    );

    // One round: gatehouse's levels, then etcd's; the learner's catch-up once, after the first.
    let mut rounds: Vec<(Vec<Level>, EtcdLevels)> = Vec::new();
    for round in 1..=settings.rounds {
        if settings.rounds > 1 {
            println!("round {round} of {}", settings.rounds);
        }
        println!("[1/3] gatehouse: 3 durable nodes, default Raft timings, writes to the leader");
        let (cluster, leader) = gatehouse::start_cluster()?;
        println!("  cluster up, leader is node {leader}");
        let ours = gatehouse::writes(&cluster, leader, &settings.levels, window, &value)?;
        drop(cluster);

        match (round, settings.catchup) {
            (1, 0) => println!("[2/3] learner catch-up: skipped (--catchup 0)"),
            (1, _) => catchup(&settings, &value)?,
            _ => {}
        }

        let mut theirs: EtcdLevels = Vec::new();
        match etcd::find_binary() {
            _ if settings.skip_etcd => println!("[3/3] etcd comparison: skipped (--skip-etcd)"),
            None => println!(
                "[3/3] etcd comparison: skipped, no `etcd` on PATH (Debian: apt-get install \
                 etcd-server)"
            ),
            Some(binary) => theirs = etcd_writes(&binary, &settings, window, &value)?,
        }
        rounds.push((ours, theirs));
    }

    println!();
    println!(
        "summary (writes/s, p50, p99, the machine's CPU per write; ratio = gatehouse writes/s \
         over etcd's)"
    );
    for (ours, theirs) in &rounds {
        if rounds.len() > 1 {
            println!();
        }
        summarize(ours, theirs);
    }
    // Medians need more than one round, and etcd's figures to divide by.
    if rounds.len() > 1 && rounds.iter().all(|(_, theirs)| !theirs.is_empty()) {
        print_medians(&settings, &rounds);
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// One round's lines: each level of gatehouse beside each etcd route's, with the ratio.
fn summarize(ours: &[Level], theirs: &[(Route, Vec<Level>)]) {
    for (i, level) in ours.iter().enumerate() {
        let mut line = format!(
            "  {:>3} clients  gatehouse {:>7.0}/s {:>9} {:>9} {:>8}",
            level.clients,
            level.per_second(),
            ms(level.percentile(50.0)),
            ms(level.percentile(99.0)),
            cpu(level),
        );
        for (route, levels) in theirs {
            if let Some(e) = levels.get(i) {
                line += &format!(
                    " | {} {:>7.0}/s {:>9} {:>9} {:>8} ratio {:.2}",
                    route.name(),
                    e.per_second(),
                    ms(e.percentile(50.0)),
                    ms(e.percentile(99.0)),
                    cpu(e),
                    ratio(level, e),
                );
            }
        }
        println!("{line}");
    }
}

/// Each level's median ratio over the rounds, per etcd route, with the ratios it came from.
fn print_medians(settings: &Settings, rounds: &[(Vec<Level>, EtcdLevels)]) {
    println!();
    println!("median ratio over {} rounds", rounds.len());
    for (i, &clients) in settings.levels.iter().enumerate() {
        let mut line = format!("  {clients:>3} clients");
        for (r, route) in settings.etcd_via.iter().enumerate() {
            let mut ratios: Vec<f64> = rounds
                .iter()
                .filter_map(|(ours, theirs)| Some(ratio(ours.get(i)?, theirs.get(r)?.1.get(i)?)))
                .collect();
            let Some(median) = median(&mut ratios) else {
                continue;
            };
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            line += &format!("  {} {median:.2} (of {})", route.name(), each.join(", "));
        }
        println!("{line}");
    }
}

/// Gatehouse's writes/s over etcd's at one level.
fn ratio(ours: &Level, theirs: &Level) -> f64 {
    ours.per_second() / theirs.per_second().max(1e-9)
}

/// The middle value (the mean of the middle two for an even count); `None` for none.
fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// A level's machine CPU per write, for the summary.
fn cpu(level: &Level) -> String {
    level.cpu_per_write().map_or("-".to_owned(), |c| {
        format!("{:.0} µs", c.as_secs_f64() * 1e6)
    })
}

fn catchup(settings: &Settings, value: &str) -> anyhow::Result<()> {
    let timings = if settings.catchup_snapshot {
        RaftTimings {
            snapshot_every: 10,
            logs_kept_after_snapshot: 0,
            ..RaftTimings::default()
        }
    } else {
        RaftTimings::default()
    };
    println!(
        "[2/3] learner catch-up: {} tenants in batches of {} on a fresh cluster \
         (snapshot every {} entries, {} kept after)",
        settings.catchup, settings.batch, timings.snapshot_every, timings.logs_kept_after_snapshot
    );
    let c = gatehouse::catchup(timings, settings.catchup, settings.batch, value)?;
    let how = match c.snapshot_index {
        Some(i) => format!("by snapshot (node 4's snapshot covers index {i})"),
        None => "by log replication (node 4 has no snapshot)".to_owned(),
    };
    println!(
        "  learner 4 caught up on {} resources (index {}) in {:.2} s, {how}; load took {:.2} s",
        c.resources,
        c.target_index,
        c.catchup.as_secs_f64(),
        c.load.as_secs_f64()
    );
    Ok(())
}

fn etcd_writes(
    binary: &std::path::Path,
    settings: &Settings,
    window: Window,
    value: &str,
) -> anyhow::Result<Vec<(Route, Vec<Level>)>> {
    println!(
        "[3/3] etcd comparison: 3 members from {}, default fsync, writes to the leader",
        binary.display()
    );
    // Driven like the harness's clients: a two-worker runtime of its own.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut etcd = etcd::Etcd::start(binary)?;
    let leader = runtime.block_on(etcd.leader(Duration::from_secs(30)))?;
    println!("  etcd up, leader serves clients on {leader}");
    let mut results = Vec::new();
    for &route in &settings.etcd_via {
        let mut levels = Vec::new();
        for &clients in &settings.levels {
            let tag = format!("{clients}");
            let level = runtime.block_on(async {
                anyhow::Ok(match route {
                    Route::Grpc => {
                        let mut writers = Vec::new();
                        for _ in 0..clients {
                            writers.push(etcd::GrpcPut::connect(leader, value).await?);
                        }
                        load::run(writers, window, &format!("g{tag}")).await
                    }
                    Route::Gateway => {
                        let mut writers = Vec::new();
                        for _ in 0..clients {
                            writers.push(etcd::GatewayPut::connect(leader, value).await?);
                        }
                        load::run(writers, window, &format!("h{tag}")).await
                    }
                })
            })?;
            println!("  {} {}", route.name(), level.summary());
            levels.push(level);
        }
        results.push((route, levels));
    }
    drop(etcd);
    Ok(results)
}
