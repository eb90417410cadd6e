//! SIGKILL in the middle of appends: three `gatehouse serve` processes under a steady stream of
//! registry writes from concurrent clients. A follower is killed and restarted, then the leader,
//! twice over, at moments the writes do not choose. At the end every write the cluster
//! acknowledged is on every node: an acknowledgement means the entry was on disk on a majority,
//! however its appends were cut.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use common::{Node, cli, ok, serve, status_until, three_voters, until};
use serde_json::Value;

const WRITERS: usize = 4;
const ROUNDS: usize = 2;
/// Every writer stops after this many writes or when the faults are over, whichever is first.
const MAX_WRITES_EACH: usize = 3_000;

/// The nodes, by id; a killed node is out of `nodes` until it is started again. Its gRPC
/// address stays: a node restarted on port 0 binds the address it recorded.
struct Cluster<'a> {
    dir: &'a Path,
    token: String,
    grpc: BTreeMap<u64, String>,
    nodes: BTreeMap<u64, Node>,
}

impl Cluster<'_> {
    fn kill(&mut self, id: u64) {
        let mut node = self.nodes.remove(&id).expect("a running node");
        node.child.kill().expect("SIGKILL");
        node.child.wait().expect("the killed node is reaped");
    }

    fn restart(&mut self, id: u64) {
        let node = serve(id, self.dir, &[], None);
        assert_eq!(
            node.grpc, self.grpc[&id],
            "node {id} came back where it was"
        );
        self.nodes.insert(id, node);
    }

    /// The leader as a running node sees it, once there is one.
    fn leader(&self) -> u64 {
        until(
            "a leader among the running nodes",
            Duration::from_secs(30),
            || {
                self.nodes.keys().find_map(|id| {
                    let out = cli(
                        &self.grpc[id],
                        &self.token,
                        &["-o", "json", "cluster", "status"],
                    );
                    let status: Value = serde_json::from_slice(&out.stdout).ok()?;
                    let leader = status["leader"].as_u64()?;
                    self.nodes.contains_key(&leader).then_some(leader)
                })
            },
        )
    }

    /// The tenants node `id` holds, read from its own copy.
    fn tenants_on(&self, id: u64) -> BTreeSet<String> {
        ok(cli(&self.grpc[&id], &self.token, &["list", "tenants"]))
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.strip_prefix("Tenant/"))
            .map(str::to_owned)
            .collect()
    }
}

#[derive(Default)]
struct History {
    acknowledged: BTreeSet<String>,
    unknown: usize,
}

/// Writes tenants `w{me}-{n}` through the nodes in turn until `stop`; records what was acknowledged.
fn writer(
    me: usize,
    dir: &Path,
    addrs: Vec<String>,
    token: String,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<History>>,
) {
    let file = dir.join(format!("writer-{me}.yaml"));
    for n in 0..MAX_WRITES_EACH {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let name = format!("w{me}-{n}");
        std::fs::write(&file, gatehouse_testkit::yaml::tenant(&name)).expect("the writer's file");
        let addr = &addrs[(me + n) % addrs.len()];
        let out = cli(addr, &token, &["apply", "-f", file.to_str().unwrap()]);
        let said = String::from_utf8_lossy(&out.stdout);
        let mut history = history.lock().expect("history lock");
        if out.status.success() && said.contains(&format!("Tenant/{name} created")) {
            history.acknowledged.insert(name);
        } else {
            history.unknown += 1;
        }
    }
}

#[test]
fn no_acknowledged_write_is_lost_when_a_follower_and_the_leader_are_killed_mid_append() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, token) = three_voters(dir.path(), &[]);
    let mut cluster = Cluster {
        dir: dir.path(),
        token,
        grpc: nodes.iter().map(|n| (n.id, n.grpc.clone())).collect(),
        nodes: nodes.into_iter().map(|n| (n.id, n)).collect(),
    };
    status_until(&cluster.grpc[&1], &cluster.token, "three voters", |s| {
        s["voters"].as_array().is_some_and(|v| v.len() == 3)
    });

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(History::default()));
    let addrs: Vec<String> = cluster.grpc.values().cloned().collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|me| {
            let (dir, addrs, token) = (dir.path().to_owned(), addrs.clone(), cluster.token.clone());
            let (stop, history) = (stop.clone(), history.clone());
            std::thread::spawn(move || writer(me, &dir, addrs, token, stop, history))
        })
        .collect();

    let mut killed = Vec::new();
    for _ in 0..ROUNDS {
        for kill_leader in [false, true] {
            std::thread::sleep(Duration::from_millis(800));
            let leader = cluster.leader();
            let victim = if kill_leader {
                leader
            } else {
                *cluster
                    .nodes
                    .keys()
                    .find(|id| **id != leader)
                    .expect("a follower")
            };
            cluster.kill(victim);
            killed.push(victim);
            std::thread::sleep(Duration::from_millis(300));
            cluster.restart(victim);
        }
    }
    std::thread::sleep(Duration::from_millis(800));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("a writer");
    }

    let leader = cluster.leader();
    status_until(
        &cluster.grpc[&leader],
        &cluster.token,
        "every node caught up",
        |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.len() == 3 && n.iter().all(|n| n["lag"] == 0))
        },
    );
    let history = history.lock().unwrap();
    println!(
        "killed {killed:?}; {} writes acknowledged, {} failed or unknown",
        history.acknowledged.len(),
        history.unknown
    );
    assert!(
        history.acknowledged.len() >= 20,
        "the writers got writes through between the kills"
    );
    for id in 1..=3 {
        let held = cluster.tenants_on(id);
        let lost: Vec<&String> = history.acknowledged.difference(&held).collect();
        assert!(
            lost.is_empty(),
            "node {id} lacks acknowledged writes {lost:?}"
        );
    }
}
