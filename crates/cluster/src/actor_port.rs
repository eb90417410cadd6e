//! The node's cluster handle as the tenant actors see it (`gatehouse_actors::ClusterPort`).

use crate::cluster::{Cluster, WriteError};
use futures::future::BoxFuture;
use gatehouse_actors::{ClusterPort, NewTenantPlacer, ProposeError};
use gatehouse_registry::Command;
use gatehouse_registry::Response;
use gatehouse_registry::call::NodeId;
use std::time::Duration;

impl ClusterPort for Cluster {
    fn node_id(&self) -> NodeId {
        self.id
    }

    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>> {
        let cluster = self.clone();
        Box::pin(async move {
            Cluster::propose(&cluster, command)
                .await
                .map(|(response, _)| response)
                .map_err(ProposeError::from)
        })
    }

    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.id)
    }

    fn voters(&self) -> Vec<NodeId> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    fn learners(&self) -> Vec<NodeId> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .learner_ids()
            .collect()
    }

    fn reachable(&self, node: NodeId, window: Duration) -> bool {
        node == self.id || self.peers.answered_within(node, window)
    }

    fn place_new_tenants(&self, placer: Option<NewTenantPlacer>) {
        Cluster::place_new_tenants(self, placer);
    }
}

impl From<WriteError> for ProposeError {
    fn from(e: WriteError) -> ProposeError {
        match e {
            WriteError::Rejected(e) => ProposeError::Refused(e.to_string()),
            e @ (WriteError::Unavailable(..) | WriteError::Stopped(_)) => {
                ProposeError::Unavailable(e.to_string())
            }
        }
    }
}
