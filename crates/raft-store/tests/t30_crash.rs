//! SIGKILL crash test. The test binary runs itself as a child (`child_writer`) that drives a real
//! single-node Raft over the store and prints `ACK <n>` after each write returns; the parent
//! kills it at a random moment, reopens the store, checks that the log is whole, lets Raft
//! re-apply what was committed, and checks that every acknowledged tenant is there. Runs
//! continue in the same directory, so restarts and snapshots accumulate.
//!
//! `GATEHOUSE_CRASH_RUNS` (read by the parent, default 20) sets the number of kills.

mod support;

use gatehouse_raft_store::{NodeId, Raft, TypeConfig, open};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{BasicNode, Config, RaftLogReader, ServerState, SnapshotPolicy};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use support::{has_tenant, put_tenant};

const CHILD_ENV: &str = "GATEHOUSE_CRASH_CHILD";
const FROM_ENV: &str = "GATEHOUSE_CRASH_FROM";
const RUNS_ENV: &str = "GATEHOUSE_CRASH_RUNS";
const NODE: NodeId = 1;
/// How long a child may take to open the store and lead, and the parent to re-apply.
const PATIENCE: Duration = Duration::from_secs(30);
/// A child left alone (its parent gone) stops by itself.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

/// Quick single-node elections; snapshots and purges often enough that kills land in them too.
fn config() -> Arc<Config> {
    let config = Config {
        cluster_name: "crash".into(),
        heartbeat_interval: 50,
        election_timeout_min: 150,
        election_timeout_max: 300,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(200),
        max_in_snapshot_log_to_keep: 50,
        purge_batch_size: 32,
        ..Default::default()
    };
    Arc::new(config.validate().expect("valid raft config"))
}

/// A single voter never calls its peers; if it did, they are not there.
struct NoPeers;

struct NoPeer;

fn unreachable<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "single node: no peers",
    )))
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeer;

    async fn new_client(&mut self, _target: NodeId, _node: &BasicNode) -> NoPeer {
        NoPeer
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable())
    }
}

/// Prints one line for the parent; a parent that is gone ends the child at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// The parent holds the child's stdin open; when it closes (the parent ended, however), the
/// child ends too instead of writing on alone.
fn exit_with_parent() {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
}

/// The child: lead a single-node Raft on the store and write tenants until killed.
#[test]
fn child_writer() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let from: u64 = std::env::var(FROM_ENV)
        .expect("parent sets the first tenant number")
        .parse()
        .expect("a number");
    exit_with_parent();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let (log, state_machine) = open(Path::new(&dir)).expect("store opens");
        // As a node runs it: its own appends acknowledged once written, applied once synced.
        let log = log.leading_as(NODE);
        let raft = Raft::new(NODE, config(), NoPeers, log, state_machine)
            .await
            .expect("raft starts");
        if !raft.is_initialized().await.unwrap() {
            let members = BTreeMap::from([(NODE, BasicNode::new("127.0.0.1:0"))]);
            raft.initialize(members).await.expect("initialize");
        }
        raft.wait(Some(PATIENCE))
            .state(ServerState::Leader, "single node leads")
            .await
            .expect("leads");
        say("READY");
        let deadline = tokio::time::Instant::now() + CHILD_LIFETIME;
        for n in from.. {
            if tokio::time::Instant::now() > deadline {
                break;
            }
            let written = raft
                .client_write(put_tenant(&format!("t{n}"), u128::from(n)))
                .await
                .expect("write commits");
            written.data.expect("put applies");
            say(&format!("ACK {n}"));
        }
    });
}

/// splitmix64: a small deterministic generator, one seed per run.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// A child that is killed however the parent leaves (a failed assertion included).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Killed {
    acked: Vec<u64>,
    ready: bool,
}

/// Runs one child and SIGKILLs it `delay` after it is ready (or after it started, when
/// `from_spawn`: then the kill may land while it opens the store or elects itself).
fn run_child(dir: &Path, from: u64, delay: Duration, from_spawn: bool) -> Killed {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env(FROM_ENV, from.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child starts");
    let mut child = KillOnDrop(child);
    let spawned = Instant::now();
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut acked = Vec::new();
    let mut ready = false;
    let mut kill_at = from_spawn.then(|| spawned + delay);
    let take = |line: String, acked: &mut Vec<u64>, ready: &mut bool| {
        // The harness may print `test child_writer ... ` just before the first line.
        if line.ends_with("READY") {
            *ready = true;
        } else if let Some(n) = line.strip_prefix("ACK ") {
            acked.push(n.parse().expect("ACK <n>"));
        }
    };
    loop {
        let until = kill_at.unwrap_or(spawned + PATIENCE);
        let Some(wait) = until.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(wait) {
            Ok(line) => {
                take(line, &mut acked, &mut ready);
                if ready && kill_at.is_none() {
                    kill_at = Some(Instant::now() + delay);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.0.wait().unwrap();
                panic!("child ended by itself ({status}) before it was killed");
            }
        }
    }
    assert!(kill_at.is_some(), "child not ready within {PATIENCE:?}");
    // `Child::kill` is SIGKILL on unix: no destructor, no flush, no goodbye.
    child.0.kill().expect("SIGKILL");
    child.0.wait().unwrap();
    // Lines written before the kill are acknowledgements too.
    for line in rx.iter() {
        take(line, &mut acked, &mut ready);
    }
    reader.join().unwrap();
    Killed { acked, ready }
}

struct Recovered {
    last_index: Option<u64>,
    purged: Option<u64>,
    snapshot: Option<u64>,
    tenants: usize,
}

/// Reopens the store after a kill: the log must be whole, and once Raft has re-applied what
/// the log holds, every acknowledged tenant must be in the registry.
fn recover(dir: &Path, acked: &BTreeSet<u64>) -> Recovered {
    // A runtime of its own, dropped at the end, so nothing keeps the store open for the next child.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (mut log, mut state_machine) = open(dir).expect("store opens cleanly after SIGKILL");
        let state = log.get_log_state().await.expect("log state");
        let first = state.last_purged_log_id.map_or(0, |id| id.index + 1);
        let entries = log.try_get_log_entries(first..).await.expect("log reads");
        for (i, entry) in entries.iter().enumerate() {
            assert_eq!(entry.log_id.index, first + i as u64, "log has a hole");
        }
        assert_eq!(
            entries
                .last()
                .map(|e| e.log_id)
                .or(state.last_purged_log_id),
            state.last_log_id
        );
        let last_index = state.last_log_id.map(|id| id.index);
        let purged = state.last_purged_log_id.map(|id| id.index);
        let snapshot = state_machine
            .get_current_snapshot()
            .await
            .expect("snapshot reads")
            .and_then(|s| s.meta.last_log_id)
            .map(|id| id.index);
        assert!(
            purged <= snapshot,
            "purged {purged:?} past the snapshot {snapshot:?}"
        );
        let Some(last) = last_index else {
            assert!(acked.is_empty(), "acknowledged writes but the log is empty");
            return Recovered {
                last_index,
                purged,
                snapshot,
                tenants: 0,
            };
        };

        let registry = state_machine.registry();
        let mut applied = state_machine.applied_watch();
        let raft = Raft::new(NODE, config(), NoPeers, log.leading_as(NODE), state_machine)
            .await
            .expect("raft restarts");
        tokio::time::timeout(PATIENCE, applied.wait_for(|index| *index >= last))
            .await
            .unwrap_or_else(|_| panic!("applied did not reach {last} within {PATIENCE:?}"))
            .expect("state machine still running");
        let tenants = {
            let registry = registry.read();
            let missing: Vec<_> = acked
                .iter()
                .filter(|n| !has_tenant(&registry, &format!("t{n}")))
                .collect();
            assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
            registry
                .list(gatehouse_registry::Kind::Tenant, None, None)
                .count()
        };
        raft.shutdown().await.expect("raft stops");
        Recovered {
            last_index,
            purged,
            snapshot,
            tenants,
        }
    })
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let runs: u64 = std::env::var(RUNS_ENV).map_or(20, |runs| runs.parse().expect("a number"));
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut acked = BTreeSet::new();
    for run in 1..=runs {
        let mut prng = Prng(0x6761_7465_686f_7573 ^ run);
        let delay = Duration::from_millis(prng.between(5, 300));
        let from_spawn = prng.between(0, 3) == 0;
        let killed = run_child(dir.path(), run * 1_000_000, delay, from_spawn);
        let new = killed.acked.len();
        acked.extend(killed.acked);
        let recovered = recover(dir.path(), &acked);
        println!(
            "run {run}/{runs}: killed {delay:?} after {}{}, acked {new} (total {}), recovered {} tenants; purged up to {:?}, last log {:?}, snapshot at {:?}; {:.1?} elapsed",
            if from_spawn { "spawn" } else { "ready" },
            if killed.ready { "" } else { " (before ready)" },
            acked.len(),
            recovered.tenants,
            recovered.purged,
            recovered.last_index,
            recovered.snapshot,
            started.elapsed(),
        );
        assert!(recovered.tenants >= acked.len());
    }
}
