//! Gatehouse under load: registry writes through `RegistryService.Apply` on a reused
//! connection, and a new learner catching up on a loaded registry.

use crate::load::{self, Level, Window, Writer};
use anyhow::Context;
use gatehouse_actors::ActorSettings;
use gatehouse_node::config::RaftTimings;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_tests::{NodeOptions, TestCluster};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};

/// An admin's registry client with its own HTTP/2 connection to one node.
pub struct Registry {
    client: RegistryServiceClient<Channel>,
    auth: MetadataValue<Ascii>,
    spec: String,
}

impl Registry {
    pub async fn connect(addr: SocketAddr, key: &str, spec: &str) -> anyhow::Result<Self> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        Ok(Registry {
            client: RegistryServiceClient::new(channel)
                .max_encoding_message_size(64 << 20)
                .max_decoding_message_size(64 << 20),
            auth: format!("Bearer {key}").parse()?,
            spec: spec.to_owned(),
        })
    }

    fn tenant(&self, name: String) -> pb::Resource {
        pb::Resource {
            kind: "Tenant".into(),
            name,
            tenant: None,
            labels: Default::default(),
            spec_json: self.spec.clone(),
            generation: 0,
        }
    }

    /// Applies tenants with these names in one proposal; the log index it committed at.
    pub async fn apply(&mut self, names: Vec<String>) -> anyhow::Result<u64> {
        let resources = names.into_iter().map(|n| self.tenant(n)).collect();
        let mut request = tonic::Request::new(pb::ApplyRequest { resources });
        request
            .metadata_mut()
            .insert("authorization", self.auth.clone());
        Ok(self.client.apply(request).await?.into_inner().log_index)
    }
}

impl Writer for Registry {
    async fn write(&mut self, key: String) -> anyhow::Result<()> {
        self.apply(vec![key]).await.map(drop)
    }
}

/// Starts a durable three-node cluster with production timings and actor settings (the
/// leader reviews placement every 500 ms, where tests review every 100); its leader.
pub fn start_cluster() -> anyhow::Result<(TestCluster, u64)> {
    let options = NodeOptions {
        timings: RaftTimings::default(),
        actors: Some(ActorSettings::default()),
        ..NodeOptions::default()
    };
    let cluster = TestCluster::with_options(&[1, 2, 3], options)?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    Ok((cluster, leader))
}

/// Runs every concurrency level against the leader of `cluster`.
pub fn writes(
    cluster: &TestCluster,
    leader: u64,
    levels: &[usize],
    window: Window,
    spec: &str,
) -> anyhow::Result<Vec<Level>> {
    let addr = cluster.addr(leader);
    let mut results = Vec::new();
    for &clients in levels {
        let level = cluster.block_on(async {
            let mut writers = Vec::with_capacity(clients);
            for _ in 0..clients {
                writers.push(Registry::connect(addr, cluster.admin_key(), spec).await?);
            }
            anyhow::Ok(load::run(writers, window, &clients.to_string()).await)
        })?;
        println!("  gatehouse {}", level.summary());
        results.push(level);
    }
    Ok(results)
}

/// What the catch-up phase measured.
#[derive(Debug)]
pub struct Catchup {
    pub resources: usize,
    pub load: Duration,
    pub catchup: Duration,
    pub target_index: u64,
    pub snapshot_index: Option<u64>,
}

/// Loads `resources` tenants in batches into a fresh cluster, then times a new learner (node 4)
/// from its start until it has applied everything the leader had.
pub fn catchup(
    timings: RaftTimings,
    resources: usize,
    batch: usize,
    spec: &str,
) -> anyhow::Result<Catchup> {
    let mut cluster = TestCluster::with_timings(&[1, 2, 3], timings)?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let loading = Instant::now();
    let mut last = 0;
    cluster.block_on(async {
        let mut client = Registry::connect(cluster.addr(leader), cluster.admin_key(), spec).await?;
        let mut next = 0;
        while next < resources {
            let end = (next + batch.max(1)).min(resources);
            last = client
                .apply((next..end).map(|i| format!("c{i:07}")).collect())
                .await?;
            next = end;
        }
        anyhow::Ok(())
    })?;
    cluster.wait_converged(last, Duration::from_secs(120))?;
    let load = loading.elapsed();
    println!(
        "  loaded {resources} tenants in {:.2} s (index {last}); adding learner 4",
        load.as_secs_f64()
    );

    let started = Instant::now();
    cluster.add_learner(4)?;
    // Admitting node 4 is itself a write: the target is what the leader has after it.
    let target_index = cluster.max_applied();
    cluster.wait_for_applied(4, target_index, Duration::from_secs(300))?;
    Ok(Catchup {
        resources,
        load,
        catchup: started.elapsed(),
        target_index,
        snapshot_index: cluster.snapshot_index(4),
    })
}
