//! One campaign from start to report: form the cluster, declare the tenant, start the upstream
//! and the clients, let the nemesis run, heal everything, let the cluster settle, read every
//! node's view and audit log, restart a new cluster from a backup of that state, and hand the
//! history to the checkers.

use crate::check::{self, Anomaly};
use crate::client::Recorder;
use crate::cluster::Cluster;
use crate::history::{Execution, FaultKind, History, Micros, NodeView};
use crate::{nemesis, observe, restore, setup, workload};
use gatehouse_proto::v1 as pb;
use gatehouse_tests::upstream::RecordingUpstream;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Settings {
    pub seed: u64,
    /// How long the nemesis runs.
    pub duration: Duration,
    /// The quiet time after a fault healed (drawn from half of it to all of it).
    pub every: Duration,
    /// How long each fault is held.
    pub hold: nemesis::Hold,
    /// Stop after this many rounds of faults, or at `duration` if sooner.
    pub rounds: Option<usize>,
    pub kinds: Vec<FaultKind>,
    /// The `gatehouse` binary.
    pub bin: PathBuf,
    /// Where the nodes keep their data and logs.
    pub dir: PathBuf,
}

/// What a campaign found.
#[derive(Debug)]
pub struct Outcome {
    pub history: History,
    pub anomalies: Vec<Anomaly>,
    pub unavailability: BTreeMap<FaultKind, Micros>,
    /// How long writes took to come back after each kind of fault.
    pub recovery: BTreeMap<FaultKind, check::availability::Recovery>,
    /// gRPC codes the clients met, counted.
    pub errors: BTreeMap<String, usize>,
    /// The first message of each code.
    pub samples: BTreeMap<String, String>,
}

const REGISTER_CLIENTS: usize = 6;
const AGENTS: usize = 2;

pub async fn run(settings: &Settings) -> anyhow::Result<Outcome> {
    println!(
        "seed {} (replay with --seed {})",
        settings.seed, settings.seed
    );
    let upstream = RecordingUpstream::start();
    let mut cluster = Cluster::form(settings.bin.clone(), settings.dir.clone()).await?;
    let recorder = Recorder::new();
    declare(&cluster, &upstream.url()).await?;

    let shared = workload::Shared::new(
        cluster.channels.clone(),
        recorder.clone(),
        cluster.admin.clone(),
    );
    let mut clients = Vec::new();
    let mut n = 0;
    let seed_of = |n: &mut usize| {
        *n += 1;
        settings
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(*n as u64)
    };
    for _ in 0..REGISTER_CLIENTS {
        let seed = seed_of(&mut n);
        clients.push(tokio::spawn(workload::registers(n, seed, shared.clone())));
    }
    for _ in 0..AGENTS {
        let seed = seed_of(&mut n);
        clients.push(tokio::spawn(workload::agent(n, seed, shared.clone())));
    }
    let seed = seed_of(&mut n);
    clients.push(tokio::spawn(workload::approvers(n, seed, shared.clone())));

    let until = Instant::now() + settings.duration;
    let plan = nemesis::Plan {
        seed: settings.seed,
        kinds: settings.kinds.clone(),
        every: settings.every,
        hold: settings.hold,
        rounds: settings.rounds,
    };
    let faults = nemesis::run(&mut cluster, &plan, until, &recorder).await;
    // The workload runs on for as long as the availability goal allows, so the last fault's
    // recovery is seen like every other's.
    tokio::time::sleep(Duration::from_millis(crate::procs::ELECTION_MAX_MS + 1_000)).await;

    let healed_at = recorder.now();
    shared.stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.await;
    }
    cluster.heal_all()?;
    println!("healed; waiting for the cluster to settle");
    let mut nodes = observe::views(&cluster, &recorder).await?;
    // Saved from the settled cluster before its nodes stop.
    let phase = restore::Settings {
        seed: settings.seed,
        bin: settings.bin.clone(),
        dir: settings.dir.clone(),
    };
    let restored = restore::run(&phase, &cluster, &nodes, &recorder).await;
    for (id, view) in &mut nodes {
        tokio::task::block_in_place(|| cluster.procs.stop(*id, Duration::from_secs(10)));
        observe::audit(&cluster.procs.data_dir(*id), view);
    }
    let mut retired = BTreeMap::new();
    for id in cluster.retired() {
        let mut view = NodeView::default();
        observe::audit(&cluster.procs.data_dir(id), &mut view);
        retired.insert(id, view);
    }
    let executions = upstream
        .invocations()
        .into_iter()
        .map(|i| Execution {
            call_id: i.call_id,
            idempotency_key: i.idempotency_key,
            at: recorder.at_unix_ms(i.at_unix_ms),
        })
        .collect();
    let history = History {
        seed: settings.seed,
        start_unix_ms: recorder.start_unix_ms,
        ops: recorder.ops(),
        faults,
        healed_at,
        nodes,
        retired,
        executions,
    };
    Ok(Outcome {
        anomalies: [check::all(&history), restored].concat(),
        unavailability: check::availability::unavailability(&history),
        recovery: check::availability::recovery(&history),
        errors: recorder.errors(),
        samples: recorder.samples(),
        history,
    })
}

/// Applies the campaign's resources through the leader and waits until the tenant has a home.
async fn declare(cluster: &Cluster, upstream: &str) -> anyhow::Result<()> {
    let leader = cluster.wait_leader(Duration::from_secs(20)).await?;
    let mut registry = cluster.channels.registry(leader, &cluster.admin);
    registry
        .apply(pb::ApplyRequest {
            resources: setup::resources(upstream),
        })
        .await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while cluster.home().await.is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the tenant got no home within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The gatehouse binary next to this one (both are built into the same target directory), or
/// `GATEHOUSE_BIN`.
pub fn default_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("GATEHOUSE_BIN") {
        return bin.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("gatehouse")))
        .unwrap_or_else(|| "gatehouse".into())
}
