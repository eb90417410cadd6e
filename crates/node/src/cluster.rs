//! This node's handle on the cluster: propose a command from any node (followers forward to the
//! leader, retrying through leader changes under the same request id), and linearizable reads.

use crate::net::{ForwardReply, Forwarded, Peers, SharedFilter, deliver};
use gatehouse_proto::v1 as pb;
use gatehouse_raft_store::{ApplyResult, NodeId, Raft, SharedRegistry};
use gatehouse_registry::{ApplyError, Command, Proposal, Response};
use openraft::error::{ClientWriteError, RaftError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// How long a write keeps trying through elections and forwarding failures.
const WRITE_DEADLINE: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Rejected(#[from] ApplyError),
    #[error("no leader could take the write within {0:?}: {1}")]
    Unavailable(Duration, String),
    #[error("raft stopped: {0}")]
    Stopped(String),
}

#[derive(Clone)]
pub struct Cluster {
    pub id: NodeId,
    pub raft: Raft,
    pub registry: SharedRegistry,
    pub applied: watch::Receiver<u64>,
    pub peers: Peers,
    pub filter: SharedFilter,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").field("id", &self.id).finish()
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Cluster {
    /// Validates, stamps and writes a command; its answer and log index once committed and
    /// applied here too, so the caller reads its own write from this node.
    pub async fn propose(&self, command: Command) -> Result<(Response, u64), WriteError> {
        command.validate()?;
        let proposal = Proposal {
            request_id: uuid::Uuid::new_v4(),
            at: now_ms(),
            command,
        };
        let (result, index) = self.write(proposal).await?;
        // Committed either way; waiting only makes this node's next read include the write.
        let _ = self.wait_applied(index, Duration::from_secs(5)).await;
        Ok((result?, index))
    }

    /// Writes a proposal through whichever node leads. The request id makes a retry after a
    /// lost reply or a leader change apply once.
    pub async fn write(&self, proposal: Proposal) -> Result<(ApplyResult, u64), WriteError> {
        let deadline = tokio::time::Instant::now() + WRITE_DEADLINE;
        let mut pause = Duration::from_millis(20);
        loop {
            let last_error = match self.raft.client_write(proposal.clone()).await {
                Ok(reply) => return Ok((reply.data, reply.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                    match (to.leader_id, to.leader_node) {
                        (Some(leader), Some(node)) if leader != self.id => {
                            match self
                                .forward(leader, &node.addr, Forwarded::Write(proposal.clone()))
                                .await
                            {
                                Ok(ForwardReply::Applied(result, index)) => {
                                    return Ok((result, index));
                                }
                                Ok(other) => format!("leader {leader} answered {other:?}"),
                                Err(e) => format!("forwarding to {leader}: {e}"),
                            }
                        }
                        _ => "no leader yet".to_owned(),
                    }
                }
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                    return Err(WriteError::Stopped(e.to_string()));
                }
                Err(RaftError::Fatal(e)) => return Err(WriteError::Stopped(e.to_string())),
            };
            if tokio::time::Instant::now() + pause > deadline {
                return Err(WriteError::Unavailable(WRITE_DEADLINE, last_error));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Waits until this node has applied every write committed before the call: the leader
    /// confirms its leadership with a quorum, a follower asks the leader for that index.
    pub async fn linearizable(&self) -> Result<(), WriteError> {
        let deadline = tokio::time::Instant::now() + WRITE_DEADLINE;
        let index = loop {
            let error = match self.raft.ensure_linearizable().await {
                Ok(read) => break read.map_or(0, |id| id.index),
                Err(RaftError::APIError(e)) => match e {
                    openraft::error::CheckIsLeaderError::ForwardToLeader(to) => {
                        match (to.leader_id, to.leader_node) {
                            (Some(leader), Some(node)) if leader != self.id => {
                                match self.forward(leader, &node.addr, Forwarded::ReadIndex).await {
                                    Ok(ForwardReply::ReadIndex(i)) => break i,
                                    Ok(other) => format!("leader {leader} answered {other:?}"),
                                    Err(e) => e.to_string(),
                                }
                            }
                            _ => "no leader yet".to_owned(),
                        }
                    }
                    other => other.to_string(),
                },
                Err(RaftError::Fatal(e)) => return Err(WriteError::Stopped(e.to_string())),
            };
            if tokio::time::Instant::now() > deadline {
                return Err(WriteError::Unavailable(WRITE_DEADLINE, error));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.wait_applied(index, deadline - tokio::time::Instant::now())
            .await
            .map_err(|e| WriteError::Unavailable(WRITE_DEADLINE, e))
    }

    /// Waits until this node has applied `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), String> {
        let mut applied = self.applied.clone();
        let reached = tokio::time::timeout(timeout, applied.wait_for(|a| *a >= index)).await;
        match reached {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err("the state machine stopped".to_owned()),
            Err(_) => Err(format!("index {index} not applied within {timeout:?}")),
        }
    }

    async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        what: Forwarded,
    ) -> anyhow::Result<ForwardReply> {
        deliver(&*self.filter, self.id, leader).await?;
        let payload = serde_json::to_vec(&what)?;
        let mut client = self.peers.client(addr)?;
        let reply = tokio::time::timeout(
            Duration::from_secs(5),
            client.forward(self.peers.request(pb::ForwardRequest { payload })),
        )
        .await??;
        deliver(&*self.filter, leader, self.id).await?;
        Ok(serde_json::from_slice(&reply.into_inner().payload)?)
    }
}

/// What a node publishes about its Raft state.
pub type Metrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;
