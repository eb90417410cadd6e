//! What every actor and loop of a node shares: the registry, the cluster and executor ports, the
//! node's duty tracker, the settings, and the live tenant handles.

use crate::duty_tracker::DutyTracker;
use crate::handle::TenantHandle;
use crate::ports::{ClusterPort, Executor};
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::call::NodeId;
use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// How the supervision tree and the leader's placement behave.
#[derive(Debug, Clone)]
pub struct ActorSettings {
    /// A tenant actor with nothing to do for this long stops, unless it is home to unfinished
    /// calls or runs an execution.
    pub passivate_after: Duration,
    /// The first restart of a failed tenant actor waits this long; each further one twice as
    /// long as the one before.
    pub restart_backoff: Duration,
    /// More failures than this within `restart_window` and the tenant is given up on and the
    /// node marked not ready.
    pub restart_limit: usize,
    pub restart_window: Duration,
    /// A home that has not answered the leader for this long is replaced at once.
    pub home_unreachable_after: Duration,
    /// How often the leader reviews placement and the listener sweeps for missed work.
    pub review_every: Duration,
    /// Finished calls and idempotency records are purged after this long.
    pub retention: Duration,
    /// How often the leader purges.
    pub purge_every: Duration,
    /// Cached cascade resolutions per tenant.
    pub cache_entries: u64,
}

impl Default for ActorSettings {
    fn default() -> Self {
        ActorSettings {
            passivate_after: Duration::from_secs(300),
            restart_backoff: Duration::from_millis(100),
            restart_limit: 5,
            restart_window: Duration::from_secs(60),
            home_unreachable_after: Duration::from_secs(5),
            review_every: Duration::from_millis(500),
            retention: Duration::from_secs(7 * 24 * 3600),
            purge_every: Duration::from_secs(600),
            cache_entries: 10_000,
        }
    }
}

/// Fault injection for tests of the supervision tree.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Tenants whose actor fails to start.
    pub(crate) failing_starts: Mutex<HashSet<String>>,
}

impl Faults {
    pub(crate) fn start_fails(&self, tenant: &str) -> bool {
        self.failing_starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(tenant)
    }
}

/// The node as its actors and loops see it: one per supervision tree, shared by all of them.
pub(crate) struct NodeContext {
    pub(crate) node: NodeId,
    pub(crate) registry: SharedRegistry,
    pub(crate) cluster: Arc<dyn ClusterPort>,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) tracker: Arc<DutyTracker>,
    pub(crate) settings: ActorSettings,
    pub(crate) faults: Faults,
    /// Live tenant handles, for readers; written by the tenant supervisor.
    pub(crate) handles: RwLock<std::collections::HashMap<String, TenantHandle>>,
    pub(crate) restarts: AtomicU64,
}

impl std::fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeContext")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl NodeContext {
    pub(crate) fn handle(&self, tenant: &str) -> Option<TenantHandle> {
        self.handles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned()
    }
}
