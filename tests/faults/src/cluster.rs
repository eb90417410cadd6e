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
        let id = self.next_id;
        self.next_id += 1;
        let leader = self.wait_leader(Duration::from_secs(20)).await?;
        let join = self.procs.nodes[&leader].grpc.clone();
        let admin = self.admin.clone();
        tokio::task::block_in_place(|| self.procs.start(id, &["--join", &join], Some(&admin)))?;
        let node = &self.procs.nodes[&id];
        self.channels.add(id, &node.grpc, &node.http)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = self.wait_leader(Duration::from_secs(20)).await?;
            let caught_up = self
                .status(leader)
                .await
                .is_some_and(|s| s.nodes.iter().any(|n| n.node_id == id && n.lag == 0));
            if caught_up {
                let mut client = self.channels.membership(leader, &self.admin);
                if client
                    .promote(pb::PromoteRequest { node_id: id })
                    .await
                    .is_ok()
                {
                    self.channels.serve(id);
                    return Ok(id);
                }
            }
            if Instant::now() > deadline {
                // Not left behind as a learner: the cluster goes back to what it was.
                let removed = self.remove(id).await;
                bail!(
                    "node {id} did not catch up and become a voter within 30 s (removed: {removed:?})"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Removes node `id` from the membership, then stops its process for good.
    pub async fn remove(&mut self, id: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = self.wait_leader(Duration::from_secs(20)).await?;
            let mut client = self.channels.membership(leader, &self.admin);
            match client.remove(pb::RemoveRequest { node_id: id }).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => bail!("removing node {id}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        tokio::task::block_in_place(|| self.procs.stop(id, Duration::from_secs(5)));
        self.procs.nodes.remove(&id);
        self.channels.remove(id);
        self.retired.push(id);
        Ok(())
    }

    /// The nodes removed so far.
    pub fn retired(&self) -> Vec<u64> {
        self.retired.clone()
    }

    /// Every fault undone: cuts healed, paused nodes resumed, killed nodes started again.
    pub fn heal_all(&mut self) -> anyhow::Result<()> {
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
