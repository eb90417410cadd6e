//! What every actor of a node shares: the registry, the cluster and executor ports, the node's
//! work, and the settings; and the handle readers use to reach a tenant's cascade cache without
//! waiting in its mailbox.

use crate::ports::{ClusterPort, ExecError, Executor, ToolOutput};
use crate::tenant::TenantMsg;
use crate::work::Work;
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::cache::CascadeCache;
use gatehouse_registry::call::{MAX_RESULT_BYTES, NodeId, Outcome, Timestamp};
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::cascade::{Query, Resolution};
use ractor::ActorRef;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

pub fn now_ms() -> Timestamp {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

pub(crate) struct Shared {
    pub(crate) node: NodeId,
    pub(crate) registry: SharedRegistry,
    pub(crate) cluster: Arc<dyn ClusterPort>,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) work: Arc<Work>,
    pub(crate) settings: ActorSettings,
    pub(crate) faults: Faults,
    /// Live tenant handles, for readers; written by the tenant supervisor.
    pub(crate) handles: RwLock<std::collections::HashMap<String, TenantHandle>>,
    pub(crate) restarts: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn handle(&self, tenant: &str) -> Option<TenantHandle> {
        self.handles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned()
    }
}

/// A reader's way into one tenant's actor: its cascade cache, shared, so resolving skills never
/// waits in the actor's mailbox.
#[derive(Clone)]
pub struct TenantHandle {
    pub(crate) tenant: Arc<str>,
    pub(crate) cache: CascadeCache,
    pub(crate) registry: SharedRegistry,
    pub(crate) last_used: Arc<AtomicU64>,
    pub(crate) actor: ActorRef<TenantMsg>,
}

impl std::fmt::Debug for TenantHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantHandle")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl TenantHandle {
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The tenant's cascade for a tool and user, from the cache while no skill change of the
    /// tenant (or a global one) has been applied since it was computed.
    pub fn resolve(&self, tool: &str, user: Option<&str>) -> Arc<Resolution> {
        self.last_used.store(now_ms(), Ordering::Relaxed);
        let query = Query {
            tenant: self.tenant.to_string(),
            tool: tool.to_owned(),
            user: user.map(str::to_owned),
        };
        let registry = self.registry.read();
        self.cache.get_or_resolve(
            &query,
            registry.cascade_changed_at(&self.tenant),
            registry.applied_index(),
            || registry.resolve_skills(&query),
        )
    }

    /// The resolved skill context to send with a call, if any skill applies.
    pub fn skill_context(&self, tool: &str, user: Option<&str>) -> Option<String> {
        let resolution = self.resolve(tool, user);
        (!resolution.resolved_context.is_empty()).then(|| resolution.resolved_context.clone())
    }

    /// Fault injection: the actor panics in its message handler.
    pub fn inject_panic(&self) {
        let _ = self.actor.cast(TenantMsg::Crash);
    }
}

/// What an execution's result becomes in the registry: the digest and length of the whole
/// output, and the output itself while it fits.
pub fn outcome_of(result: Result<ToolOutput, ExecError>) -> Outcome {
    match result {
        Ok(out) if !out.is_error => Outcome::Succeeded {
            output_sha256: sha256_hex(out.result_json.as_bytes()),
            output_len: out.result_json.len() as u64,
            result: (out.result_json.len() <= MAX_RESULT_BYTES).then_some(out.result_json),
        },
        Ok(out) => Outcome::Failed {
            error: bounded(format!("the tool reported an error: {}", out.result_json)),
        },
        Err(e) => Outcome::Failed {
            error: bounded(e.message),
        },
    }
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_RESULT_BYTES {
        let mut cut = MAX_RESULT_BYTES - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}
