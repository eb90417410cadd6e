//! openraft's network over tonic: each RPC is the openraft message as JSON in a `bytes` payload,
//! bounded by the deadline openraft gives, and passed through the peer filter. Appends (entries
//! and heartbeats) go over one long-lived stream per follower ([`AppendStream`]); votes and
//! snapshot chunks are calls of their own.

use super::{CommitHold, Peers, SharedFilter, deliver};
use futures::SinkExt;
use futures::channel::mpsc;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::raft_service_client::RaftServiceClient;
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
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};

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
            appends: None,
            unary_appends: false,
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
    /// The open append stream to the target; opened on the first append, and replaced after any
    /// append whose answer was not read off it (failed, timed out, or dropped by openraft's own
    /// deadline), so an answer on it always belongs to the request just sent.
    appends: Option<AppendStream>,
    /// The target does not know append streams (a node from before them): appends go as calls.
    unary_appends: bool,
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
    /// Sends one RPC: the filter first, then the exchange under openraft's deadline. Transport
    /// failures are `Unreachable` (openraft backs off); a remote Raft error comes back as such.
    async fn call<Req, Resp, E>(&mut self, rpc: Rpc, req: &Req, ttl: Duration) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        deliver(&*self.filter, self.me, self.target)
            .await
            .map_err(|e| self.unreachable(&e))?;
        let payload =
            serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let client = match rpc {
            Rpc::Snapshot => self.peers.snapshot_client(&self.node.addr),
            Rpc::Append | Rpc::Vote => self.peers.client(&self.node.addr),
        };
        let client = client.map_err(|e| {
            RPCError::Network(NetworkError::new(&std::io::Error::other(e.to_string())))
        })?;
        let bytes = match tokio::time::timeout(ttl, self.exchange(rpc, client, payload)).await {
            Err(elapsed) => {
                if !matches!(rpc, Rpc::Snapshot)
                    && self
                        .peers
                        .reset_if_stalled(self.target, &self.node.addr, self.stall)
                {
                    tracing::debug!(peer = self.target, "no answer for a while: reconnecting");
                }
                return Err(self.unreachable(&elapsed));
            }
            Ok(Err(status)) => return Err(self.unreachable(&status)),
            Ok(Ok(bytes)) => bytes,
        };
        // The reply is delayed (or cut) on its way back as well; only a reply that arrives counts
        // as an answer.
        deliver(&*self.filter, self.target, self.me)
            .await
            .map_err(|e| self.unreachable(&e))?;
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

    fn unreachable<E>(&self, e: &dyn std::fmt::Display) -> RPCError<NodeId, BasicNode, E>
    where
        E: std::error::Error,
    {
        let error = e.to_string();
        self.peers.note_failure(self.target, &error);
        RPCError::Unreachable(Unreachable::new(&std::io::Error::other(error)))
    }

    /// Puts `payload` to the target and waits for its answer.
    async fn exchange(
        &mut self,
        rpc: Rpc,
        mut client: RaftServiceClient<Channel>,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, Status> {
        match rpc {
            Rpc::Append => self.append(client, payload).await,
            Rpc::Vote => client
                .vote(self.peers.request(pb::VoteRequest { payload }))
                .await
                .map(|r| r.into_inner().payload),
            Rpc::Snapshot => client
                .install_snapshot(self.peers.request(pb::InstallSnapshotRequest { payload }))
                .await
                .map(|r| r.into_inner().payload),
        }
    }

    /// An append over the target's stream, opened first if there is none; as a call of its own
    /// to a target that has no streams.
    async fn append(
        &mut self,
        mut client: RaftServiceClient<Channel>,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, Status> {
        // An exchange that failed, timed out here, or was dropped by openraft's own deadline
        // left its answer unread: that stream's next answer would be the old request's.
        if self.appends.as_ref().is_some_and(|s| s.awaiting) {
            self.appends = None;
        }
        if self.appends.is_none() && !self.unary_appends {
            match AppendStream::open(&mut client, &self.peers).await {
                Ok(stream) => self.appends = Some(stream),
                Err(status) if status.code() == Code::Unimplemented => {
                    tracing::info!(
                        peer = self.target,
                        "the peer takes appends one call at a time (it runs an earlier version)"
                    );
                    self.unary_appends = true;
                }
                Err(status) => return Err(status),
            }
        }
        match &mut self.appends {
            Some(stream) => stream.exchange(payload).await,
            None => client
                .append_entries(self.peers.request(pb::AppendEntriesRequest { payload }))
                .await
                .map(|r| r.into_inner().payload),
        }
    }
}

/// One leader-to-follower stream of appends: a request out, then its answer back, one at a time
/// (openraft has at most one append in flight per follower).
struct AppendStream {
    requests: mpsc::Sender<pb::AppendEntriesRequest>,
    answers: Streaming<pb::AppendEntriesResponse>,
    /// A request was handed over and its answer not yet read: true while an exchange runs, and
    /// after one that was dropped midway.
    awaiting: bool,
}

impl AppendStream {
    async fn open(
        client: &mut RaftServiceClient<Channel>,
        peers: &Peers,
    ) -> Result<AppendStream, Status> {
        let (requests, outgoing) = mpsc::channel(1);
        let answers = client
            .append_entries_stream(peers.request(outgoing))
            .await?
            .into_inner();
        Ok(AppendStream {
            requests,
            answers,
            awaiting: false,
        })
    }

    async fn exchange(&mut self, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
        self.awaiting = true;
        self.requests
            .send(pb::AppendEntriesRequest { payload })
            .await
            .map_err(|_| Status::unavailable("the append stream to the peer closed"))?;
        let answer = match self.answers.message().await? {
            Some(answer) => answer.payload,
            None => return Err(Status::unavailable("the peer ended the append stream")),
        };
        self.awaiting = false;
        Ok(answer)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{OpenNetwork, PeerTransport};
    use futures::stream::{self, BoxStream, StreamExt};
    use gatehouse_proto::v1::raft_service_server::{RaftService, RaftServiceServer};
    use openraft::Vote;
    use openraft::testing::log_id;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tonic::{Request, Response};

    /// A follower that answers each append with the `prev_log_id` it was sent (as a partial
    /// success), so a leader can tell which request an answer belongs to.
    #[derive(Clone, Default)]
    struct Follower {
        /// Append streams asked for, whether opened or refused.
        streams: Arc<AtomicUsize>,
        /// Appends sent as calls of their own.
        calls: Arc<AtomicUsize>,
        /// Refuses streams as UNIMPLEMENTED, as a node from before them does.
        old: bool,
        /// The append with this previous index is answered only after `slow_for`.
        slow_at: Option<u64>,
        slow_for: Duration,
        /// Each stream ends after this many answers.
        answers_per_stream: Option<usize>,
    }

    impl Follower {
        async fn answer(&self, payload: &[u8]) -> Vec<u8> {
            let rpc: AppendEntriesRequest<TypeConfig> = serde_json::from_slice(payload).unwrap();
            let prev = rpc.prev_log_id.map(|id| id.index);
            if prev == self.slow_at {
                tokio::time::sleep(self.slow_for).await;
            }
            let answer: Result<_, RaftError<NodeId>> = Ok(
                AppendEntriesResponse::<NodeId>::PartialSuccess(rpc.prev_log_id),
            );
            serde_json::to_vec(&answer).unwrap()
        }
    }

    #[tonic::async_trait]
    impl RaftService for Follower {
        async fn append_entries(
            &self,
            request: Request<pb::AppendEntriesRequest>,
        ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let payload = self.answer(&request.into_inner().payload).await;
            Ok(Response::new(pb::AppendEntriesResponse { payload }))
        }

        type AppendEntriesStreamStream =
            BoxStream<'static, Result<pb::AppendEntriesResponse, Status>>;

        async fn append_entries_stream(
            &self,
            request: Request<Streaming<pb::AppendEntriesRequest>>,
        ) -> Result<Response<Self::AppendEntriesStreamStream>, Status> {
            self.streams.fetch_add(1, Ordering::SeqCst);
            if self.old {
                return Err(Status::unimplemented("no such method"));
            }
            let limit = self.answers_per_stream.unwrap_or(usize::MAX);
            let answers = stream::unfold(
                (self.clone(), request.into_inner()),
                |(follower, mut requests)| async move {
                    let request = requests.message().await.ok()??;
                    let payload = follower.answer(&request.payload).await;
                    Some((
                        Ok(pb::AppendEntriesResponse { payload }),
                        (follower, requests),
                    ))
                },
            )
            .take(limit);
            Ok(Response::new(answers.boxed()))
        }

        async fn vote(
            &self,
            _: Request<pb::VoteRequest>,
        ) -> Result<Response<pb::VoteResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }

        async fn install_snapshot(
            &self,
            _: Request<pb::InstallSnapshotRequest>,
        ) -> Result<Response<pb::InstallSnapshotResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }

        async fn forward(
            &self,
            _: Request<pb::ForwardRequest>,
        ) -> Result<Response<pb::ForwardResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }

        async fn timeout_now(
            &self,
            _: Request<pb::TimeoutNowRequest>,
        ) -> Result<Response<pb::TimeoutNowResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }

        async fn pre_vote(
            &self,
            _: Request<pb::PreVoteRequest>,
        ) -> Result<Response<pb::PreVoteResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }
    }

    /// A leader's network to `follower`, served on a loopback port, and the log directory its
    /// commit hold reads.
    async fn leader_to(follower: Follower) -> (Network, tempfile::TempDir) {
        let incoming =
            tonic::transport::server::TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = incoming.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RaftServiceServer::new(follower))
                .serve_with_incoming(incoming),
        );
        let dir = tempfile::tempdir().unwrap();
        let (log, _state_machine) = gatehouse_raft_store::open(dir.path()).unwrap();
        let peers = Peers::new(Some("secret".into()), PeerTransport::Plain);
        let mut factory = NetworkFactory::new(
            1,
            peers,
            Arc::new(OpenNetwork),
            Duration::from_secs(10),
            CommitHold::new(log.synced()),
        );
        (factory.new_client(2, &BasicNode { addr }).await, dir)
    }

    /// An append whose previous entry is at `prev`, and the previous index its answer names.
    async fn append(
        network: &mut Network,
        prev: u64,
        ttl: Duration,
    ) -> Result<Option<u64>, String> {
        let rpc = AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: Some(log_id(1, 1, prev)),
            leader_commit: None,
            entries: vec![],
        };
        match network.append_entries(rpc, RPCOption::new(ttl)).await {
            Ok(AppendEntriesResponse::PartialSuccess(matched)) => Ok(matched.map(|id| id.index)),
            Ok(other) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    const TTL: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn appends_share_one_stream_and_each_gets_its_own_answer() {
        let follower = Follower::default();
        let (mut network, _dir) = leader_to(follower.clone()).await;
        for prev in 1..=20 {
            assert_eq!(append(&mut network, prev, TTL).await, Ok(Some(prev)));
        }
        assert_eq!(follower.streams.load(Ordering::SeqCst), 1);
        assert_eq!(follower.calls.load(Ordering::SeqCst), 0);
    }

    /// How an append is given up before its answer comes.
    enum CutOff {
        /// The network's own timeout: the deadline openraft passes in.
        Deadline,
        /// openraft's timeout around the call, which drops it midway.
        Dropped,
    }

    /// Append 2 is answered 600 ms late and given up on after 100 ms; the appends after it must
    /// each get their own answer, whether they go out before the late one arrives or after.
    async fn a_late_answer_is_left_behind(cut_off: CutOff) {
        let follower = Follower {
            slow_at: Some(2),
            slow_for: Duration::from_millis(600),
            ..Follower::default()
        };
        let (mut network, _dir) = leader_to(follower.clone()).await;
        assert_eq!(append(&mut network, 1, TTL).await, Ok(Some(1)));
        let short = Duration::from_millis(100);
        match cut_off {
            CutOff::Deadline => {
                let timed_out = append(&mut network, 2, short).await;
                assert!(timed_out.is_err(), "{timed_out:?}");
            }
            CutOff::Dropped => {
                let dropped = tokio::time::timeout(short, append(&mut network, 2, TTL)).await;
                assert!(dropped.is_err(), "{dropped:?}");
            }
        }
        // The answer to 2 arrives while 3 waits.
        assert_eq!(append(&mut network, 3, TTL).await, Ok(Some(3)));
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(append(&mut network, 4, TTL).await, Ok(Some(4)));
        assert_eq!(
            follower.streams.load(Ordering::SeqCst),
            2,
            "the stream that held the unanswered append was not replaced"
        );
    }

    #[tokio::test]
    async fn the_late_answer_of_an_append_that_timed_out_is_not_taken_for_the_next() {
        a_late_answer_is_left_behind(CutOff::Deadline).await;
    }

    #[tokio::test]
    async fn the_late_answer_of_an_append_openraft_dropped_is_not_taken_for_the_next() {
        a_late_answer_is_left_behind(CutOff::Dropped).await;
    }

    #[tokio::test]
    async fn a_stream_the_follower_ended_is_opened_anew() {
        let follower = Follower {
            answers_per_stream: Some(3),
            ..Follower::default()
        };
        let (mut network, _dir) = leader_to(follower.clone()).await;
        for prev in 1..=3 {
            assert_eq!(append(&mut network, prev, TTL).await, Ok(Some(prev)));
        }
        let ended = append(&mut network, 4, TTL).await;
        assert!(ended.is_err(), "{ended:?}");
        assert_eq!(append(&mut network, 4, TTL).await, Ok(Some(4)));
        assert_eq!(follower.streams.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_follower_without_streams_gets_its_appends_as_calls() {
        let follower = Follower {
            old: true,
            ..Follower::default()
        };
        let (mut network, _dir) = leader_to(follower.clone()).await;
        for prev in 1..=5 {
            assert_eq!(append(&mut network, prev, TTL).await, Ok(Some(prev)));
        }
        assert_eq!(
            follower.streams.load(Ordering::SeqCst),
            1,
            "asked again for a stream the follower does not have"
        );
        assert_eq!(follower.calls.load(Ordering::SeqCst), 5);
    }
}
