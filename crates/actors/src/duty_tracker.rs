//! The duties this node carries out for the queues it is home to: the claims whose executions run here,
//! the calls with a proposal in flight, and the tasks doing both. Kept per node, not per actor, so
//! that a tenant actor restarted after a panic still tells a live claim from a lost one, and its
//! executions are neither cut off nor run twice.

use gatehouse_registry::call::CallId;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::task::AbortHandle;

/// The node's record of the duties under way here, behind one lock.
#[derive(Debug, Default)]
pub(crate) struct DutyTracker {
    state: Mutex<TrackedDuties>,
    next_task: AtomicU64,
}

/// What the tracker holds; `NodeActivity` is the view of it that `home_duties` reads.
#[derive(Debug, Default)]
pub(crate) struct TrackedDuties {
    /// The live claims: claim id to tenant.
    pub(crate) live_claims: HashMap<String, String>,
    pub(crate) in_flight: HashSet<CallId>,
    tasks: HashMap<u64, AbortHandle>,
}

impl DutyTracker {
    pub(crate) fn lock(&self) -> MutexGuard<'_, TrackedDuties> {
        // The guarded sets stay consistent across a panic elsewhere: every change is one insert
        // or remove.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks a call as having a proposal in flight; false if it already had one.
    pub(crate) fn begin(&self, call: &CallId) -> bool {
        self.lock().in_flight.insert(call.clone())
    }

    pub(crate) fn end(&self, call: &CallId) {
        self.lock().in_flight.remove(call);
    }

    /// Records a claim as live here before it is proposed, so that no reader of the registry can
    /// see it committed and think it lost.
    pub(crate) fn claim(&self, claim_id: &str, tenant: &str) {
        let mut state = self.lock();
        state
            .live_claims
            .insert(claim_id.to_owned(), tenant.to_owned());
    }

    pub(crate) fn release(&self, claim_id: &str) {
        let mut state = self.lock();
        state.live_claims.remove(claim_id);
    }

    /// Whether an execution of the tenant runs here.
    pub(crate) fn executing_for(&self, tenant: &str) -> bool {
        self.lock().live_claims.values().any(|t| t == tenant)
    }

    /// Runs `task` on the runtime, tracked so that `abort_all` can stop it.
    pub(crate) fn spawn(
        self: &std::sync::Arc<Self>,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let id = self.next_task.fetch_add(1, Ordering::Relaxed);
        let tracker = self.clone();
        // Hold the lock across spawn so that a task that finishes at once cannot try to forget
        // itself before it is recorded.
        let mut state = self.lock();
        let handle = tokio::spawn(async move {
            task.await;
            tracker.lock().tasks.remove(&id);
        });
        state.tasks.insert(id, handle.abort_handle());
    }

    pub(crate) fn running_tasks(&self) -> usize {
        self.lock().tasks.len()
    }

    pub(crate) fn abort_all(&self) {
        for (_, task) in self.lock().tasks.drain() {
            task.abort();
        }
    }
}
