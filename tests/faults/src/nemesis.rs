//! The nemesis: one fault every few seconds, chosen by a seeded generator, held for a while and
//! healed, each recorded with its start and end. The same seed gives the same sequence of kinds,
//! targets (by position among the candidates) and hold times; which node is the leader or a
//! tenant's home when a fault strikes is the cluster's doing.

use crate::client::Recorder;
use crate::cluster::Cluster;
use crate::history::{Fault, FaultKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};

/// Every kind, in the order the report lists them.
pub const ALL: [FaultKind; 10] = [
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
];

pub fn needs_firewall(kind: FaultKind) -> bool {
    matches!(
        kind,
        FaultKind::IsolateOne | FaultKind::IsolateLeader | FaultKind::Split | FaultKind::OneWay
    )
}

/// Runs faults until `until`, one every `every` (with jitter), and heals the last before it
/// returns. A fault that could not be injected (no leader to kill, say) is skipped and said.
pub async fn run(
    cluster: &mut Cluster,
    seed: u64,
    kinds: &[FaultKind],
    every: Duration,
    until: Instant,
    recorder: &Recorder,
) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6e656d65736973);
    let kinds: Vec<FaultKind> = kinds
        .iter()
        .copied()
        .filter(|k| cluster.firewall.is_some() || !needs_firewall(*k))
        .collect();
    let mut faults = Vec::new();
    while Instant::now() + every < until {
        let wait = every.mul_f64(rng.random_range(0.5..1.0));
        tokio::time::sleep(wait).await;
        let kind = kinds[rng.random_range(0..kinds.len())];
        let hold = Duration::from_millis(rng.random_range(500..2500));
        let pick = rng.random::<u64>();
        let start = recorder.now();
        match inject(cluster, kind, hold, pick).await {
            Ok(nodes) => {
                let end = recorder.now();
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
            Err(e) => println!("[{:>7.1}s] {kind:?} skipped: {e:#}", start as f64 / 1e6),
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

/// Injects one fault, holds it for `hold`, and heals it; the nodes it hit.
async fn inject(
    cluster: &mut Cluster,
    kind: FaultKind,
    hold: Duration,
    pick: u64,
) -> anyhow::Result<Vec<u64>> {
    let voters = cluster.voters().await;
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
            tokio::task::block_in_place(|| cluster.procs.kill(victim));
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| cluster.procs.restart(victim))?;
            vec![victim]
        }
        FaultKind::Pause => {
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
            firewall(cluster)?
                .cut(from, to)
                .map_err(anyhow::Error::msg)?;
            tokio::time::sleep(hold).await;
            vec![from, to]
        }
        FaultKind::Resize => {
            let a = cluster.add_voter().await?;
            let b = match cluster.add_voter().await {
                Ok(b) => b,
                Err(e) => {
                    // Back to three voters, whatever happened to the second.
                    cluster.remove(a).await?;
                    return Err(e);
                }
            };
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
