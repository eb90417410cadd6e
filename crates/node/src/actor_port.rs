//! The node's cluster handle as the actors see it (`gatehouse_actors::ClusterPort`).

use crate::cluster::{Cluster, WriteError};
use futures::future::BoxFuture;
use gatehouse_actors::{ClusterPort, ProposeError};
use gatehouse_registry::call::NodeId;
use gatehouse_registry::{Command, Response};
use std::time::Duration;

impl ClusterPort for Cluster {
    fn node_id(&self) -> NodeId {
        self.id
    }

    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>> {
        let cluster = self.clone();
        Box::pin(async move {
            match Cluster::propose(&cluster, command).await {
                Ok((response, _)) => Ok(response),
                Err(WriteError::Rejected(e)) => Err(ProposeError::Refused(e.to_string())),
                Err(e @ (WriteError::Unavailable(..) | WriteError::Stopped(_))) => {
                    Err(ProposeError::Unavailable(e.to_string()))
                }
            }
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

    fn reachable(&self, node: NodeId, window: Duration) -> bool {
        node == self.id || self.peers.answered_within(node, window)
    }
}
