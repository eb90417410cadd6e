//! The node's actors: a root supervisor, a tenant supervisor, and one `TenantActor` per active
//! tenant. A tenant actor owns the tenant's resolved-cascade cache and, on the tenant's home node,
//! works its approval queue: expiring, claiming, executing exactly once under a claim, and
//! reporting. The leader's loop places each tenant on a home.
//!
//! Decisions are plain functions (`decide`, `placement`) that return what to do; the actors and
//! loops only carry it out. Nothing here changes the registry except by proposing a command,
//! and nothing invokes an upstream without a committed claim.

mod clock;
mod context;
pub mod decide;
mod duty_tracker;
mod handle;
mod leader;
mod listener;
mod outcome;
pub mod placement;
pub mod ports;
mod supervisor;
mod tenant;

pub use clock::now_ms;
pub use context::ActorSettings;
pub use handle::{TenantHandle, TenantMsg};
pub use outcome::outcome_of;
pub use ports::{
    ClusterPort, ExecError, Execution, Executor, NewTenantPlacer, ProposeError, ToolOutput,
};
pub use supervisor::Health;

use context::{Faults, NodeContext};
use gatehouse_raft_store::{AppliedEntry, SharedRegistry};
use ractor::{Actor, ActorRef};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;
use supervisor::{Root, RootMsg, SupervisorMsg};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum ActorsError {
    #[error("the supervision tree did not start: {0}")]
    Spawn(String),
    #[error("{0}")]
    Tenant(String),
}

/// The running supervision tree of one node. Cheap to clone.
#[derive(Clone)]
pub struct Actors {
    inner: Arc<Inner>,
}

struct Inner {
    context: Arc<NodeContext>,
    root: ActorRef<RootMsg>,
    tenants: ActorRef<SupervisorMsg>,
    health: watch::Receiver<Health>,
    stop: watch::Sender<bool>,
    loops: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Actors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actors")
            .field("node", &self.inner.context.node)
            .field("active", &self.active_tenants())
            .finish_non_exhaustive()
    }
}

impl Actors {
    /// Starts the tree and the node's loops. `events` must be a subscription taken before
    /// anything was applied that the listener should see; anything missed is found by its sweep.
    pub async fn start(
        settings: ActorSettings,
        registry: SharedRegistry,
        events: broadcast::Receiver<AppliedEntry>,
        cluster: Arc<dyn ClusterPort>,
        executor: Arc<dyn Executor>,
    ) -> Result<Actors, ActorsError> {
        let context = Arc::new(NodeContext {
            node: cluster.node_id(),
            registry,
            cluster,
            executor,
            tracker: Default::default(),
            settings,
            faults: Faults::default(),
            handles: RwLock::new(HashMap::new()),
            restarts: AtomicU64::new(0),
        });
        let (health_tx, health) = watch::channel(Health::Ready);
        let (root, _) = Actor::spawn(None, Root, (context.clone(), health_tx))
            .await
            .map_err(|e| ActorsError::Spawn(e.to_string()))?;
        let tenants = root
            .call(supervisor::RootMsg::tenants, Some(Duration::from_secs(5)))
            .await
            .ok()
            .and_then(|r| match r {
                ractor::rpc::CallResult::Success(t) => Some(t),
                _ => None,
            })
            .ok_or_else(|| ActorsError::Spawn("the root did not answer".into()))?;
        let (stop, stopped) = watch::channel(false);
        let loops = vec![
            tokio::spawn(listener::listen(
                context.clone(),
                tenants.clone(),
                events,
                stopped.clone(),
            )),
            tokio::spawn(leader::lead(context.clone(), stopped)),
        ];
        Ok(Actors {
            inner: Arc::new(Inner {
                context,
                root,
                tenants,
                health,
                stop,
                loops: std::sync::Mutex::new(loops),
            }),
        })
    }

    /// The tenant's handle, starting its actor on first use. Readers that find it running never
    /// touch a mailbox.
    pub async fn tenant(&self, tenant: &str) -> Result<TenantHandle, ActorsError> {
        if let Some(handle) = self.inner.context.handle(tenant) {
            return Ok(handle);
        }
        let answer = self
            .inner
            .tenants
            .call(
                |reply| SupervisorMsg::Get {
                    tenant: tenant.to_owned(),
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await;
        match answer {
            Ok(ractor::rpc::CallResult::Success(result)) => result.map_err(ActorsError::Tenant),
            _ => Err(ActorsError::Tenant(
                "the tenant supervisor did not answer".into(),
            )),
        }
    }

    /// Whether the tree is healthy; a tenant given up on makes the node not ready.
    pub fn health(&self) -> watch::Receiver<Health> {
        self.inner.health.clone()
    }

    /// Tenant actors running now.
    pub fn active_tenants(&self) -> usize {
        self.inner
            .context
            .handles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Restarts of tenant actors since the node started.
    pub fn restarts(&self) -> u64 {
        self.inner.context.restarts.load(Ordering::Relaxed)
    }

    /// Executions and proposals running as tasks now.
    pub fn running_tasks(&self) -> usize {
        self.inner.context.tracker.running_tasks()
    }

    /// Fault injection for tests: the tenant's actor fails to start (and so to restart) while
    /// `fail` is set.
    pub fn fail_starts(&self, tenant: &str, fail: bool) {
        let mut failing = self
            .inner
            .context
            .faults
            .failing_starts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if fail {
            failing.insert(tenant.to_owned());
        } else {
            failing.remove(tenant);
        }
    }

    /// Stops the loops and the actors; executions still running after `grace` are cut off (their
    /// calls stay executing under a claim the next home treats as lost).
    pub async fn stop(&self, grace: Duration) {
        let _ = self.inner.stop.send(true);
        let _ = self
            .inner
            .tenants
            .call(|reply| SupervisorMsg::StopAll { reply }, Some(grace))
            .await;
        let deadline = tokio::time::Instant::now() + grace;
        while self.inner.context.tracker.running_tasks() > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.inner.context.tracker.abort_all();
        self.inner.root.stop(None);
        let loops: Vec<_> = std::mem::take(
            &mut *self
                .inner
                .loops
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for task in loops {
            let _ = task.await;
        }
    }
}
