//! `RaftService`: the internal RPCs between nodes. Only a caller holding the cluster's peer
//! secret gets in (and, under `peer-mtls`, only over a connection that presented a client
//! certificate from the cluster's CA); clients never talk to it.

use gatehouse_cluster::net::{ForwardReply, Forwarded, Peers};
use gatehouse_gateway::auth::constant_time_eq;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::raft_service_server::RaftService;
use gatehouse_raft_store::Raft;
use openraft::error::{ClientWriteError, RaftError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct RaftRpc {
    raft: Raft,
    peers: Peers,
}

impl std::fmt::Debug for RaftRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftRpc").finish_non_exhaustive()
    }
}

impl RaftRpc {
    pub fn new(raft: Raft, peers: Peers) -> Self {
        RaftRpc { raft, peers }
    }

    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.peers.check_client(request)?;
        let Some(secret) = self.peers.secret() else {
            return Err(Status::unavailable(
                "this node has not joined a cluster yet",
            ));
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented {
            Some(p) if constant_time_eq(p.as_bytes(), secret.as_bytes()) => Ok(()),
            _ => Err(Status::unauthenticated("not a peer of this cluster")),
        }
    }
}

fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, Status> {
    serde_json::from_slice(payload)
        .map_err(|e| Status::invalid_argument(format!("bad payload: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(e.to_string()))
}

#[tonic::async_trait]
impl RaftService for RaftRpc {
    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.check(&request)?;
        let rpc = decode(&request.into_inner().payload)?;
        let result = self.raft.append_entries(rpc).await;
        Ok(Response::new(pb::AppendEntriesResponse {
            payload: encode(&result)?,
        }))
    }

    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check(&request)?;
        let rpc = decode(&request.into_inner().payload)?;
        let result = self.raft.vote(rpc).await;
        Ok(Response::new(pb::VoteResponse {
            payload: encode(&result)?,
        }))
    }

    async fn install_snapshot(
        &self,
        request: Request<pb::InstallSnapshotRequest>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        self.check(&request)?;
        let rpc = decode(&request.into_inner().payload)?;
        let result = self.raft.install_snapshot(rpc).await;
        Ok(Response::new(pb::InstallSnapshotResponse {
            payload: encode(&result)?,
        }))
    }

    async fn forward(
        &self,
        request: Request<pb::ForwardRequest>,
    ) -> Result<Response<pb::ForwardResponse>, Status> {
        self.check(&request)?;
        let reply = match decode::<Forwarded>(&request.into_inner().payload)? {
            Forwarded::Write(proposal) => match self.raft.client_write(proposal).await {
                Ok(written) => ForwardReply::Applied(written.data, written.log_id.index),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                    ForwardReply::NotLeader {
                        leader: to.leader_id.zip(to.leader_node.map(|n| n.addr)),
                    }
                }
                Err(e) => ForwardReply::Failed(e.to_string()),
            },
            Forwarded::ReadIndex => match self.raft.ensure_linearizable().await {
                Ok(read) => ForwardReply::ReadIndex(read.map_or(0, |id| id.index)),
                Err(e) => ForwardReply::Failed(e.to_string()),
            },
        };
        Ok(Response::new(pb::ForwardResponse {
            payload: encode(&reply)?,
        }))
    }

    async fn timeout_now(
        &self,
        request: Request<pb::TimeoutNowRequest>,
    ) -> Result<Response<pb::TimeoutNowResponse>, Status> {
        self.check(&request)?;
        let asked = request.into_inner();
        let metrics = self.raft.metrics().borrow().clone();
        // Only the leader this node follows, in the term it follows it, may hand over: a late or
        // foreign request must not unseat a healthy leader.
        if metrics.current_leader != Some(asked.leader_id) || metrics.current_term != asked.term {
            return Err(Status::failed_precondition(format!(
                "node {} leads in term {}, not node {} in term {}",
                metrics
                    .current_leader
                    .map_or("none".to_owned(), |l| l.to_string()),
                metrics.current_term,
                asked.leader_id,
                asked.term
            )));
        }
        if !metrics
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == metrics.id)
        {
            return Err(Status::failed_precondition(format!(
                "node {} is not a voter",
                metrics.id
            )));
        }
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        tracing::info!(
            from = asked.leader_id,
            term = asked.term,
            "starting an election: the leader is handing over"
        );
        Ok(Response::new(pb::TimeoutNowResponse {}))
    }
}
