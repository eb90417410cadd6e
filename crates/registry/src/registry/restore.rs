//! A registry carried into a new cluster by a backup: everything the log built stays, except what
//! names the old cluster's nodes, which mean nothing there.

use super::{Placement, Registry};
use crate::call::NodeId;

impl Registry {
    /// Prepares a restored copy for a new cluster whose only node is `node`: forgets every node
    /// the old cluster admitted (so their ids may be used again; the new node admits itself when
    /// it starts), and homes every tenant on `node` under the next epoch, so that a claim an old
    /// node held is stale and follows the failover rules (re-claimed if idempotent, else
    /// `outcome_unknown`) instead of passing for the new home's own. Resources, principals,
    /// calls, idempotency records and applied request ids are kept as they were.
    pub fn for_new_cluster(&mut self, node: NodeId) {
        self.state.nodes.clear();
        for placement in self.state.placements.values_mut() {
            *placement = Placement {
                home: node,
                // A backup is a file anyone may have edited: an epoch at the type's end stays
                // there rather than wrapping below every claim (or panicking in debug).
                epoch: placement.epoch.saturating_add(1),
                moving_to: None,
            };
        }
        self.rebuild_unsettled();
    }

    /// The node ids the cluster admitted, in order.
    pub fn admitted_nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.state.nodes.keys().copied()
    }
}
