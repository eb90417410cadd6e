//! `ClusterService`: status and membership for operators, and the door a new node joins by.
//! Membership changes run on the leader, one at a time; a node that is not the leader passes
//! the call on, with the caller's credentials.

use super::status::{self, to_status};
use gatehouse_cluster::cluster::Cluster;
use gatehouse_gateway::auth::{Authenticator, Caller, authenticate_current, bearer};
use gatehouse_gateway::pipeline::{ErrorCode, GatewayError};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::cluster_service_server::ClusterService;
use gatehouse_raft_store::NodeId;
use gatehouse_registry::resource::Role;
use gatehouse_registry::{CallState, Command};
use openraft::{BasicNode, ChangeMembers};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// How long a membership change may take to commit before the caller hears about it.
const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(30);
/// Longest a voter being removed is waited for to hand its tenants over and finish its running
/// executions; after that it is removed anyway.
const DRAIN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Membership {
    cluster: Cluster,
    auth: Authenticator,
    /// One membership change at a time.
    changing: Arc<tokio::sync::Mutex<()>>,
    /// A peer that answered within this window counts as reachable.
    reachable_window: Duration,
}

/// Where this node believes the cluster stands.
struct View {
    leader: Option<NodeId>,
    voters: BTreeSet<NodeId>,
    nodes: BTreeMap<NodeId, BasicNode>,
}

impl Membership {
    pub fn new(cluster: Cluster, auth: Authenticator, reachable_window: Duration) -> Self {
        Membership {
            cluster,
            auth,
            changing: Arc::default(),
            reachable_window,
        }
    }

    async fn caller<T>(&self, request: &Request<T>) -> Result<Caller, GatewayError> {
        let metadata = request.metadata();
        let caller = authenticate_current(&self.cluster, |registry| {
            self.auth.authenticate_grpc(registry, metadata)
        });
        Ok(caller.await?)
    }

    /// An operator's request: `Ok(None)` when this node leads and answers it, otherwise a
    /// client for the leader to pass it on to.
    async fn route<T>(&self, request: &Request<T>) -> Result<Option<Leader>, GatewayError> {
        self.caller(request)
            .await?
            .require_cluster(&[Role::Admin, Role::Operator])?;
        Ok(self.leader_client().await?.map(|(client, _)| client))
    }

    fn view(&self) -> View {
        let metrics = self.cluster.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        View {
            leader: metrics.current_leader,
            voters: membership.voter_ids().collect(),
            nodes: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
        }
    }

    /// `Ok(None)` when this node leads; otherwise a client for the leader, carrying the
    /// caller's own key.
    async fn leader_client(&self) -> Result<Option<(Leader, NodeId)>, GatewayError> {
        let view = self.view();
        match view.leader {
            Some(leader) if leader == self.cluster.id => Ok(None),
            Some(leader) => {
                let addr = &view
                    .nodes
                    .get(&leader)
                    .ok_or_else(|| GatewayError::unavailable("the leader's address is unknown"))?
                    .addr;
                let unavailable = |e: tonic::transport::Error| {
                    GatewayError::unavailable(format!("leader {leader} at {addr}: {e}"))
                };
                // The endpoint bounds connecting: a leader whose machine vanished answers no SYN,
                // and the request after it went must not hang on TCP's own timeout.
                let channel = self
                    .cluster
                    .peers
                    .endpoint(addr)
                    .map_err(unavailable)?
                    .connect()
                    .await
                    .map_err(unavailable)?;
                let client = ClusterServiceClient::new(channel);
                Ok(Some((client, leader)))
            }
            None => Err(GatewayError::unavailable(
                "no leader: the cluster has no quorum right now",
            )),
        }
    }

    fn reachable(&self, node: NodeId) -> bool {
        node == self.cluster.id
            || self
                .cluster
                .peers
                .answered_within(node, self.reachable_window)
    }

    /// Refuses a voter set in which fewer than a majority answer. A node that has only just
    /// joined gets one reachability window to answer first.
    async fn check_quorum(&self, voters: &BTreeSet<NodeId>) -> Result<(), GatewayError> {
        let majority = voters.len() / 2 + 1;
        let up = || voters.iter().filter(|v| self.reachable(**v)).count();
        let deadline = tokio::time::Instant::now() + self.reachable_window;
        while up() < majority && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let up = up();
        if up < majority {
            return Err(refused(format!(
                "refused: only {up} of the resulting {} voters {voters:?} are reachable, and a majority needs {majority}",
                voters.len()
            )));
        }
        Ok(())
    }

    fn answer(&self, log_index: u64) -> (u64, Vec<u64>, Vec<u64>) {
        let view = self.view();
        let learners = view
            .nodes
            .keys()
            .filter(|n| !view.voters.contains(n))
            .copied()
            .collect();
        (log_index, view.voters.into_iter().collect(), learners)
    }

    async fn add_learner_here(&self, node: NodeId, addr: String) -> Result<u64, GatewayError> {
        if addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(GatewayError::invalid_request(format!(
                "{addr:?} is not host:port"
            )));
        }
        let _one = self.changing.lock().await;
        self.cluster
            .propose(Command::AdmitNode {
                node,
                addr: addr.clone(),
            })
            .await?;
        let written = self
            .cluster
            .raft
            .add_learner(node, BasicNode { addr }, false)
            .await
            .map_err(|e| refused(e.to_string()))?;
        tracing::info!(
            node,
            index = written.log_id.index,
            "node {node} is a learner now and catches up from the leader's log or snapshot"
        );
        Ok(written.log_id.index)
    }

    /// Waits, at most [`DRAIN`], until `node` is home to no tenant and runs no claimed call: a
    /// node removed before that would take the outcomes of its running executions with it, and
    /// the new homes would have to call them unknown.
    async fn drain(&self, node: NodeId) {
        let deadline = tokio::time::Instant::now() + DRAIN;
        loop {
            let (homes, running) = {
                let registry = self.cluster.registry.read();
                let homes = registry
                    .tenants()
                    .filter(|t| registry.placement(t).is_some_and(|p| p.home == node))
                    .count();
                let running = registry
                    .unfinished_calls()
                    .filter(|c| c.state == CallState::Executing)
                    .filter(|c| c.claim.as_ref().is_some_and(|claim| claim.node == node))
                    .count();
                (homes, running)
            };
            if homes == 0 && running == 0 {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    node,
                    homes,
                    running,
                    "removing node {node} before it drained: its running calls may end outcome_unknown"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Commits a membership change; `retain` keeps removed voters as learners.
    async fn change(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
        retain: bool,
    ) -> Result<u64, GatewayError> {
        let changing = self.cluster.raft.change_membership(change, retain);
        let written = tokio::time::timeout(MEMBERSHIP_DEADLINE, changing)
            .await
            .map_err(|_| {
                GatewayError::new(
                    ErrorCode::DeadlineExceeded,
                    format!(
                        "the membership change was not committed within {MEMBERSHIP_DEADLINE:?}; it may still complete"
                    ),
                    "read the cluster's status before trying again",
                )
            })?
            .map_err(|e| refused(e.to_string()))?;
        Ok(written.log_id.index)
    }
}

/// A client of the leader's `ClusterService`.
type Leader = ClusterServiceClient<tonic::transport::Channel>;

/// A membership change the cluster cannot take as it stands.
fn refused(message: String) -> GatewayError {
    GatewayError::new(
        ErrorCode::Conflict,
        message,
        "read the cluster's status, and change one node at a time",
    )
}

/// Carries the caller's bearer key on a call passed to the leader.
fn pass_on<T>(metadata: &tonic::metadata::MetadataMap, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(key) = bearer(metadata)
        && let Ok(value) = format!("Bearer {key}").parse()
    {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// The wire side of the service: each method's error goes through the one map to a status; a
/// request passed on to the leader comes back with the leader's answer as it is.
#[tonic::async_trait]
impl ClusterService for Membership {
    async fn status(
        &self,
        request: Request<pb::ClusterStatusRequest>,
    ) -> Result<Response<pb::ClusterStatusResponse>, Status> {
        self.caller(&request)
            .await
            .and_then(|caller| caller.require_cluster(&[Role::Admin, Role::Operator]))
            .map_err(to_status)?;
        if let Ok(Some((mut leader, _))) = self.leader_client().await
            && let Ok(answer) = leader
                .status(pass_on(request.metadata(), pb::ClusterStatusRequest {}))
                .await
        {
            // The leader knows how far it replicated to this node, not how far this node has
            // applied: a node asked about itself says what it has applied.
            let own = self.cluster.raft.metrics().borrow().last_applied;
            let mut answer = answer.into_inner();
            if let Some(me) = answer
                .nodes
                .iter_mut()
                .find(|n| n.node_id == self.cluster.id)
            {
                me.applied_index = own.map_or(0, |l| l.index);
            }
            return Ok(Response::new(answer));
        }
        let metrics = self.cluster.raft.metrics().borrow().clone();
        let view = self.view();
        let last_log = metrics.last_log_index.unwrap_or(0);
        let matched: BTreeMap<NodeId, u64> = metrics
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .map(|(id, log)| (*id, log.map_or(0, |l| l.index)))
                    .collect()
            })
            .unwrap_or_default();
        let (tenants, homed) = {
            let registry = self.cluster.registry.read();
            super::placement::tenants(&registry)
        };
        let nodes = view
            .nodes
            .iter()
            .map(|(id, node)| {
                let applied = if *id == self.cluster.id {
                    metrics.last_applied.map_or(0, |l| l.index)
                } else {
                    matched.get(id).copied().unwrap_or(0)
                };
                pb::NodeStatus {
                    node_id: *id,
                    grpc_addr: node.addr.clone(),
                    applied_index: applied,
                    lag: last_log.saturating_sub(applied),
                    reachable: self.reachable(*id),
                    tenants_homed: homed.get(id).copied().unwrap_or(0),
                }
            })
            .collect();
        let (_, voters, learners) = self.answer(0);
        Ok(Response::new(pb::ClusterStatusResponse {
            leader_id: metrics.current_leader,
            term: metrics.current_term,
            voters,
            learners,
            nodes,
            tenants,
        }))
    }

    async fn add_learner(
        &self,
        request: Request<pb::AddLearnerRequest>,
    ) -> Result<Response<pb::AddLearnerResponse>, Status> {
        if let Some(mut leader) = self.route(&request).await.map_err(to_status)? {
            let (metadata, _, message) = request.into_parts();
            return leader.add_learner(pass_on(&metadata, message)).await;
        }
        status::answer(self.add_learner_as_leader(request.into_inner()).await)
    }

    async fn promote(
        &self,
        request: Request<pb::PromoteRequest>,
    ) -> Result<Response<pb::PromoteResponse>, Status> {
        if let Some(mut leader) = self.route(&request).await.map_err(to_status)? {
            let (metadata, _, message) = request.into_parts();
            return leader.promote(pass_on(&metadata, message)).await;
        }
        status::answer(self.promote_as_leader(request.into_inner().node_id).await)
    }

    async fn remove(
        &self,
        request: Request<pb::RemoveRequest>,
    ) -> Result<Response<pb::RemoveResponse>, Status> {
        if let Some(mut leader) = self.route(&request).await.map_err(to_status)? {
            let (metadata, _, message) = request.into_parts();
            return leader.remove(pass_on(&metadata, message)).await;
        }
        status::answer(self.remove_as_leader(request.into_inner().node_id).await)
    }

    async fn join(
        &self,
        request: Request<pb::JoinRequest>,
    ) -> Result<Response<pb::JoinResponse>, Status> {
        // The answer carries the peer secret: under peer-mtls only a node holding a certificate
        // from the cluster's CA may ask (the TLS layer's refusal passes as it is).
        self.cluster.peers.check_client(&request)?;
        if let Some(mut leader) = self.route(&request).await.map_err(to_status)? {
            let (metadata, _, message) = request.into_parts();
            return leader.join(pass_on(&metadata, message)).await;
        }
        status::answer(self.join_as_leader(request.into_inner()).await)
    }
}

/// What the leader does with the requests it does not pass on.
impl Membership {
    async fn add_learner_as_leader(
        &self,
        message: pb::AddLearnerRequest,
    ) -> Result<pb::AddLearnerResponse, GatewayError> {
        let index = self
            .add_learner_here(message.node_id, message.grpc_addr)
            .await?;
        let (log_index, voters, learners) = self.answer(index);
        Ok(pb::AddLearnerResponse {
            log_index,
            voters,
            learners,
        })
    }

    async fn promote_as_leader(&self, node: NodeId) -> Result<pb::PromoteResponse, GatewayError> {
        let _one = self.changing.lock().await;
        let view = self.view();
        if !view.nodes.contains_key(&node) {
            return Err(GatewayError::not_found(format!(
                "node {node} is not a member: add it as a learner first"
            )));
        }
        if view.voters.contains(&node) {
            return Err(GatewayError::already_exists(format!(
                "node {node} is already a voter"
            )));
        }
        let mut voters = view.voters.clone();
        voters.insert(node);
        self.check_quorum(&voters).await?;
        let index = self
            .change(ChangeMembers::AddVoterIds(BTreeSet::from([node])), false)
            .await?;
        let (log_index, voters, learners) = self.answer(index);
        Ok(pb::PromoteResponse {
            log_index,
            voters,
            learners,
        })
    }

    async fn remove_as_leader(&self, node: NodeId) -> Result<pb::RemoveResponse, GatewayError> {
        let _one = self.changing.lock().await;
        let view = self.view();
        if !view.nodes.contains_key(&node) {
            return Err(GatewayError::not_found(format!(
                "node {node} is not a member"
            )));
        }
        let index = if view.voters.contains(&node) {
            let mut voters = view.voters.clone();
            voters.remove(&node);
            if voters.is_empty() {
                return Err(refused("refused: that would leave no voter".to_owned()));
            }
            self.check_quorum(&voters).await?;
            if node == self.cluster.id {
                // This leader stops leading once it is no voter, so it could not take the
                // second step: it leaves at once, as a stopping leader hands over.
                self.change(ChangeMembers::RemoveVoters(BTreeSet::from([node])), false)
                    .await?
            } else {
                // Kept as a learner for now: it still reports what its running executions did
                // while its tenants move away (a planned move, see `placement::next_step`).
                self.change(ChangeMembers::RemoveVoters(BTreeSet::from([node])), true)
                    .await?;
                self.drain(node).await;
                self.change(ChangeMembers::RemoveNodes(BTreeSet::from([node])), false)
                    .await?
            }
        } else {
            self.change(ChangeMembers::RemoveNodes(BTreeSet::from([node])), false)
                .await?
        };
        let (log_index, voters, learners) = self.answer(index);
        Ok(pb::RemoveResponse {
            log_index,
            voters,
            learners,
        })
    }

    async fn join_as_leader(
        &self,
        message: pb::JoinRequest,
    ) -> Result<pb::JoinResponse, GatewayError> {
        let secret = self
            .cluster
            .peers
            .secret()
            .ok_or_else(|| GatewayError::unavailable("this node holds no peer secret"))?;
        let index = self
            .add_learner_here(message.node_id, message.grpc_addr)
            .await?;
        let (log_index, voters, learners) = self.answer(index);
        Ok(pb::JoinResponse {
            leader_id: self.cluster.id,
            log_index,
            voters,
            learners,
            peer_secret: secret,
        })
    }
}
