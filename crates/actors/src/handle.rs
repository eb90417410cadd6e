//! How the rest of the node reaches one tenant's actor: the messages it takes, and the handle
//! readers share its cascade cache through, so resolving skills never waits in its mailbox.

use crate::clock::now_ms;
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::cache::CascadeCache;
use gatehouse_registry::cascade::{Query, Resolution};
use ractor::{ActorRef, RpcReplyPort};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a tenant actor is told.
#[derive(Debug)]
pub enum TenantMsg {
    /// The tenant's calls or placement changed, or a task of its finished: look again.
    Changed,
    /// A deadline the actor set is due.
    Wake,
    /// Time to see whether the actor is idle.
    IdleCheck,
    /// Fault injection: panic in the handler.
    Crash,
    /// The actor's handle, for readers.
    Handle(RpcReplyPort<TenantHandle>),
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
