//! A stopping leader hands its leadership over instead of leaving the cluster to notice it gone.
//!
//! Left alone, followers keep the old leader's lease until an election timeout passes without a
//! heartbeat, and only then elect: a gap of one to two election timeouts with no leader, long in a
//! multi-region deployment. Instead the leader, once its own calls have finished, picks the voter
//! whose log matches its own and sends it Raft's TimeoutNow. That voter starts an election at once;
//! the old leader, whose lease dates from its own election, grants the vote with an up-to-date log,
//! and in a three-voter cluster that vote and the candidate's own make the quorum.
//!
//! With five or more voters the remaining followers still hold the lease and refuse, so the new
//! leader comes one election timeout later, as without a handover. A leader elected less than an
//! election timeout ago refuses the vote too. Either way the handover costs nothing but the
//! candidate's failed first round.

use crate::cluster::{Cluster, Metrics};
use crate::net::deliver;
use gatehouse_proto::v1 as pb;
use gatehouse_raft_store::NodeId;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// What a handover came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handover {
    /// This node was not the leader, or the only voter.
    NotNeeded,
    /// `to` leads now, in `term`.
    Done { to: NodeId, term: u64 },
    /// No new leader was seen in time; the cluster elects one as after a crash.
    Failed(String),
}

/// If this node leads, asks its most caught-up voter to take over, and waits up to `within`
/// for a new leader to be seen here.
pub async fn hand_over(cluster: &Cluster, within: Duration) -> Handover {
    let deadline = Instant::now() + within;
    let metrics = cluster.raft.metrics().borrow().clone();
    if metrics.current_leader != Some(cluster.id) {
        return Handover::NotNeeded;
    }
    let term = metrics.current_term;
    let Some(target) = caught_up_voter(cluster, deadline).await else {
        return if voters_but(&metrics, cluster.id).next().is_none() {
            Handover::NotNeeded
        } else {
            Handover::Failed("no voter caught up with this node's log in time".into())
        };
    };
    if let Err(e) = ask(cluster, target, term).await {
        return Handover::Failed(format!("node {target} did not start an election: {e:#}"));
    }
    let mut watch = cluster.raft.metrics();
    let moved = timeout_at(
        deadline,
        watch.wait_for(|m| m.current_leader.is_some_and(|l| l != cluster.id)),
    )
    .await;
    match moved {
        Ok(Ok(m)) => Handover::Done {
            to: m.current_leader.unwrap_or(target),
            term: m.current_term,
        },
        _ => Handover::Failed(format!(
            "node {target} started an election but no new leader was seen within {within:?}"
        )),
    }
}

fn voters_but(metrics: &Metrics, me: NodeId) -> impl Iterator<Item = NodeId> + '_ {
    metrics
        .membership_config
        .membership()
        .voter_ids()
        .filter(move |id| *id != me)
}

/// The voter whose replicated log reaches this leader's last entry, waiting for one until
/// `deadline`: a candidate with a shorter log would be refused the vote. Ties go to the lowest
/// id, so a handover is repeatable.
async fn caught_up_voter(cluster: &Cluster, deadline: Instant) -> Option<NodeId> {
    let mut watch = cluster.raft.metrics();
    loop {
        let picked = {
            let metrics = watch.borrow_and_update();
            let last = metrics.last_log_index;
            let replication = metrics.replication.as_ref()?;
            voters_but(&metrics, cluster.id).find(|id| {
                replication
                    .get(id)
                    .and_then(|matched| matched.as_ref())
                    .is_some_and(|matched| Some(matched.index) >= last)
            })
        };
        if picked.is_some() {
            return picked;
        }
        if timeout_at(deadline, watch.changed()).await.is_err() {
            return None;
        }
    }
}

async fn ask(cluster: &Cluster, target: NodeId, term: u64) -> anyhow::Result<()> {
    let addr = {
        let metrics = cluster.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .get_node(&target)
            .map(|node| node.addr.clone())
            .ok_or_else(|| anyhow::anyhow!("node {target} has no address"))?
    };
    deliver(&*cluster.filter, cluster.id, target).await?;
    let mut client = cluster.peers.client(&addr)?;
    tokio::time::timeout(
        Duration::from_secs(2),
        client.timeout_now(cluster.peers.request(pb::TimeoutNowRequest {
            leader_id: cluster.id,
            term,
        })),
    )
    .await??;
    Ok(())
}
