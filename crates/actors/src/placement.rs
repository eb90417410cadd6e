//! Where each tenant's queue lives, decided by the leader as a plain function: rendezvous hashing
//! over the reachable voters, a planned move in two steps (start the move, then place once the old
//! home's executions have finished), also away from a voter being removed (a learner now, until
//! its tenants have left), and an unreachable or removed home replaced at once.

use gatehouse_registry::Command;
use gatehouse_registry::call::NodeId;
use gatehouse_registry::registry::Placement;
use sha2::{Digest, Sha256};

/// The node among `nodes` that ranks highest for `tenant`. Removing a node moves only the tenants
/// it was home to; adding one moves only those it now wins.
pub fn rendezvous(tenant: &str, nodes: &[NodeId]) -> Option<NodeId> {
    nodes.iter().copied().max_by_key(|node| {
        let mut h = Sha256::new();
        h.update(tenant.as_bytes());
        h.update([0]);
        h.update(node.to_be_bytes());
        let digest: [u8; 32] = h.finalize().into();
        (digest, *node)
    })
}

/// One tenant as the leader sees it.
#[derive(Debug, Clone, Copy)]
pub struct TenantView<'a> {
    pub tenant: &'a str,
    pub placement: Option<Placement>,
    /// Some call of the tenant executes under a claim of the current epoch.
    pub busy: bool,
}

/// The command that moves a tenant one step toward its rightful home, if it needs one.
/// `voters` are the current voters, `learners` the learners (a voter being removed is one until
/// its tenants have moved); `reachable` says whether a node answered the leader recently enough.
pub fn next_step(
    view: TenantView<'_>,
    voters: &[NodeId],
    learners: &[NodeId],
    reachable: impl Fn(NodeId) -> bool,
) -> Option<Command> {
    let candidates: Vec<NodeId> = voters.iter().copied().filter(|n| reachable(*n)).collect();
    let desired = rendezvous(view.tenant, &candidates)?;
    let place = |epoch: u64| Command::Place {
        tenant: view.tenant.to_owned(),
        home: desired,
        epoch,
    };
    let Some(current) = view.placement else {
        return Some(place(1));
    };
    // A home that was demoted to learner is alive: it is drained by a planned move, so its
    // running executions finish and report instead of ending unknown.
    let member = voters.contains(&current.home) || learners.contains(&current.home);
    let home_alive = member && reachable(current.home);
    if !home_alive {
        // Nobody can hear from the old home: waiting for it to drain could take forever. Its
        // claims become stale with the new epoch, so it can neither claim nor expire anymore.
        // `desired` is a reachable voter, so it is never the old home.
        return Some(place(current.epoch + 1));
    }
    if current.home == desired {
        // A move that is no longer wanted: a new epoch under the same home ends it.
        return current.moving_to.map(|_| place(current.epoch + 1));
    }
    if current.moving_to != Some(desired) {
        return Some(Command::StartMove {
            tenant: view.tenant.to_owned(),
            epoch: current.epoch,
            to: desired,
        });
    }
    (!view.busy).then(|| place(current.epoch + 1))
}

#[cfg(test)]
mod tests;
