//! The node's one copy of the registry, shared between the state machine that writes it and
//! everything that reads it.

use gatehouse_registry::Registry;
use std::sync::{Arc, LockResult, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The registry as readers see it. Lock briefly, never across an await.
///
/// One lock policy for every reader: a read never fails. The lock is poisoned only when an
/// apply panicked while holding it, and that panic already stopped the node's Raft core, so the
/// node refuses writes and stops being ready; readers go on seeing the last state, which the
/// node's durable log and snapshot rebuild on restart. Writing is the state machine's alone, and
/// it refuses a poisoned lock.
#[derive(Debug, Clone, Default)]
pub struct SharedRegistry(Arc<RwLock<Registry>>);

impl SharedRegistry {
    pub fn new(registry: Registry) -> SharedRegistry {
        SharedRegistry(Arc::new(RwLock::new(registry)))
    }

    /// The registry, read-locked.
    pub fn read(&self) -> RwLockReadGuard<'_, Registry> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registry, write-locked: for the state machine's apply and snapshot install, and for
    /// tests that set a registry up without a cluster.
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, Registry>> {
        self.0.write()
    }
}
