//! This node's handle on the cluster: propose a command from any node (followers forward to the
//! leader, retrying through leader changes under the same request id), and linearizable reads.

use crate::gather::{GATHER, Gather};
use crate::grants::Grants;
use crate::net::{ForwardReply, Forwarded, Peers, SharedFilter, deliver};
use futures::future::BoxFuture;
use gatehouse_actors::NewTenantPlacer;
use gatehouse_proto::v1 as pb;
use gatehouse_raft_store::{ApplyResult, NodeId, Raft, SharedRegistry};
use gatehouse_registry::{ApplyError, Command, Proposal, Resource, Response};
use openraft::error::{ClientWriteError, RaftError};
use std::collections::HashSet;
use std::io;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, watch};

/// How long a write keeps trying through elections and forwarding failures.
const WRITE_DEADLINE: Duration = Duration::from_secs(15);
/// How long a read that found nothing may spend catching up ([`Cluster::catch_up`]) before it
/// answers that it could not.
pub const CATCH_UP: Duration = Duration::from_secs(3);
/// Longest a forwarded request waits for a leader that is still the leader as far as this node
/// knows; one that stops being it is given up on at once ([`Cluster::forward`]).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, thiserror::Error)]
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
    /// Where proposals queue to be written together; `None` writes each on its own.
    batcher: Option<mpsc::Sender<Queued>>,
    /// What this node's operator lets tenants' upstreams use; puts are checked against it.
    grants: Arc<Grants>,
    /// The catch-ups of lookups anyone can trigger, taken in turn.
    shared_catch_ups: Arc<SharedCatchUps>,
    /// While this node leads: where the batcher places the tenants a batch creates.
    placer: Arc<RwLock<Option<NewTenantPlacer>>>,
}

/// [`Cluster::catch_up_shared`]'s turns: how many catch-ups started, and the last one's result.
#[derive(Debug, Default)]
struct SharedCatchUps {
    started: std::sync::atomic::AtomicU64,
    last: tokio::sync::Mutex<Option<(u64, Result<(), String>)>>,
}

/// Most proposals one log entry carries.
const MAX_BATCH: usize = 256;

type Written = Result<(ApplyResult, u64), WriteError>;

/// A disk sync that must finish before a proposal is answered, run beside its write
/// ([`Cluster::propose_flushed`]): an admin change's audit flush, whose `requested` record must
/// be on disk when the change is answered.
pub type Flush = Arc<dyn Fn() -> BoxFuture<'static, io::Result<()>> + Send + Sync>;

/// A flush a proposal waits on, and where to say how it went.
type Flushed = (Flush, oneshot::Sender<io::Result<()>>);

/// A proposal waiting for the batcher, with where its answer goes and the flush it waits on.
struct Queued {
    proposal: Proposal,
    reply: oneshot::Sender<Written>,
    flushed: Option<Flushed>,
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
    pub fn new(
        id: NodeId,
        raft: Raft,
        registry: SharedRegistry,
        applied: watch::Receiver<u64>,
        peers: Peers,
        filter: SharedFilter,
    ) -> Self {
        Cluster {
            id,
            raft,
            registry,
            applied,
            peers,
            filter,
            batcher: None,
            grants: Arc::default(),
            shared_catch_ups: Arc::default(),
            placer: Arc::default(),
        }
    }

    /// Checks every put proposed through this handle against `grants` (none by default: no
    /// credential and no built-in tool may be named).
    pub fn with_grants(mut self, grants: Arc<Grants>) -> Self {
        self.grants = grants;
        self
    }

    pub fn grants(&self) -> &Arc<Grants> {
        &self.grants
    }

    /// Starts the batcher: from now on concurrent proposals through this handle (and its
    /// clones) share log entries. It stops when the last handle is dropped.
    pub fn with_batching(mut self) -> Self {
        let (queue, queued) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(batch_writes(self.clone(), queued));
        self.batcher = Some(queue);
        self
    }

    /// From now on the batcher writes `placer`'s step for each tenant a batch creates in the
    /// batch's own log entry, after the proposals (`None`: no more). The leader's loop sets it
    /// while this node leads (`gatehouse_actors::ClusterPort::place_new_tenants`).
    pub fn place_new_tenants(&self, placer: Option<NewTenantPlacer>) {
        *self.placer.write().unwrap_or_else(PoisonError::into_inner) = placer;
    }

    /// The placement steps for the tenants `proposals` create: each tenant a put names that
    /// neither exists nor has a placement record (a deleted tenant keeps its own, and the review
    /// decides its step), once. Nothing without a placer.
    fn new_tenant_steps<'a>(&self, proposals: impl Iterator<Item = &'a Proposal>) -> Vec<Proposal> {
        let Some(placer) = self
            .placer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return Vec::new();
        };
        let mut created: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        {
            let registry = self.registry.read();
            for proposal in proposals {
                let Command::Put { resources } = &proposal.command else {
                    continue;
                };
                for resource in resources {
                    let tenant = resource.name();
                    if matches!(resource, Resource::Tenant(_))
                        && !registry.tenant_exists(tenant)
                        && registry.placement(tenant).is_none()
                        && seen.insert(tenant)
                    {
                        created.push(tenant);
                    }
                }
            }
        }
        if created.is_empty() {
            return Vec::new();
        }
        placer(&created)
            .into_iter()
            .map(|command| Proposal {
                request_id: uuid::Uuid::new_v4(),
                at: now_ms(),
                command,
            })
            .collect()
    }

    /// Proposals waiting for the batcher to take them into a batch.
    pub fn queued_proposals(&self) -> usize {
        self.batcher
            .as_ref()
            .map_or(0, |queue| queue.max_capacity() - queue.capacity())
    }

    /// Writes a proposal through the batcher, or on its own without one; `flushed`, if any,
    /// runs beside the write and hears how its flush went.
    async fn submit(&self, proposal: Proposal, flushed: Option<Flushed>) -> Written {
        let Some(batcher) = &self.batcher else {
            let flush = async {
                if let Some((flush, done)) = flushed {
                    let _ = done.send(flush().await);
                }
            };
            return tokio::join!(flush, self.write(proposal)).1;
        };
        let (reply, answer) = oneshot::channel();
        let queued = Queued {
            proposal,
            reply,
            flushed,
        };
        batcher
            .send(queued)
            .await
            .map_err(|_| WriteError::Stopped("the batcher stopped".into()))?;
        answer
            .await
            .map_err(|_| WriteError::Stopped("the batcher dropped the write".into()))?
    }

    /// Validates (the command itself, then what it names against this node's grants), stamps
    /// and writes a command; its answer and log index once committed and applied here too, so
    /// the caller reads its own write from this node.
    pub async fn propose(&self, command: Command) -> Result<(Response, u64), WriteError> {
        let proposal = self.stamped(command)?;
        self.written(proposal, None).await
    }

    /// [`Cluster::propose`], with `flush` run beside the write: how the flush went, and the
    /// write's answer. Proposals that share a batch and name the same `flush` run it once, so
    /// under load a node syncs its audit log once per log entry, not once per admin change. A
    /// command refused before it is written still has its flush run.
    pub async fn propose_flushed(
        &self,
        command: Command,
        flush: &Flush,
    ) -> (io::Result<()>, Result<(Response, u64), WriteError>) {
        let proposal = match self.stamped(command) {
            Ok(proposal) => proposal,
            Err(refused) => return (flush().await, Err(refused)),
        };
        let (done, flushed) = oneshot::channel();
        let flushed = async {
            flushed
                .await
                .unwrap_or_else(|_| Err(io::Error::other("the batcher dropped the flush")))
        };
        tokio::join!(flushed, self.written(proposal, Some((flush.clone(), done))))
    }

    fn stamped(&self, command: Command) -> Result<Proposal, WriteError> {
        command.validate()?;
        if Grants::concerns(&command) {
            let registry = self.registry.read();
            self.grants.check(&command, &registry)?;
        }
        Ok(Proposal {
            request_id: uuid::Uuid::new_v4(),
            at: now_ms(),
            command,
        })
    }

    async fn written(
        &self,
        proposal: Proposal,
        flushed: Option<Flushed>,
    ) -> Result<(Response, u64), WriteError> {
        let (result, index) = self.submit(proposal, flushed).await?;
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
            // The leader this try found wanting (none known, or one that failed to answer):
            // the next try goes as soon as another is known, or after `pause`.
            let (stale, last_error) = match self.raft.client_write(proposal.clone()).await {
                Ok(reply) => return Ok((reply.data, reply.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to))) => {
                    let error = match (to.leader_id, to.leader_node) {
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
                    };
                    (to.leader_id, error)
                }
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e))) => {
                    return Err(WriteError::Stopped(e.to_string()));
                }
                Err(RaftError::Fatal(e)) => return Err(WriteError::Stopped(e.to_string())),
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(WriteError::Unavailable(WRITE_DEADLINE, last_error));
            }
            self.next_leader(stale, pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Waits for `at_most`, or less: until this node knows a leader other than `stale`. So a
    /// write or read that found no leader, or one that did not answer, goes to the next leader
    /// the moment it is elected, not after a back-off that grew while the election ran.
    async fn next_leader(&self, stale: Option<NodeId>, at_most: Duration) {
        let mut metrics = self.raft.metrics();
        let elected = metrics.wait_for(|m| m.current_leader.is_some() && m.current_leader != stale);
        let _ = tokio::time::timeout(at_most, elected).await;
    }

    /// Waits until this node has applied every write committed before the call: the leader
    /// confirms its leadership with a quorum, a follower asks the leader for that index.
    pub async fn linearizable(&self) -> Result<(), WriteError> {
        let deadline = tokio::time::Instant::now() + WRITE_DEADLINE;
        let index = loop {
            let (stale, error) = match self.raft.ensure_linearizable().await {
                Ok(read) => break read.map_or(0, |id| id.index),
                Err(RaftError::APIError(e)) => match e {
                    openraft::error::CheckIsLeaderError::ForwardToLeader(to) => {
                        let error = match (to.leader_id, to.leader_node) {
                            (Some(leader), Some(node)) if leader != self.id => {
                                match self.forward(leader, &node.addr, Forwarded::ReadIndex).await {
                                    Ok(ForwardReply::ReadIndex(i)) => break i,
                                    Ok(other) => format!("leader {leader} answered {other:?}"),
                                    Err(e) => e.to_string(),
                                }
                            }
                            _ => "no leader yet".to_owned(),
                        };
                        (to.leader_id, error)
                    }
                    // This node led and could not confirm it: wait for whoever leads next.
                    other => (Some(self.id), other.to_string()),
                },
                Err(RaftError::Fatal(e)) => return Err(WriteError::Stopped(e.to_string())),
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(WriteError::Unavailable(WRITE_DEADLINE, error));
            }
            self.next_leader(stale, Duration::from_millis(50).min(deadline - now))
                .await;
        };
        self.wait_applied(index, deadline - tokio::time::Instant::now())
            .await
            .map_err(|e| WriteError::Unavailable(WRITE_DEADLINE, e))
    }

    /// The leader's commit index, as far as this node can learn it within `within`: when it
    /// leads, its read index once a quorum confirmed it still does (a leader cut off from the
    /// others would otherwise answer from a commit index the new leader has long passed), else
    /// the read index the leader answers. `Err` when no leader is known or it did not answer in
    /// time.
    pub async fn leader_commit(&self, within: Duration) -> Result<u64, String> {
        let metrics = self.raft.metrics().borrow().clone();
        let Some(leader) = metrics.current_leader else {
            return Err("no leader".to_owned());
        };
        if leader == self.id {
            return match tokio::time::timeout(within, self.raft.ensure_linearizable()).await {
                Ok(Ok(read)) => Ok(read.map_or(0, |id| id.index)),
                Ok(Err(e)) => Err(format!("this node is no longer sure it leads: {e}")),
                Err(_) => Err(format!(
                    "no quorum confirmed this node's leadership within {within:?}"
                )),
            };
        }
        let addr = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node.addr.clone())
            .ok_or_else(|| format!("leader {leader} is not in the membership"))?;
        match tokio::time::timeout(within, self.forward(leader, &addr, Forwarded::ReadIndex)).await
        {
            Ok(Ok(ForwardReply::ReadIndex(index))) => Ok(index),
            Ok(Ok(other)) => Err(format!("leader {leader} answered {other:?}")),
            Ok(Err(e)) => Err(format!("asking leader {leader}: {e}")),
            Err(_) => Err(format!("leader {leader} did not answer within {within:?}")),
        }
    }

    /// Brings this node up to the leader's commit index as it is now, within `within` in all:
    /// for a read that found nothing here and must not answer "no such thing" only because this
    /// node is behind (just restarted, joined, or cut off a moment ago). `Err` says why not.
    pub async fn catch_up(&self, within: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        let index = self.leader_commit(within).await?;
        self.wait_applied(index, deadline - tokio::time::Instant::now())
            .await
    }

    /// [`Cluster::catch_up`] for a lookup anyone can trigger, such as an unknown API key: one at
    /// a time on this node, and a caller that waited while a catch-up ran that started after it
    /// arrived takes that one's result instead of starting its own. So a flood of unknown keys
    /// costs the leader one read index at a time, and each of them waits for at most two.
    pub async fn catch_up_shared(&self, within: Duration) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        let turns = &self.shared_catch_ups;
        let arrived = turns.started.load(Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + within;
        let mut last = tokio::time::timeout_at(deadline, turns.last.lock())
            .await
            .map_err(|_| format!("no catch-up finished within {within:?}"))?;
        if let Some((turn, result)) = &*last
            && *turn > arrived
        {
            return result.clone();
        }
        let turn = turns.started.fetch_add(1, Ordering::SeqCst) + 1;
        let result = self
            .catch_up(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        *last = Some((turn, result.clone()));
        result
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

    /// Sends `what` to `leader` and waits for its answer, for at most [`FORWARD_TIMEOUT`] and
    /// only while this node still takes `leader` for the leader: a leader that froze or was cut
    /// off is replaced within an election, and the caller then retries through the new one
    /// (under the same request id, so a write the old leader did commit applies once).
    async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        what: Forwarded,
    ) -> anyhow::Result<ForwardReply> {
        let mut metrics = self.raft.metrics();
        let superseded = async move {
            // An error means Raft stopped; the forward's own timeout then ends the wait.
            if metrics
                .wait_for(|m| m.current_leader != Some(leader))
                .await
                .is_err()
            {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            reply = tokio::time::timeout(FORWARD_TIMEOUT, self.send_forward(leader, addr, what)) => {
                reply.map_err(|_| anyhow::anyhow!("leader {leader} did not answer within {FORWARD_TIMEOUT:?}"))?
            }
            () = superseded => anyhow::bail!("leader {leader} was superseded while it held the request"),
        }
    }

    async fn send_forward(
        &self,
        leader: NodeId,
        addr: &str,
        what: Forwarded,
    ) -> anyhow::Result<ForwardReply> {
        deliver(&*self.filter, self.id, leader).await?;
        let payload = serde_json::to_vec(&what)?;
        let mut client = self.peers.client(addr)?;
        let reply = client
            .forward(self.peers.request(pb::ForwardRequest { payload }))
            .await?;
        deliver(&*self.filter, leader, self.id).await?;
        Ok(serde_json::from_slice(&reply.into_inner().payload)?)
    }
}

/// What a node publishes about its Raft state.
pub type Metrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;

/// Collects queued proposals into batches, one batch in flight: whatever queues while a batch
/// is written goes together in the next, and the next also waits briefly for the writers the
/// last one answered ([`Gather`]). More batches in flight would hide nothing under load (the
/// proposals wait for CPU, not for the disk: appends in flight share a sync anyway) and cost a
/// log entry, an AppendEntries, an apply and a commit-file write each; with one, the cluster
/// benchmark's 16 clients made 14% more writes/s and the approval flow 20% more calls/s than
/// with four (README, "The replicated registry").
async fn batch_writes(cluster: Cluster, mut queued: mpsc::Receiver<Queued>) {
    let mut gather = Gather::default();
    while let Some(first) = queued.recv().await {
        let mut batch = vec![first];
        take_queued(&mut queued, &mut batch);
        let wanted = gather.wanted();
        if batch.len() < wanted {
            let deadline = tokio::time::Instant::now() + GATHER;
            let reached = loop {
                match tokio::time::timeout_at(deadline, queued.recv()).await {
                    Ok(Some(more)) => {
                        batch.push(more);
                        take_queued(&mut queued, &mut batch);
                        if batch.len() >= wanted {
                            break true;
                        }
                    }
                    Ok(None) | Err(_) => break false,
                }
            };
            gather.waited(reached);
        }
        let cut = batch.len();
        write_batch(&cluster, batch).await;
        gather.answered(cut, queued.len());
    }
}

/// Moves what is queued now into `batch`, up to [`MAX_BATCH`].
fn take_queued(queued: &mut mpsc::Receiver<Queued>, batch: &mut Vec<Queued>) {
    while batch.len() < MAX_BATCH {
        match queued.try_recv() {
            Ok(more) => batch.push(more),
            Err(_) => break,
        }
    }
}

/// Writes a batch as one log entry, and beside it runs each flush its proposals name, once. The
/// next batch waits for both: a flush is an audit sync, shorter than a Raft write, and an audit
/// log that does not sync holds the node's audited proposals anyway (calls and the actors'
/// commands write their records ahead, durably).
async fn write_batch(cluster: &Cluster, batch: Vec<Queued>) {
    let mut flushes: Vec<(Flush, Vec<oneshot::Sender<io::Result<()>>>)> = Vec::new();
    let mut writes = Vec::with_capacity(batch.len());
    for queued in batch {
        if let Some((flush, done)) = queued.flushed {
            match flushes.iter_mut().find(|(f, _)| Arc::ptr_eq(f, &flush)) {
                Some((_, waiting)) => waiting.push(done),
                None => flushes.push((flush, vec![done])),
            }
        }
        writes.push((queued.proposal, queued.reply));
    }
    let flushed =
        futures::future::join_all(flushes.into_iter().map(|(flush, waiting)| async move {
            let result = flush().await;
            for done in waiting {
                let copy = match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                };
                let _ = done.send(copy);
            }
        }));
    tokio::join!(flushed, write_entry(cluster, writes));
}

/// Writes the proposals as one log entry (a lone one as itself), with the placement of each
/// tenant they create after them, and answers each.
async fn write_entry(cluster: &Cluster, mut batch: Vec<(Proposal, oneshot::Sender<Written>)>) {
    let placing = cluster.new_tenant_steps(batch.iter().map(|(proposal, _)| proposal));
    if batch.len() == 1 && placing.is_empty() {
        let (proposal, reply) = batch.remove(0);
        let _ = reply.send(cluster.write(proposal).await);
        return;
    }
    let (mut proposals, replies): (Vec<Proposal>, Vec<_>) = batch.into_iter().unzip();
    proposals.extend(placing);
    let written = proposals.len();
    let outer = Proposal {
        request_id: uuid::Uuid::new_v4(),
        at: now_ms(),
        command: Command::Batch { proposals },
    };
    match cluster.write(outer).await {
        Ok((Ok(Response::Batch { mut results }), index)) if results.len() == written => {
            // A step refused (the put that was to create its tenant was refused) is left to
            // the leader's review like any tenant it has not placed.
            let placed = results.split_off(replies.len());
            let refused = placed.iter().filter(|r| r.is_err()).count();
            if refused > 0 {
                tracing::debug!(refused, "new tenants' placements not taken");
            }
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok((result, index)));
            }
        }
        Ok((Ok(other), _)) => {
            for reply in replies {
                let _ = reply.send(Err(WriteError::Stopped(format!(
                    "a batch was answered with {other:?}"
                ))));
            }
        }
        Ok((Err(refused), index)) => {
            for reply in replies {
                let _ = reply.send(Ok((Err(refused.clone()), index)));
            }
        }
        Err(failed) => {
            for reply in replies {
                let _ = reply.send(Err(failed.clone()));
            }
        }
    }
}
