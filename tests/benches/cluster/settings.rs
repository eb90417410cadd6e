//! The benchmark's settings, from the arguments after `cargo bench ... --`.

use anyhow::{Context, bail};
use std::time::Duration;

pub const HELP: &str = "\
cluster benchmark: gatehouse registry writes on a durable 3-node cluster, learner catch-up,
and the same write load against a 3-member etcd cluster when `etcd` is on PATH.

  --seconds N         measured seconds per concurrency level (default 5)
  --warmup N          warm-up seconds before each level (default 1)
  --levels A,B,...    concurrent clients per level (default 1,16,64)
  --max-writes N      cap on writes per level, across clients (default 1000000)
  --value-bytes N     size of each written value / tenant spec (default 100)
  --catchup N         resources loaded before the learner joins; 0 skips (default 50000)
  --batch N           resources per load write (default 1000)
  --catchup-snapshot  snapshot every 10 entries and keep no log, forcing catch-up by snapshot
  --skip-etcd         do not run the etcd comparison
  --etcd-via LIST     etcd write routes: grpc, gateway or both (default grpc,gateway)
  --rounds N          gatehouse's levels then etcd's, N times over, each round on fresh
                      clusters; with N > 1 the summary adds each level's median ratio
                      (default 1; 1 to 20)";

/// etcd routes: its native gRPC API, or its gRPC-JSON gateway over HTTP/1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Grpc,
    Gateway,
}

impl Route {
    pub fn name(self) -> &'static str {
        match self {
            Route::Grpc => "etcd gRPC",
            Route::Gateway => "etcd gateway",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub seconds: Duration,
    pub warmup: Duration,
    pub levels: Vec<usize>,
    pub max_writes: u64,
    pub value_bytes: usize,
    pub catchup: usize,
    pub batch: usize,
    pub catchup_snapshot: bool,
    pub skip_etcd: bool,
    pub etcd_via: Vec<Route>,
    pub rounds: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            seconds: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            levels: vec![1, 16, 64],
            max_writes: 1_000_000,
            value_bytes: 100,
            catchup: 50_000,
            batch: 1_000,
            catchup_snapshot: false,
            skip_etcd: false,
            etcd_via: vec![Route::Grpc, Route::Gateway],
            rounds: 1,
        }
    }
}

fn seconds(text: &str) -> anyhow::Result<Duration> {
    let s: f64 = text.parse()?;
    if !(0.0..=3_600.0).contains(&s) {
        bail!("{s} is not between 0 and 3600 seconds");
    }
    Ok(Duration::from_secs_f64(s))
}

impl Settings {
    /// Parses the arguments; `None` when help was asked for. `--bench`, which cargo passes to
    /// every benchmark binary, is ignored.
    pub fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Option<Settings>> {
        let mut s = Settings::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--bench" => {}
                "-h" | "--help" => return Ok(None),
                "--seconds" => s.seconds = seconds(&value()?)?,
                "--warmup" => s.warmup = seconds(&value()?)?,
                "--levels" => {
                    s.levels = value()?
                        .split(',')
                        .map(|n| n.trim().parse::<usize>())
                        .collect::<Result<_, _>>()
                        .context("--levels takes numbers like 1,16,64")?;
                    if s.levels.iter().any(|&n| n == 0 || n > 1_024) {
                        bail!("--levels: each level is 1 to 1024 clients");
                    }
                }
                "--max-writes" => s.max_writes = value()?.parse()?,
                "--value-bytes" => s.value_bytes = value()?.parse()?,
                "--catchup" => s.catchup = value()?.parse()?,
                "--batch" => s.batch = value()?.parse::<usize>()?.max(1),
                "--rounds" => {
                    s.rounds = value()?.parse().context("--rounds takes a number")?;
                    if !(1..=20).contains(&s.rounds) {
                        bail!("--rounds: 1 to 20");
                    }
                }
                "--catchup-snapshot" => s.catchup_snapshot = true,
                "--skip-etcd" => s.skip_etcd = true,
                "--etcd-via" => {
                    s.etcd_via = value()?
                        .split(',')
                        .map(|r| match r.trim() {
                            "grpc" => Ok(Route::Grpc),
                            "gateway" => Ok(Route::Gateway),
                            other => bail!("--etcd-via: unknown route {other:?}"),
                        })
                        .collect::<anyhow::Result<_>>()?;
                }
                other => bail!("unknown argument {other:?}\n\n{HELP}"),
            }
        }
        Ok(Some(s))
    }
}
