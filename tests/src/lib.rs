//! An in-process cluster harness, in the manner of openraft's `RaftRouter`: real `gatehouse`
//! nodes, each on its own tokio runtime (so a kill drops everything it held), real sled data
//! directories, real gRPC over 127.0.0.1, and a network between the nodes that a test can
//! partition, cut one way, or slow down.
//!
//! Tests wait for conditions with deadlines, never for fixed sleeps.

mod client;
pub mod flow;
pub mod mcp_fixture;
pub mod mcp_upstream;
pub mod mcp_wire;
mod one_node;
mod router;
pub mod upstream;

pub use client::{Admin, tenant};
pub use mcp_upstream::{McpCall, McpUpstream};
pub use one_node::one_node;
pub use router::Router;
pub use upstream::{Invocation, RecordingUpstream};

use anyhow::{Context, bail};
use gatehouse_actors::ActorSettings;
use gatehouse_cluster::grants::Grants;
use gatehouse_cluster::net::SharedFilter;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_gateway::auth::JwtIssuerConfig;
use gatehouse_gateway::metrics::MetricsSettings;
use gatehouse_node::config::{JoinKey, RaftTimings, ServeConfig, Start};
use gatehouse_node::server::{self, NodeHandle};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Timings for loopback tests: quick elections, snapshots after `snapshot_every` entries.
pub fn fast_timings(snapshot_every: u64) -> RaftTimings {
    RaftTimings {
        heartbeat: Duration::from_millis(50),
        election_min: Duration::from_millis(300),
        election_max: Duration::from_millis(600),
        install_snapshot_timeout: Duration::from_secs(10),
        snapshot_every,
        logs_kept_after_snapshot: 1_000,
    }
}

/// How long a converged registry must stand still: a few of the leader's placement reviews.
const QUIET: Duration = Duration::from_millis(400);

/// Actor settings for loopback tests: a lost home is replaced soon after an election could have
/// happened, and the leader reviews placement often.
pub fn fast_actors(timings: RaftTimings) -> ActorSettings {
    ActorSettings {
        home_unreachable_after: timings.election_max * 2,
        review_every: Duration::from_millis(100),
        restart_backoff: Duration::from_millis(20),
        ..ActorSettings::default()
    }
}

/// How every node of a test cluster is configured, beyond its id and addresses.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub timings: RaftTimings,
    /// The operator's grants: credentials and built-in tools per tenant. None by default.
    pub grants: Grants,
    pub metrics: MetricsSettings,
    /// The JWT issuers every node accepts, on every front. None by default.
    pub jwt: Vec<JwtIssuerConfig>,
    pub mcp: McpSettings,
    /// The actors' settings; `None` is [`fast_actors`] for these timings.
    pub actors: Option<ActorSettings>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            timings: fast_timings(500),
            grants: Grants::default(),
            metrics: MetricsSettings::default(),
            jwt: Vec::new(),
            mcp: McpSettings::default(),
            actors: None,
        }
    }
}

impl NodeOptions {
    /// How node `id` is started with these options: its data in `data_dir`, port 0 on loopback
    /// on its first start (a restart binds the address recorded then), `filter` between it and
    /// its peers.
    fn serve_config(
        &self,
        id: u64,
        data_dir: PathBuf,
        start: Start,
        filter: SharedFilter,
    ) -> ServeConfig {
        ServeConfig {
            node_id: id,
            data_dir,
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise_grpc: None,
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            start,
            raft: self.timings,
            actors: self
                .actors
                .clone()
                .unwrap_or_else(|| fast_actors(self.timings)),
            jwt: self.jwt.clone(),
            mcp: self.mcp.clone(),
            ready_max_lag: gatehouse_node::config::DEFAULT_READY_MAX_LAG,
            http_threads: gatehouse_node::front::threads(),
            a2a: Default::default(),
            otlp: None,
            tls: None,
            grants: self.grants.clone(),
            metrics: self.metrics.clone(),
            filter,
        }
    }
}

/// Node logs go to the test's output, shown for failing tests; RUST_LOG sets the level.
fn capture_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

struct Running {
    runtime: tokio::runtime::Runtime,
    handle: NodeHandle,
}

pub struct TestCluster {
    dir: tempfile::TempDir,
    router: Arc<Router>,
    options: NodeOptions,
    running: BTreeMap<u64, Running>,
    addrs: BTreeMap<u64, SocketAddr>,
    admin_key: String,
    /// Drives the test's own gRPC clients.
    client_rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("running", &self.running.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl TestCluster {
    /// Bootstraps the first id, joins the others and promotes them: all of them voters.
    pub fn new(ids: &[u64]) -> anyhow::Result<Self> {
        Self::with_timings(ids, fast_timings(500))
    }

    pub fn with_timings(ids: &[u64], timings: RaftTimings) -> anyhow::Result<Self> {
        Self::with_options(
            ids,
            NodeOptions {
                timings,
                ..NodeOptions::default()
            },
        )
    }

    /// A cluster whose nodes all run with the operator's `grants` (credentials and built-in
    /// tools per tenant).
    pub fn with_grants(ids: &[u64], grants: Grants) -> anyhow::Result<Self> {
        Self::with_options(
            ids,
            NodeOptions {
                grants,
                ..NodeOptions::default()
            },
        )
    }

    /// A cluster whose nodes all run with `options`.
    pub fn with_options(ids: &[u64], options: NodeOptions) -> anyhow::Result<Self> {
        capture_logs();
        let (&first, rest) = ids.split_first().context("a cluster needs a node")?;
        let mut cluster = TestCluster {
            dir: tempfile::tempdir()?,
            router: Arc::new(Router::default()),
            options,
            running: BTreeMap::new(),
            addrs: BTreeMap::new(),
            admin_key: String::new(),
            client_rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        };
        cluster.launch(first, Start::Bootstrap)?;
        cluster.admin_key = cluster.running[&first]
            .handle
            .admin_key
            .clone()
            .context("bootstrap gave no admin key")?;
        for &id in rest {
            cluster.add_voter(id)?;
        }
        Ok(cluster)
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// A running node's handle: its cluster, its actors. Panics if the node is not running.
    pub fn node(&self, id: u64) -> &NodeHandle {
        &self.running[&id].handle
    }

    pub fn admin_key(&self) -> &str {
        &self.admin_key
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    pub fn addr(&self, id: u64) -> SocketAddr {
        self.addrs[&id]
    }

    pub fn running(&self) -> Vec<u64> {
        self.running.keys().copied().collect()
    }

    /// Runs a future on the harness's client runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.client_rt.block_on(f)
    }

    /// An admin client talking to node `id` over gRPC.
    pub fn admin(&self, id: u64) -> Admin {
        Admin::new(self.addr(id), self.admin_key.clone())
    }

    fn launch(&mut self, id: u64, start: Start) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("node-{id}"))
            .enable_all()
            .build()?;
        let config = self
            .options
            .serve_config(id, self.data_dir(id), start, self.router.clone());
        let handle = runtime.block_on(server::start(config))?;
        self.addrs.insert(id, handle.grpc_addr);
        self.running.insert(id, Running { runtime, handle });
        Ok(())
    }

    /// Starts a new node that joins as a learner through a running member.
    pub fn add_learner(&mut self, id: u64) -> anyhow::Result<()> {
        let via = *self.running.keys().next().context("no node is running")?;
        let start = Start::Join {
            addr: self.addr(via).to_string(),
            key: JoinKey::Token(self.admin_key.clone()),
        };
        self.launch(id, start)
    }

    /// Joins a node and promotes it to voter once it has caught up.
    pub fn add_voter(&mut self, id: u64) -> anyhow::Result<()> {
        self.add_learner(id)?;
        let leader = self.leader(Duration::from_secs(10))?;
        let target = self.applied(leader);
        self.wait_for_applied(id, target, Duration::from_secs(30))?;
        let admin = self.admin(leader);
        self.block_on(admin.promote(id))?;
        Ok(())
    }

    /// Takes a node out of the membership (it keeps running until killed).
    pub fn remove(&self, id: u64) -> anyhow::Result<()> {
        let leader = self.leader(Duration::from_secs(10))?;
        let admin = self.admin(leader);
        self.block_on(admin.remove(id))
    }

    /// Drops the node's runtime: its tasks, sockets and open files go with it.
    pub fn kill(&mut self, id: u64) {
        if let Some(node) = self.running.remove(&id) {
            let Running { runtime, handle } = node;
            drop(handle);
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }

    /// Waits until every tenant has a home on every running node. The leader places new tenants
    /// in the background; a test that compares digests over a quiet registry waits for this
    /// first.
    pub fn wait_all_placed(&self, timeout: Duration) -> anyhow::Result<()> {
        self.wait_until("every tenant placed", timeout, |c| {
            c.running().into_iter().all(|id| {
                let registry = c.node(id).cluster.registry.read();
                registry.tenants().all(|t| registry.placement(t).is_some())
            })
        })
    }

    /// Stops the node as `gatehouse serve` does on SIGTERM (`NodeHandle::shutdown`), then drops
    /// its runtime; it can be restarted like a killed node.
    pub fn stop(&mut self, id: u64) {
        if let Some(node) = self.running.remove(&id) {
            let Running { runtime, handle } = node;
            runtime.block_on(handle.shutdown());
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
    }

    /// Starts a killed node again from its data directory, on the address it had.
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        if self.running.contains_key(&id) {
            bail!("node {id} is running");
        }
        self.launch(id, Start::Resume)
    }

    fn handle(&self, id: u64) -> &NodeHandle {
        &self.running[&id].handle
    }

    pub fn applied(&self, id: u64) -> u64 {
        *self.handle(id).cluster.applied.borrow()
    }

    pub fn digest(&self, id: u64) -> String {
        self.handle(id).cluster.registry.read().digest()
    }

    /// Whether node `id` holds a tenant of that name.
    pub fn has_tenant(&self, id: u64, name: &str) -> bool {
        let key = gatehouse_registry::ResourceKey {
            kind: gatehouse_registry::Kind::Tenant,
            tenant: None,
            name: name.to_owned(),
        };
        self.handle(id).cluster.registry.read().get(&key).is_some()
    }

    pub fn wait_for_applied(&self, id: u64, index: u64, timeout: Duration) -> anyhow::Result<()> {
        let cluster = self.handle(id).cluster.clone();
        self.running[&id]
            .runtime
            .block_on(cluster.wait_applied(index, timeout))
            .map_err(|e| anyhow::anyhow!("node {id}: {e}"))
    }

    /// The leader that the running nodes agree on, within `timeout`.
    pub fn leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let views: Vec<Option<u64>> = self
                .running
                .values()
                .map(|n| n.handle.cluster.raft.metrics().borrow().current_leader)
                .collect();
            if let Some(Some(leader)) = views.first()
                && self.running.contains_key(leader)
                && views.iter().filter(|v| **v == Some(*leader)).count() * 2 > views.len()
            {
                return Ok(*leader);
            }
            if std::time::Instant::now() > deadline {
                bail!("no agreed leader within {timeout:?}: {views:?}");
            }
            self.wait_metrics_change(Duration::from_millis(50));
        }
    }

    /// Waits until `condition` holds, checking whenever Raft metrics change and at least every
    /// 100 ms; fails with `what` after `timeout`.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut condition: impl FnMut(&Self) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + timeout;
        while !condition(self) {
            if std::time::Instant::now() > deadline {
                bail!("{what}: not within {timeout:?}");
            }
            self.wait_metrics_change(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Sleeps until any node's Raft metrics change, or `at_most` passes.
    fn wait_metrics_change(&self, at_most: Duration) {
        let mut watches: Vec<_> = self
            .running
            .values()
            .map(|n| n.handle.cluster.raft.metrics())
            .collect();
        self.block_on(async {
            let changed = any_changed(&mut watches);
            let _ = tokio::time::timeout(at_most, changed).await;
        });
    }

    /// Waits until every running node has applied `index` and holds the same state digest.
    pub fn wait_converged(&self, index: u64, timeout: Duration) -> anyhow::Result<String> {
        for id in self.running() {
            self.wait_for_applied(id, index, timeout)?;
        }
        let deadline = std::time::Instant::now() + timeout;
        // The leader writes placements of its own accord (new tenants, a node back): the
        // registry counts as converged once every node agrees and nothing changed for a while.
        let mut agreed: Option<(String, std::time::Instant)> = None;
        loop {
            let digests: BTreeMap<u64, String> = self
                .running()
                .into_iter()
                .map(|id| (id, self.digest(id)))
                .collect();
            let first = digests.values().next().cloned().unwrap_or_default();
            if digests.values().all(|d| *d == first) {
                match &agreed {
                    Some((d, since)) if *d == first => {
                        if since.elapsed() >= QUIET {
                            return Ok(first);
                        }
                    }
                    _ => agreed = Some((first, std::time::Instant::now())),
                }
            } else {
                agreed = None;
            }
            if std::time::Instant::now() > deadline {
                bail!("digests differ after {timeout:?}: {digests:?}");
            }
            self.wait_metrics_change(Duration::from_millis(50));
        }
    }

    /// The highest applied index among running nodes.
    pub fn max_applied(&self) -> u64 {
        self.running()
            .into_iter()
            .map(|id| self.applied(id))
            .max()
            .unwrap_or(0)
    }

    /// The last log index covered by the node's latest snapshot, if it has one.
    pub fn snapshot_index(&self, id: u64) -> Option<u64> {
        self.handle(id)
            .cluster
            .raft
            .metrics()
            .borrow()
            .snapshot
            .map(|l| l.index)
    }

    /// The last log index the node has purged, if any.
    pub fn purged_index(&self, id: u64) -> Option<u64> {
        self.handle(id)
            .cluster
            .raft
            .metrics()
            .borrow()
            .purged
            .map(|l| l.index)
    }

    /// The term node `id` is in.
    pub fn term(&self, id: u64) -> u64 {
        self.handle(id).cluster.raft.metrics().borrow().current_term
    }

    pub fn membership(&self, id: u64) -> (Vec<u64>, Vec<u64>) {
        let metrics = self.handle(id).cluster.raft.metrics().borrow().clone();
        let m = metrics.membership_config.membership();
        let voters: Vec<u64> = m.voter_ids().collect();
        let learners = m.learner_ids().collect();
        (voters, learners)
    }
}

/// Resolves when any of the watches changes.
async fn any_changed(
    watches: &mut [tokio::sync::watch::Receiver<gatehouse_cluster::cluster::Metrics>],
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    let mut tasks = Vec::new();
    for w in watches.iter() {
        let mut w = w.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            if w.changed().await.is_ok() {
                let _ = tx.send(()).await;
            }
        }));
    }
    drop(tx);
    let _ = rx.recv().await;
    for t in tasks {
        t.abort();
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.running.keys().copied().collect();
        for id in ids {
            self.kill(id);
        }
    }
}
