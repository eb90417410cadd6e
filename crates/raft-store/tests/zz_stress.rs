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
#[test]
fn zz_stress_drop() {
    let dir = tempfile::tempdir().unwrap();
    let iterations: u64 = std::env::var("ZZ_ITER").map_or(30, |v| v.parse().unwrap());
    let mut prng = 0x1234_5678u64;
    let mut next = 0u64;
    for i in 0..iterations {
        prng ^= prng << 13;
        prng ^= prng >> 7;
        prng ^= prng << 17;
        let ms = 200 + prng % 2800;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d2 = done.clone();
        let pid = std::process::id();
        let watchdog = std::thread::spawn(move || {
            let t = Instant::now();
            while !d2.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::park_timeout(Duration::from_millis(100));
                if t.elapsed() > Duration::from_secs(ms / 1000 + 25) {
                    eprintln!("HUNG iteration {i}; attaching gdb to {pid}");
                    let out = Command::new("gdb")
                        .args([
                            "-p",
                            &pid.to_string(),
                            "-batch",
                            "-ex",
                            "thread apply all bt",
                        ])
                        .output()
                        .unwrap();
                    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
                    std::process::exit(7);
                }
            }
        });
        let started = Instant::now();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let from = next;
        let wrote = runtime.block_on(async {
            let (log, sm) = open(dir.path()).unwrap();
            let raft = Raft::new(NODE, config(), NoPeers, log, sm).await.unwrap();
            if !raft.is_initialized().await.unwrap() {
                raft.initialize(BTreeMap::from([(NODE, BasicNode::new("x"))]))
                    .await
                    .unwrap();
            }
            raft.wait(Some(PATIENCE))
                .state(ServerState::Leader, "l")
                .await
                .unwrap();
            let until = tokio::time::Instant::now() + Duration::from_millis(ms);
            let mut n = from;
            while tokio::time::Instant::now() < until {
                raft.client_write(put_tenant(&format!("t{n}"), u128::from(n)))
                    .await
                    .unwrap();
                n += 1;
            }
            n
            // raft dropped here without shutdown, like a panic would
        });
        next = wrote;
        let t_drop = Instant::now();
        drop(runtime);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        watchdog.thread().unpark();
        watchdog.join().unwrap();
        eprintln!(
            "iteration {i}: wrote {} in {ms} ms, runtime drop took {:?}, total {:?}",
            wrote - from,
            t_drop.elapsed(),
            started.elapsed()
        );
    }
}
