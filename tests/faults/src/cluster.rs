//! The campaign's cluster: the node processes, the firewall between them, and what the nodes
//! say about themselves over the cluster API (leader, home, applied index). Forming it, growing
//! and shrinking it.

use crate::client::Channels;
use crate::firewall::Firewall;
use crate::procs::Procs;
use crate::setup::TENANT;
use anyhow::{Context, bail};
use gatehouse_proto::v1 as pb;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Cluster {
    pub procs: Procs,
    /// `None` where partitions cannot be made (not root, no iptables); the reason is printed.
    pub firewall: Option<Firewall>,
    pub channels: Channels,
    pub admin: String,
    /// Ids never come back: the next node added gets this one.
    next_id: u64,
    /// Nodes removed from the cluster; their data directories stay for the audit check.
    retired: Vec<u64>,
}

impl Cluster {
    /// Three voters: node 1 bootstraps, 2 and 3 join it and are promoted once caught up.
    pub async fn form(bin: PathBuf, dir: PathBuf) -> anyhow::Result<Cluster> {
        let firewall = match Firewall::new() {
            Ok(firewall) => Some(firewall),
            Err(why) => {
                println!("partitions are off: {why}");
                None
            }
        };
        let mut procs = Procs::new(bin, dir);
        tokio::task::block_in_place(|| procs.start(1, &["--bootstrap"], None))?;
        let admin = std::fs::read_to_string(procs.data_dir(1).join("admin.key"))
            .context("the first node writes its admin key")?
            .trim()
            .to_owned();
        let mut cluster = Cluster {
            procs,
            firewall,
            channels: Channels::default(),
            admin,
            next_id: 2,
            retired: Vec::new(),
        };
        let first = &cluster.procs.nodes[&1];
        cluster.channels.add(1, &first.grpc, &first.http)?;
        cluster.wait_leader(Duration::from_secs(30)).await?;
        cluster.channels.serve(1);
        for _ in 0..2 {
            cluster.add_voter().await?;
        }
        Ok(cluster)
    }

    /// A one-voter cluster of the one node already running in `procs` (one restored from a
    /// backup), once it leads; `add_voter` grows it with the next ids. No firewall: no faults
    /// are injected into it.
    pub async fn adopt(procs: Procs, admin: String) -> anyhow::Result<Cluster> {
        let (&id, node) = procs
            .nodes
            .iter()
            .next()
            .context("a cluster to adopt has a node")?;
        let channels = Channels::default();
        channels.add(id, &node.grpc, &node.http)?;
        let cluster = Cluster {
            procs,
            firewall: None,
            channels,
            admin,
            next_id: id + 1,
            retired: Vec::new(),
        };
        cluster.wait_leader(Duration::from_secs(30)).await?;
        cluster.channels.serve(id);
        Ok(cluster)
    }

    pub async fn status(&self, id: u64) -> Option<pb::ClusterStatusResponse> {
        let mut client = self.channels.cluster(id, &self.admin);
        client
            .status(pb::ClusterStatusRequest {})
            .await
            .ok()
            .map(tonic::Response::into_inner)
    }

    /// The leader the live nodes agree on, if they do and it is live.
    pub async fn leader(&self) -> Option<u64> {
        let live = self.procs.live();
        let mut said = BTreeMap::<u64, usize>::new();
        for id in &live {
            if let Some(leader) = self.status(*id).await.and_then(|s| s.leader_id) {
                *said.entry(leader).or_default() += 1;
            }
        }
        let (leader, votes) = said.into_iter().max_by_key(|(_, votes)| *votes)?;
        (votes * 2 > live.len() && live.contains(&leader)).then_some(leader)
    }

    pub async fn wait_leader(&self, within: Duration) -> anyhow::Result<u64> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader().await {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!("no leader within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The campaign tenant's home, as the leader says.
    pub async fn home(&self) -> Option<u64> {
        let leader = self.leader().await?;
        let status = self.status(leader).await?;
        status
            .tenants
            .iter()
            .find(|t| t.tenant == TENANT)
            .and_then(|t| t.home)
    }

    pub async fn voters(&self) -> Vec<u64> {
        match self.leader().await {
            Some(leader) => self
                .status(leader)
                .await
                .map_or_else(Vec::new, |s| s.voters),
            None => Vec::new(),
        }
    }

    /// Starts a new node, lets it join as a learner, and promotes it once it caught up.
    pub async fn add_voter(&mut self) -> anyhow::Result<u64> {
        let id = self.add_learner().await?;
        self.promote(id).await?;
        Ok(id)
    }

    /// Starts a new node and lets it join as a learner; its id. Learners started one after the
    /// other catch up at the same time.
    pub async fn add_learner(&mut self) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let leader = self.wait_leader(Duration::from_secs(20)).await?;
        let join = self.procs.nodes[&leader].grpc.clone();
        let admin = self.admin.clone();
        tokio::task::block_in_place(|| self.procs.start(id, &["--join", &join], Some(&admin)))?;
        let node = &self.procs.nodes[&id];
        self.channels.add(id, &node.grpc, &node.http)?;
        Ok(id)
    }

    /// Promotes learner `id` once it caught up. One that does not within 30 s is removed again,
    /// so that none is left behind as a learner.
    pub async fn promote(&mut self, id: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        // Under the workload's writes the learner always trails by what is in flight: it has
        // caught up once it holds everything the leader held a poll before (as
        // `gatehouse cluster wait-caught-up` decides).
        let mut earlier: Option<u64> = None;
        loop {
            let leader = self.wait_leader(Duration::from_secs(20)).await?;
            let position = self.status(leader).await.and_then(|s| {
                s.nodes
                    .iter()
                    .find(|n| n.node_id == id)
                    .map(|n| (n.applied_index, n.applied_index + n.lag))
            });
            let caught_up = position.is_some_and(|(has, of)| {
                has >= of || earlier.is_some_and(|earlier| has >= earlier)
            });
            earlier = position.map(|(_, of)| of);
            if caught_up {
                let mut client = self.channels.membership(leader, &self.admin);
                if client
                    .promote(pb::PromoteRequest { node_id: id })
                    .await
                    .is_ok()
                {
                    self.channels.serve(id);
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                // Not left behind as a learner: the cluster goes back to what it was.
                let removed = self.remove(id).await;
                bail!(
                    "node {id} did not catch up and become a voter within 30 s (removed: {removed:?})"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Removes node `id` from the membership, then stops its process for good.
    pub async fn remove(&mut self, id: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = self.wait_leader(Duration::from_secs(20)).await?;
            let mut client = self.channels.membership(leader, &self.admin);
            match client.remove(pb::RemoveRequest { node_id: id }).await {
                // An earlier attempt that timed out on this side may have taken effect.
                Ok(_) => break,
                Err(e) if e.code() == tonic::Code::NotFound => break,
                Err(e) if Instant::now() > deadline => bail!("removing node {id}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        tokio::task::block_in_place(|| self.procs.stop(id, Duration::from_secs(5)));
        self.procs.nodes.remove(&id);
        self.channels.remove(id);
        self.retired.push(id);
        Ok(())
    }

    /// Replaces `lost`, a voter whose process is gone for good, as an operator does: a fresh
    /// node joins and is promoted, then `lost` is removed; its successor's id. `lost`'s data
    /// directory stays where it is, never started again (ids are never reused), so its audit log
    /// is read with the other retired nodes'. When the successor cannot be added or `lost`
    /// cannot be removed, `lost` is started again from its data directory, so the cluster is left
    /// working (with four voters in the second case), and the error says so.
    pub async fn replace(&mut self, lost: u64) -> anyhow::Result<u64> {
        let successor = match self.add_voter().await {
            Ok(id) => id,
            Err(e) => {
                let restarted = tokio::task::block_in_place(|| self.procs.restart(lost));
                bail!(
                    "no successor for node {lost}: {e:#}; node {lost} restarted from its data \
                     directory instead ({restarted:?})"
                );
            }
        };
        if let Err(e) = self.remove(lost).await {
            let restarted = tokio::task::block_in_place(|| self.procs.restart(lost));
            bail!(
                "node {successor} joined, but the lost node {lost} could not be removed: {e:#}; \
                 node {lost} restarted from its data directory ({restarted:?})"
            );
        }
        Ok(successor)
    }

    /// The nodes removed so far.
    pub fn retired(&self) -> Vec<u64> {
        self.retired.clone()
    }

    /// Every fault undone: delays cleared, cuts healed, paused nodes resumed, killed nodes started
    /// again. A removed node, a replaced one included, is no longer in `procs.nodes` and stays
    /// down.
    pub fn heal_all(&mut self) -> anyhow::Result<()> {
        self.procs.clear_delays();
        if let Some(firewall) = &mut self.firewall {
            firewall.heal().map_err(anyhow::Error::msg)?;
        }
        let ids: Vec<u64> = self.procs.nodes.keys().copied().collect();
        for id in ids {
            self.procs.resume(id);
            tokio::task::block_in_place(|| self.procs.restart(id))?;
        }
        Ok(())
    }
}
