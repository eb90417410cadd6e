//! The nemesis: one fault every few seconds, chosen by a seeded generator, held for a while and
//! healed, each recorded with its start and end. Kinds come in rounds, each a seeded shuffle of
//! every kind, so a short run meets every kind as often as any other. The same seed gives the
//! same sequence of kinds, targets (by position among the candidates) and hold times; which node
//! is the leader or a tenant's home when a fault strikes is the cluster's doing.

use crate::client::Recorder;
use crate::cluster::Cluster;
use crate::history::{Fault, FaultKind, Micros};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Every kind, in the order the report lists them.
pub const ALL: [FaultKind; 12] = [
    FaultKind::KillRandom,
    FaultKind::KillLeader,
    FaultKind::KillHome,
    FaultKind::Pause,
    FaultKind::IsolateOne,
    FaultKind::IsolateLeader,
    FaultKind::Split,
    FaultKind::OneWay,
    FaultKind::Resize,
    FaultKind::RollingRestart,
    FaultKind::Replace,
    FaultKind::Latency,
];

pub fn needs_firewall(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::IsolateOne | FaultKind::IsolateLeader | FaultKind::Split | FaultKind::OneWay
    )
}

/// How long a fault is held before it is healed: drawn evenly from `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    pub min: Duration,
    pub max: Duration,
}

impl Default for Hold {
    fn default() -> Self {
        Hold {
            min: Duration::from_millis(500),
            max: Duration::from_millis(2500),
        }
    }
}

impl std::str::FromStr for Hold {
    type Err = String;

    /// `MIN..MAX` in milliseconds, as `--hold-ms` takes it.
    fn from_str(s: &str) -> Result<Hold, String> {
        let (min, max) = s
            .split_once("..")
            .ok_or_else(|| format!("{s:?} is not MIN..MAX (milliseconds)"))?;
        let ms = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| format!("{v:?}: {e}"))
        };
        let (min, max) = (ms(min)?, ms(max)?);
        if min > max {
            return Err(format!("{s:?}: the minimum is above the maximum"));
        }
        Ok(Hold { min, max })
    }
}

/// What the nemesis does: which kinds, how often, for how long, and for how many rounds.
#[derive(Debug, Clone)]
pub struct Plan {
    pub seed: u64,
    pub kinds: Vec<FaultKind>,
    /// The quiet time after a fault healed, drawn from half of it to all of it.
    pub every: Duration,
    pub hold: Hold,
    /// Stop after this many rounds (each kind once per round); `None`: run until the time is up.
    pub rounds: Option<usize>,
}

/// One fault to come, drawn from the seed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The round it belongs to, counting from 1: each round holds every kind once.
    pub round: usize,
    pub kind: FaultKind,
    /// The quiet time before it.
    pub wait: Duration,
    pub hold: Duration,
    /// Chooses its target by position among the candidates.
    pub pick: u64,
}

/// The nemesis's plan: an endless sequence of steps in rounds, each round a seeded shuffle of
/// every kind (each named once, however often it was given). The steps are a function of the
/// arguments alone: no clock, no cluster.
#[derive(Debug)]
pub struct Schedule {
    rng: StdRng,
    kinds: Vec<FaultKind>,
    every: Duration,
    hold: Hold,
    round: usize,
    /// What is left of the current round, taken from the end.
    left: Vec<FaultKind>,
}

impl Schedule {
    pub fn new(seed: u64, kinds: &[FaultKind], every: Duration, hold: Hold) -> Schedule {
        let mut unique = Vec::new();
        for kind in kinds {
            if !unique.contains(kind) {
                unique.push(*kind);
            }
        }
        Schedule {
            rng: StdRng::seed_from_u64(seed ^ 0x6e656d65736973),
            kinds: unique,
            every,
            hold,
            round: 0,
            left: Vec::new(),
        }
    }
}

impl Iterator for Schedule {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        if self.left.is_empty() {
            self.left = self.kinds.clone();
            self.left.shuffle(&mut self.rng);
            self.round += 1;
        }
        let kind = self.left.pop()?;
        let wait = self.every.mul_f64(self.rng.random_range(0.5..1.0));
        let hold = self.rng.random_range(self.hold.min..=self.hold.max);
        let pick = self.rng.random::<u64>();
        Some(Step {
            round: self.round,
            kind,
            wait,
            hold,
            pick,
        })
    }
}

/// Runs the plan's faults until its rounds are done or `until`, whichever comes first, each
/// after its quiet time and held for its hold, and heals the last before it returns. A fault
/// that could not be injected (no leader to kill, say) is skipped and said.
pub async fn run(
    cluster: &mut Cluster,
    plan: &Plan,
    until: Instant,
    recorder: &Recorder,
) -> Vec<Fault> {
    let kinds: Vec<FaultKind> = plan
        .kinds
        .iter()
        .copied()
        .filter(|k| cluster.firewall.is_some() || !needs_firewall(*k))
        .collect();
    let mut faults = Vec::new();
    let mut round = 0;
    for step in Schedule::new(plan.seed, &kinds, plan.every, plan.hold) {
        let Step {
            kind,
            wait,
            hold,
            pick,
            ..
        } = step;
        if Instant::now() + wait + hold >= until
            || plan.rounds.is_some_and(|rounds| step.round > rounds)
        {
            break;
        }
        if step.round != round {
            round = step.round;
            let left = until.saturating_duration_since(Instant::now());
            println!(
                "round {round}: {} faults so far, {} s left",
                faults.len(),
                left.as_secs()
            );
        }
        tokio::time::sleep(wait).await;
        let began = recorder.now();
        let struck = Struck::new(recorder);
        match inject(cluster, kind, hold, pick, &struck).await {
            Ok(nodes) => {
                let end = recorder.now();
                let start = struck.at().unwrap_or(began);
                println!(
                    "[{:>7.1}s] {kind:?} on {nodes:?}, {:.1}s",
                    start as f64 / 1e6,
                    (end - start) as f64 / 1e6
                );
                faults.push(Fault {
                    kind,
                    nodes,
                    start,
                    end,
                });
            }
            Err(e) => println!("[{:>7.1}s] {kind:?} skipped: {e:#}", began as f64 / 1e6),
        }
        if let Err(e) = cluster.heal_all() {
            println!("healing after {kind:?}: {e:#}");
        }
        // The next fault strikes a cluster that has a leader again, not one still electing.
        if let Err(e) = cluster.wait_leader(Duration::from_secs(20)).await {
            println!("after {kind:?}: {e:#}");
        }
    }
    faults
}

/// When a fault struck: the moment of the kill, the stop or the first firewall rule, not the
/// moment the nemesis began looking for its victim (finding the leader takes a round trip, and
/// writes that finish in it must not count as the cluster's recovery).
struct Struck<'a> {
    recorder: &'a Recorder,
    at: std::sync::OnceLock<Micros>,
}

impl<'a> Struck<'a> {
    fn new(recorder: &'a Recorder) -> Struck<'a> {
        Struck {
            recorder,
            at: std::sync::OnceLock::new(),
        }
    }

    /// Marks now as the moment the fault struck (the first mark counts).
    fn now(&self) {
        self.at.get_or_init(|| self.recorder.now());
    }

    fn at(&self) -> Option<Micros> {
        self.at.get().copied()
    }
}

/// Injects one fault, holds it for `hold`, and heals it; the nodes it hit. `struck` is marked
/// just before the fault takes effect.
async fn inject(
    cluster: &mut Cluster,
    kind: FaultKind,
    hold: Duration,
    pick: u64,
    struck: &Struck<'_>,
) -> anyhow::Result<Vec<u64>> {
    // The leader the nemesis waited for may be a moment old: an election may be under way.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut voters = cluster.voters().await;
    while voters.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        voters = cluster.voters().await;
    }
    anyhow::ensure!(!voters.is_empty(), "no leader to ask for the voters");
    let any = voters[(pick % voters.len() as u64) as usize];
    let others =
        |of: &[u64]| -> Vec<u64> { voters.iter().copied().filter(|v| !of.contains(v)).collect() };
    let nodes = match kind {
        FaultKind::KillRandom | FaultKind::KillLeader | FaultKind::KillHome => {
            let victim = match kind {
                FaultKind::KillLeader => cluster.leader().await.ok_or_else(no_leader)?,
                FaultKind::KillHome => cluster
                    .home()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the tenant has no home"))?,
                _ => any,
            };
            struck.now();
            tokio::task::block_in_place(|| cluster.procs.kill(victim));
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| cluster.procs.restart(victim))?;
            vec![victim]
        }
        FaultKind::Pause => {
            struck.now();
            cluster.procs.pause(any);
            tokio::time::sleep(hold).await;
            cluster.procs.resume(any);
            vec![any]
        }
        FaultKind::IsolateOne | FaultKind::IsolateLeader | FaultKind::Split => {
            let minority = match kind {
                FaultKind::IsolateLeader => vec![cluster.leader().await.ok_or_else(no_leader)?],
                FaultKind::Split => {
                    let size = (voters.len() - 1) / 2;
                    (0..size)
                        .map(|i| voters[((pick as usize) + i) % voters.len()])
                        .collect()
                }
                _ => vec![any],
            };
            let rest = others(&minority);
            struck.now();
            firewall(cluster)?
                .partition(&minority, &rest)
                .map_err(anyhow::Error::msg)?;
            tokio::time::sleep(hold).await;
            minority
        }
        FaultKind::OneWay => {
            let from = any;
            let rest = others(&[from]);
            let to = rest[((pick >> 8) % rest.len() as u64) as usize];
            struck.now();
            firewall(cluster)?
                .cut(from, to)
                .map_err(anyhow::Error::msg)?;
            tokio::time::sleep(hold).await;
            vec![from, to]
        }
        FaultKind::Resize => {
            // Both join before either is promoted, so they catch up at the same time.
            let a = cluster.add_learner().await?;
            let b = match cluster.add_learner().await {
                Ok(b) => b,
                Err(e) => {
                    cluster.remove(a).await?;
                    return Err(e);
                }
            };
            for id in [a, b] {
                if let Err(e) = cluster.promote(id).await {
                    // Back to three voters (a learner that did not catch up is gone already).
                    for id in [a, b] {
                        if cluster.procs.nodes.contains_key(&id) {
                            cluster.remove(id).await?;
                        }
                    }
                    return Err(e);
                }
            }
            cluster.remove(a).await?;
            cluster.remove(b).await?;
            vec![a, b]
        }
        FaultKind::RollingRestart => {
            for &id in &voters {
                tokio::task::block_in_place(|| {
                    cluster.procs.stop(id, Duration::from_secs(10));
                    cluster.procs.restart(id)
                })?;
                cluster.wait_leader(Duration::from_secs(20)).await?;
            }
            voters.clone()
        }
        FaultKind::Replace => {
            // The machine is lost: the cluster runs a voter short for `hold`, until the
            // operator brings in a successor and removes the lost node.
            struck.now();
            tokio::task::block_in_place(|| cluster.procs.kill(any));
            tokio::time::sleep(hold).await;
            let successor = cluster.replace(any).await?;
            vec![any, successor]
        }
        FaultKind::Latency => {
            // Beyond the heartbeat and up to the election timeout: followers may start
            // elections, and a delayed leader may lose its lease.
            let delay = Duration::from_millis(50 + (pick >> 32) % 351);
            let slowed = if (pick >> 16) & 1 == 0 {
                vec![any]
            } else {
                cluster.procs.nodes.keys().copied().collect()
            };
            struck.now();
            for &id in &slowed {
                cluster.procs.set_delay(id, delay);
            }
            tokio::time::sleep(hold).await;
            cluster.procs.clear_delays();
            slowed
        }
    };
    Ok(nodes)
}

fn firewall(cluster: &mut Cluster) -> anyhow::Result<&mut crate::firewall::Firewall> {
    cluster
        .firewall
        .as_mut()
        .ok_or_else(|| anyhow::anyhow!("partitions are off"))
}

fn no_leader() -> anyhow::Error {
    anyhow::anyhow!("no leader")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(seed: u64, kinds: &[FaultKind]) -> Schedule {
        Schedule::new(seed, kinds, Duration::from_secs(3), Hold::default())
    }

    #[test]
    fn every_round_holds_each_kind_once() {
        let k = 20;
        let steps: Vec<Step> = schedule(7, &ALL).take(k * ALL.len()).collect();
        for kind in ALL {
            let count = steps.iter().filter(|s| s.kind == kind).count();
            assert_eq!(count, k, "{kind:?}");
        }
        for (i, round) in steps.chunks(ALL.len()).enumerate() {
            assert!(round.iter().all(|s| s.round == i + 1));
            let mut kinds: Vec<FaultKind> = round.iter().map(|s| s.kind).collect();
            kinds.sort();
            assert_eq!(kinds, ALL.to_vec(), "round {}", i + 1);
        }
    }

    #[test]
    fn the_seed_fixes_the_schedule() {
        let a: Vec<Step> = schedule(7, &ALL).take(100).collect();
        let b: Vec<Step> = schedule(7, &ALL).take(100).collect();
        let c: Vec<Step> = schedule(8, &ALL).take(100).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        // Shuffled, not in the order given.
        let first: Vec<FaultKind> = a.iter().take(ALL.len()).map(|s| s.kind).collect();
        assert_ne!(first, ALL.to_vec());
    }

    #[test]
    fn holds_and_waits_stay_in_their_ranges() {
        let hold: Hold = "100..300".parse().unwrap();
        let every = Duration::from_millis(1000);
        for step in Schedule::new(1, &ALL, every, hold).take(500) {
            assert!(hold.min <= step.hold && step.hold <= hold.max);
            assert!(every / 2 <= step.wait && step.wait < every);
        }
    }

    #[test]
    fn a_kind_given_twice_comes_once_a_round_and_no_kinds_no_steps() {
        let kinds = [FaultKind::Pause, FaultKind::Pause, FaultKind::Replace];
        let steps: Vec<Step> = schedule(3, &kinds).take(4).collect();
        assert_eq!(steps.iter().filter(|s| s.round == 1).count(), 2);
        assert_eq!(schedule(3, &[]).next(), None);
    }

    #[test]
    fn hold_is_read_as_min_dot_dot_max() {
        let hold: Hold = "500..2500".parse().unwrap();
        assert_eq!(hold, Hold::default());
        assert!("2500..500".parse::<Hold>().is_err());
        assert!("500".parse::<Hold>().is_err());
        assert!("a..b".parse::<Hold>().is_err());
    }
}
