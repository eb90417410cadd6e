//! The closed-loop load driver shared by every system under test: N clients, each on its own
//! connection, each sending its next write as soon as the last one was acknowledged.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One client's connection to the system under test.
pub trait Writer: Send + 'static {
    /// Writes one small value under a fresh `key`; returns once the system acknowledged it.
    fn write(&mut self, key: String) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// How long each concurrency level runs.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
    /// Writes (successful or not) per level, across all clients; bounds a level in count.
    pub max_writes: u64,
}

/// What one concurrency level measured.
#[derive(Debug, Clone)]
pub struct Level {
    pub clients: usize,
    pub writes: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed: Duration,
    /// Sorted, one per acknowledged write.
    pub latencies: Vec<Duration>,
    /// CPU time the whole machine spent while the level was measured (every process, the
    /// kernel's loopback work included), when /proc/stat could be read.
    pub busy: Option<Duration>,
}

impl Level {
    pub fn per_second(&self) -> f64 {
        self.writes as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Nearest-rank percentile of the acknowledged writes' latencies.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let rank = (p / 100.0 * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1]
    }

    /// The machine's CPU time per acknowledged write: servers, clients and kernel together.
    pub fn cpu_per_write(&self) -> Option<Duration> {
        let busy = self.busy?;
        (self.writes > 0).then(|| busy / self.writes as u32)
    }

    pub fn summary(&self) -> String {
        let mut line = format!(
            "{:>3} clients: {:>8.0} writes/s  p50 {:>8}  p99 {:>8}  ({} writes in {:.2} s",
            self.clients,
            self.per_second(),
            ms(self.percentile(50.0)),
            ms(self.percentile(99.0)),
            self.writes,
            self.elapsed.as_secs_f64(),
        );
        if let (Some(busy), Some(per_write)) = (self.busy, self.cpu_per_write()) {
            line += &format!(
                ", machine CPU {:.0} µs/write, {:.2} cores busy",
                per_write.as_secs_f64() * 1e6,
                busy.as_secs_f64() / self.elapsed.as_secs_f64().max(1e-9),
            );
        }
        if self.errors > 0 {
            line += &format!(
                ", {} errors, first: {}",
                self.errors,
                self.first_error.as_deref().unwrap_or("?")
            );
        }
        line + ")"
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

struct Outcome {
    latencies: Vec<Duration>,
    errors: u64,
    first_error: Option<String>,
    finished: Instant,
}

/// Runs one level: every writer warms up, then writes until the window closes or the level's
/// write budget is spent. Must be called inside a tokio runtime.
pub async fn run<W: Writer>(writers: Vec<W>, window: Window, tag: &str) -> Level {
    let clients = writers.len();
    let warm_until = Instant::now() + window.warmup;
    let measure_until = warm_until + window.measure;
    let budget = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(clients);
    for (i, mut writer) in writers.into_iter().enumerate() {
        let budget = budget.clone();
        let tag = tag.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            // Warm-up writes count against nothing and are not recorded; a failing system
            // still ends the warm-up on time.
            while Instant::now() < warm_until {
                let _ = writer.write(format!("w{tag}-{i}-{seq}")).await;
                seq += 1;
            }
            let mut outcome = Outcome {
                latencies: Vec::new(),
                errors: 0,
                first_error: None,
                finished: Instant::now(),
            };
            while Instant::now() < measure_until
                && budget.fetch_add(1, Ordering::Relaxed) < window.max_writes
            {
                let started = Instant::now();
                match writer.write(format!("m{tag}-{i}-{seq}")).await {
                    Ok(()) => outcome.latencies.push(started.elapsed()),
                    Err(e) => {
                        outcome.errors += 1;
                        outcome.first_error.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
                seq += 1;
            }
            outcome.finished = Instant::now();
            outcome
        }));
    }
    let mut level = Level {
        clients,
        writes: 0,
        errors: 0,
        first_error: None,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
        busy: None,
    };
    // The machine's CPU from the end of the warm-up to the last client's finish.
    tokio::time::sleep_until(warm_until.into()).await;
    let busy_at_start = machine_busy();
    let mut last = warm_until;
    for task in tasks {
        match task.await {
            Ok(outcome) => {
                level.latencies.extend(outcome.latencies);
                level.errors += outcome.errors;
                level.first_error = level.first_error.or(outcome.first_error);
                last = last.max(outcome.finished);
            }
            Err(e) => {
                level.errors += 1;
                level.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    level.writes = level.latencies.len() as u64;
    level.elapsed = last.saturating_duration_since(warm_until);
    level.latencies.sort_unstable();
    level.busy = busy_at_start
        .zip(machine_busy())
        .map(|(start, end)| end.saturating_sub(start));
    level
}

/// CPU time the machine has spent busy since boot, summed over its cores: the first line of
/// /proc/stat (user, nice, system, irq, softirq and steal; not idle nor iowait), in the kernel's
/// USER_HZ ticks, which are 1/100 s on every Linux this runs on. `None` elsewhere.
fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| ticks.get(i))
        .sum();
    Some(Duration::from_millis(busy * 10))
}

/// A small JSON document of exactly `bytes` bytes (at least 40), the same for every system.
pub fn value(bytes: usize) -> String {
    let head = r#"{"displayName":"bench","description":""#;
    let tail = r#""}"#;
    let pad = bytes.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}
