//! openraft's network over tonic: each RPC is the openraft message as JSON in a `bytes` payload,
//! bounded by the deadline openraft gives, and passed through the peer filter.

use super::{CommitHold, Peers, SharedFilter, deliver};
use gatehouse_proto::v1 as pb;
use gatehouse_raft_store::{NodeId, TypeConfig};
use openraft::BasicNode;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

#[derive(Clone)]
pub struct NetworkFactory {
    me: NodeId,
    peers: Peers,
    filter: SharedFilter,
    stall: Duration,
    hold: CommitHold,
}

impl std::fmt::Debug for NetworkFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkFactory")
            .field("me", &self.me)
            .finish()
    }
}

impl NetworkFactory {
    /// `stall`: how long a peer may answer nothing before a call that times out resets the
    /// connection to it ([`Peers::reset_if_stalled`]); the leader lease is a good length.
    /// `hold`: the commit index sent to followers never passes this node's synced log.
    pub fn new(
        me: NodeId,
        peers: Peers,
        filter: SharedFilter,
        stall: Duration,
        hold: CommitHold,
    ) -> Self {
        NetworkFactory {
            me,
            peers,
            filter,
            stall,
            hold,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Network;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Network {
        Network {
            me: self.me,
            target,
            node: node.clone(),
            peers: self.peers.clone(),
            filter: self.filter.clone(),
            stall: self.stall,
            hold: self.hold.clone(),
        }
    }
}

pub struct Network {
    me: NodeId,
    target: NodeId,
    node: BasicNode,
    peers: Peers,
    filter: SharedFilter,
    stall: Duration,
    hold: CommitHold,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("me", &self.me)
            .field("target", &self.target)
            .finish()
    }
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

#[derive(Clone, Copy)]
enum Rpc {
    Append,
    Vote,
    Snapshot,
}

impl Network {
    /// Sends one RPC: the filter first, then the call under openraft's deadline. Transport
    /// failures are `Unreachable` (openraft backs off); a remote Raft error comes back as such.
    async fn call<Req, Resp, E>(&self, rpc: Rpc, req: &Req, ttl: Duration) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let unreachable = |e: &dyn std::fmt::Display| {
            let error = e.to_string();
            self.peers.note_failure(self.target, &error);
            RPCError::Unreachable(Unreachable::new(&std::io::Error::other(error)))
        };
        deliver(&*self.filter, self.me, self.target)
            .await
            .map_err(|e| unreachable(&e))?;
        let payload =
            serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let client = match rpc {
            Rpc::Snapshot => self.peers.snapshot_client(&self.node.addr),
            Rpc::Append | Rpc::Vote => self.peers.client(&self.node.addr),
        };
        let mut client = client.map_err(|e| {
            RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
        })?;
        let reply = async {
            match rpc {
                Rpc::Append => client
                    .append_entries(self.peers.request(pb::AppendEntriesRequest { payload }))
                    .await
                    .map(|r| r.into_inner().payload),
                Rpc::Vote => client
                    .vote(self.peers.request(pb::VoteRequest { payload }))
                    .await
                    .map(|r| r.into_inner().payload),
                Rpc::Snapshot => client
                    .install_snapshot(self.peers.request(pb::InstallSnapshotRequest { payload }))
                    .await
                    .map(|r| r.into_inner().payload),
            }
        };
        let bytes = match tokio::time::timeout(ttl, reply).await {
            Err(elapsed) => {
                if !matches!(rpc, Rpc::Snapshot)
                    && self
                        .peers
                        .reset_if_stalled(self.target, &self.node.addr, self.stall)
                {
                    tracing::debug!(peer = self.target, "no answer for a while: reconnecting");
                }
                return Err(unreachable(&elapsed));
            }
            Ok(Err(status)) => return Err(unreachable(&status)),
            Ok(Ok(bytes)) => bytes,
        };
        // The reply is delayed (or cut) on its way back as well; only a reply that arrives counts
        // as an answer.
        deliver(&*self.filter, self.target, self.me)
            .await
            .map_err(|e| unreachable(&e))?;
        self.peers.note_answer(self.target);
        let result: Result<Resp, RaftError<NodeId, E>> =
            serde_json::from_slice(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for Network {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        rpc.leader_commit = self.hold.clamp(rpc.leader_commit);
        self.call(Rpc::Append, &rpc, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(Rpc::Snapshot, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(Rpc::Vote, &rpc, option.hard_ttl()).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        // Quick first retries after a blip, then every half second.
        let steps = [50, 100, 200, 400]
            .into_iter()
            .chain(std::iter::repeat(500));
        openraft::network::Backoff::new(steps.map(Duration::from_millis))
    }
}
