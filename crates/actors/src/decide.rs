//! The home's duties for one tenant's queue, as a plain function: given the calls, the tenant's
//! placement and what this node is doing now, which commands to propose. The actor only carries
//! them out.

use gatehouse_registry::call::{Call, CallId, CallState, Claim, NodeId, Timestamp};
use gatehouse_registry::registry::Placement;
use std::collections::{HashMap, HashSet};

/// What this node is doing for a tenant's calls right now; it outlives actor restarts, since it
/// is what tells a live claim from a lost one.
#[derive(Clone, Copy)]
pub struct NodeActivity<'a> {
    pub node: NodeId,
    /// Claims whose execution runs (or is about to) in this process.
    /// Claim id to tenant.
    pub live_claims: &'a HashMap<String, String>,
    /// Calls with a proposal of this node's still in flight.
    pub in_flight: &'a HashSet<CallId>,
    /// Whether this node certainly never sent a request under one of its own claims (the
    /// executor's word: see `Executor::never_sent`).
    pub never_sent: &'a dyn Fn(&Claim) -> bool,
}

/// One thing the home should do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Duty {
    /// Propose `Expire` under the home's epoch: a deadline passed.
    Expire { call: CallId, epoch: u64 },
    /// Claim the call under the home's epoch and, once the claim commits, execute it. A
    /// re-claim of this node's own lost claim that never sent its request names it.
    ClaimAndRun {
        call: CallId,
        epoch: u64,
        replaces_unsent: Option<String>,
    },
    /// Propose `MarkUnknown`: the call was left executing by a lost claim and is not safe to run
    /// again.
    MarkUnknown { call: CallId, epoch: u64 },
}

impl std::fmt::Debug for NodeActivity<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeActivity")
            .field("node", &self.node)
            .field("live_claims", &self.live_claims)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// The duties, and when to look again if nothing changes before (the next deadline).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HomeDuties {
    pub duties: Vec<Duty>,
    pub wake_at: Option<Timestamp>,
}

/// The home's duties for `calls` (one tenant's unfinished calls). A node that is not the
/// tenant's home has none: it can neither claim nor expire, and the state machine would refuse it
/// if it tried.
pub fn home_duties<'a>(
    placement: Option<Placement>,
    calls: impl IntoIterator<Item = &'a Call>,
    activity: NodeActivity<'_>,
    now: Timestamp,
) -> HomeDuties {
    let mut due = HomeDuties::default();
    let Some(placement) = placement.filter(|p| p.home == activity.node) else {
        return due;
    };
    let epoch = placement.epoch;
    let moving = placement.moving_to.is_some();
    for call in calls {
        let id = call.id();
        if activity.in_flight.contains(id) {
            continue;
        }
        let deadline = match call.state {
            CallState::Pending => Some(call.spec.expires_at),
            CallState::Approved => Some(call.approval_valid_until.unwrap_or(call.spec.expires_at)),
            _ => None,
        };
        if let Some(deadline) = deadline {
            if now >= deadline {
                due.duties.push(Duty::Expire {
                    call: id.clone(),
                    epoch,
                });
                continue;
            }
            due.wake_at = Some(due.wake_at.map_or(deadline, |w| w.min(deadline)));
        }
        match call.state {
            CallState::Approved if !moving => due.duties.push(Duty::ClaimAndRun {
                call: id.clone(),
                epoch,
                replaces_unsent: None,
            }),
            CallState::Executing => {
                let Some(claim) = &call.claim else { continue };
                let lost = claim.epoch < epoch
                    || (claim.node == activity.node
                        && !activity.live_claims.contains_key(&claim.claim_id));
                if !lost {
                    continue;
                }
                // Even while the tenant moves away: the move waits for this execution, so the home
                // takes its own lost claim back and finishes it (the upstream dedupes by the call
                // id).
                // A claim of this node's that never sent its request left the upstream
                // untouched: claiming again is safe for any call, and nobody has to find out
                // what happened.
                let own_unsent = claim.node == activity.node && (activity.never_sent)(claim);
                if call.spec.retry_safe || own_unsent {
                    due.duties.push(Duty::ClaimAndRun {
                        call: id.clone(),
                        epoch,
                        replaces_unsent: own_unsent.then(|| claim.claim_id.clone()),
                    });
                } else {
                    due.duties.push(Duty::MarkUnknown {
                        call: id.clone(),
                        epoch,
                    });
                }
            }
            _ => {}
        }
    }
    due
}

#[cfg(test)]
mod tests;
