//! `RaftService`: the internal RPCs between nodes. Only a caller holding the cluster's peer
//! secret gets in (and, under `peer-mtls`, only over a connection that presented a client
//! certificate from the cluster's CA); clients never talk to it.

use super::status::{answer, to_status};
use futures::stream::{self, BoxStream, StreamExt};
use gatehouse_cluster::elections::{self, PreVote};
use gatehouse_cluster::net::{ForwardReply, Forwarded, NOT_JOINED, Peers};
use gatehouse_gateway::auth::constant_time_eq;
use gatehouse_gateway::pipeline::{ErrorCode, GatewayError};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::raft_service_server::RaftService;
use gatehouse_raft_store::{LogTail, Raft};
use openraft::error::{ClientWriteError, RaftError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tonic::{Request, Response, Status, Streaming};

#[derive(Clone)]
pub struct RaftRpc {
    raft: Raft,
    peers: Peers,
    log_tail: LogTail,
    /// Turns true when the node stops: append streams end then, or the listener's graceful
    /// shutdown would wait on a leader's stream that never ends.
    stopped: watch::Receiver<bool>,
}

impl std::fmt::Debug for RaftRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftRpc").finish_non_exhaustive()
    }
}

impl RaftRpc {
    pub fn new(
        raft: Raft,
        peers: Peers,
        log_tail: LogTail,
        stopped: watch::Receiver<bool>,
    ) -> Self {
        RaftRpc {
            raft,
            peers,
            log_tail,
            stopped,
        }
    }

    /// Lets a peer in: the TLS layer's refusal of a connection without a client certificate
    /// passes as it is; the peer secret is checked here.
    fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.peers.check_client(request)?;
        self.check_secret(request).map_err(to_status)
    }

    fn check_secret<T>(&self, request: &Request<T>) -> Result<(), GatewayError> {
        let Some(secret) = self.peers.secret() else {
            return Err(GatewayError::unavailable(NOT_JOINED));
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented {
            Some(p) if constant_time_eq(p.as_bytes(), secret.as_bytes()) => Ok(()),
            _ => Err(GatewayError::unauthenticated("not a peer of this cluster")),
        }
    }
}

fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, GatewayError> {
    serde_json::from_slice(payload)
        .map_err(|e| GatewayError::invalid_request(format!("bad payload: {e}")))
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, GatewayError> {
    serde_json::to_vec(value).map_err(|e| GatewayError::internal(e.to_string()))
}

/// The wire side of the service: each method's error goes through the one map to a status.
#[tonic::async_trait]
impl RaftService for RaftRpc {
    async fn append_entries(
        &self,
        request: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        self.check(&request)?;
        answer(self.on_append_entries(request.into_inner()).await)
    }

    type AppendEntriesStreamStream = BoxStream<'static, Result<pb::AppendEntriesResponse, Status>>;

    /// Answers each request before reading the next, so the answers come in the requests'
    /// order. The stream ends when the leader closes it, after the first request that fails, or
    /// when this node stops.
    async fn append_entries_stream(
        &self,
        request: Request<Streaming<pb::AppendEntriesRequest>>,
    ) -> Result<Response<Self::AppendEntriesStreamStream>, Status> {
        self.check(&request)?;
        let answers = stream::unfold(
            Some((self.clone(), request.into_inner())),
            |open| async move {
                let (rpc, mut requests) = open?;
                // A broken stream from the leader ends this one; the leader opens another.
                let request = requests.message().await.ok()??;
                match answer(rpc.on_append_entries(request).await) {
                    Ok(response) => Some((Ok(response.into_inner()), Some((rpc, requests)))),
                    Err(status) => Some((Err(status), None)),
                }
            },
        );
        let mut stopped = self.stopped.clone();
        let stopping = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        Ok(Response::new(answers.take_until(stopping).boxed()))
    }

    async fn vote(
        &self,
        request: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        self.check(&request)?;
        answer(self.on_vote(request.into_inner()).await)
    }

    async fn install_snapshot(
        &self,
        request: Request<pb::InstallSnapshotRequest>,
    ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
        self.check(&request)?;
        answer(self.on_install_snapshot(request.into_inner()).await)
    }

    async fn forward(
        &self,
        request: Request<pb::ForwardRequest>,
    ) -> Result<Response<pb::ForwardResponse>, Status> {
        self.check(&request)?;
        answer(self.on_forward(request.into_inner()).await)
    }

    async fn timeout_now(
        &self,
        request: Request<pb::TimeoutNowRequest>,
    ) -> Result<Response<pb::TimeoutNowResponse>, Status> {
        self.check(&request)?;
        answer(self.on_timeout_now(request.into_inner()).await)
    }

    async fn pre_vote(
        &self,
        request: Request<pb::PreVoteRequest>,
    ) -> Result<Response<pb::PreVoteResponse>, Status> {
        self.check(&request)?;
        answer(self.on_pre_vote(request.into_inner()).await)
    }
}

/// What this node does on a peer's RPC, once the peer is let in.
impl RaftRpc {
    async fn on_append_entries(
        &self,
        request: pb::AppendEntriesRequest,
    ) -> Result<pb::AppendEntriesResponse, GatewayError> {
        let rpc = decode(&request.payload)?;
        let result = self.raft.append_entries(rpc).await;
        Ok(pb::AppendEntriesResponse {
            payload: encode(&result)?,
        })
    }

    async fn on_vote(&self, request: pb::VoteRequest) -> Result<pb::VoteResponse, GatewayError> {
        let rpc = decode(&request.payload)?;
        let result = self.raft.vote(rpc).await;
        Ok(pb::VoteResponse {
            payload: encode(&result)?,
        })
    }

    async fn on_install_snapshot(
        &self,
        request: pb::InstallSnapshotRequest,
    ) -> Result<pb::InstallSnapshotResponse, GatewayError> {
        let rpc = decode(&request.payload)?;
        let result = self.raft.install_snapshot(rpc).await;
        Ok(pb::InstallSnapshotResponse {
            payload: encode(&result)?,
        })
    }

    async fn on_pre_vote(
        &self,
        request: pb::PreVoteRequest,
    ) -> Result<pb::PreVoteResponse, GatewayError> {
        let asked: PreVote = decode(&request.payload)?;
        let reply = elections::answer(&self.raft, &self.log_tail, &asked).await;
        Ok(pb::PreVoteResponse {
            payload: encode(&reply)?,
        })
    }

    async fn on_forward(
        &self,
        request: pb::ForwardRequest,
    ) -> Result<pb::ForwardResponse, GatewayError> {
        let reply = match decode::<Forwarded>(&request.payload)? {
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
        Ok(pb::ForwardResponse {
            payload: encode(&reply)?,
        })
    }

    async fn on_timeout_now(
        &self,
        asked: pb::TimeoutNowRequest,
    ) -> Result<pb::TimeoutNowResponse, GatewayError> {
        let metrics = self.raft.metrics().borrow().clone();
        // Only the leader this node follows, in the term it follows it, may hand over: a late or
        // foreign request must not unseat a healthy leader.
        if metrics.current_leader != Some(asked.leader_id) || metrics.current_term != asked.term {
            return Err(not_now(format!(
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
            return Err(not_now(format!("node {} is not a voter", metrics.id)));
        }
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|e| GatewayError::unavailable(e.to_string()))?;
        tracing::info!(
            from = asked.leader_id,
            term = asked.term,
            "starting an election: the leader is handing over"
        );
        Ok(pb::TimeoutNowResponse {})
    }
}

/// A hand-over this node will not start as things stand.
fn not_now(message: String) -> GatewayError {
    GatewayError::new(
        ErrorCode::Conflict,
        message,
        "the leader reads the cluster again and picks a successor",
    )
}
