//! Starting and stopping a node: the store, Raft, the gRPC and HTTP listeners, and the first
//! step into a cluster (bootstrap a new one, join an existing one, or carry on from disk).

use crate::config::{JoinKey, ServeConfig, Start};
use crate::front;
use anyhow::{Context, bail};
use gatehouse_actors::{Actors, Executor};
use gatehouse_audit::AuditLog;
use gatehouse_cluster::cluster::Cluster;
use gatehouse_cluster::feed::CallFeed;
use gatehouse_cluster::handover::Handover;
use gatehouse_cluster::net::{CommitHold, NetworkFactory, PeerTransport, Peers};
use gatehouse_cluster::node_files::{Identity, NodeFiles, new_key};
use gatehouse_cluster::readiness::Readiness;
use gatehouse_cluster::tls::{NodeTls, Plaintext, Probe, TlsListener};
use gatehouse_fronts::grpc_health::GrpcHealth;
use gatehouse_fronts::services;
use gatehouse_gateway::actor_port::AuditedPort;
use gatehouse_gateway::auth::Authenticator;
use gatehouse_gateway::executor::NodeExecutor;
use gatehouse_gateway::metrics::{Metrics, NodeSources};
use gatehouse_gateway::notify::{Notifier, NotifySettings};
use gatehouse_gateway::pipeline::Audited;
use gatehouse_gateway::pipeline::Pipeline;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_server::ApprovalServiceServer;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::cluster_service_server::ClusterServiceServer;
use gatehouse_proto::v1::gateway_service_server::GatewayServiceServer;
use gatehouse_proto::v1::raft_service_server::RaftServiceServer;
use gatehouse_proto::v1::registry_service_server::RegistryServiceServer;
use gatehouse_proto::v1::snapshot_service_server::SnapshotServiceServer;
use gatehouse_raft_store::Raft;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::resource::{API_VERSION, Metadata, Object, PrincipalSpec, Role};
use gatehouse_registry::{Command, Resource};
use openraft::BasicNode;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Raft and registry messages (snapshot chunks, big apply batches) are larger than tonic's 4 MiB
/// default.
const MAX_MESSAGE: usize = gatehouse_cluster::net::MAX_RAFT_MESSAGE;
/// Streams a client may reset before the server answers them, per connection (h2: 20).
const MAX_PENDING_RESETS: usize = 1024;

/// How long a stopping node waits for running executions to finish and report.
const EXECUTION_GRACE: Duration = Duration::from_secs(5);

/// A running node.
pub struct NodeHandle {
    pub id: u64,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    pub cluster: Cluster,
    /// The admin key, when this start bootstrapped the cluster.
    pub admin_key: Option<String>,
    /// The supervision tree: tenant actors, their queues, placement.
    pub actors: Actors,
    /// This node's audit log: closed (flushed) last on shutdown.
    pub audit: AuditLog,
    /// What `/metrics` serves.
    pub metrics: Metrics,
    /// The gRPC health service's statuses.
    pub grpc_health: GrpcHealth,
    /// How long a stopping leader waits for a successor it asked to take over.
    handover_within: Duration,
    /// Every front's calls go through it; told first when the node stops.
    pipeline: Pipeline,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for NodeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHandle")
            .field("id", &self.id)
            .field("grpc_addr", &self.grpc_addr)
            .finish_non_exhaustive()
    }
}

impl NodeHandle {
    pub fn raft(&self) -> &Raft {
        &self.cluster.raft
    }

    /// The first step of a stop: new calls are refused as unavailable on every front, and
    /// health checkers hear NOT_SERVING, so balancers stop sending; calls already taken go on.
    /// Raft, approvals and reads are still served.
    pub async fn stop_accepting(&self) {
        self.pipeline.stop_accepting();
        self.grpc_health.stopping().await;
    }

    /// Lets running executions finish (up to a grace period) so their outcomes are recorded,
    /// hands leadership over if this node leads, stops listening, stops Raft, and waits for the
    /// listeners to drain.
    pub async fn shutdown(self) -> Handover {
        self.stop_accepting().await;
        // Actors first, while the listeners still carry Raft traffic: a running execution's
        // completion must still commit and be applied here.
        self.actors.stop(EXECUTION_GRACE).await;
        // Then the leadership, while Raft still runs here to grant the successor its vote.
        let handover =
            gatehouse_cluster::handover::hand_over(&self.cluster, self.handover_within).await;
        if let Handover::Failed(why) = &handover {
            tracing::warn!(node = self.id, "leadership not handed over: {why}");
        }
        self.grpc_health.close().await;
        let _ = self.stop.send(true);
        let _ = self.cluster.raft.shutdown().await;
        for task in self.tasks {
            let _ = task.await;
        }
        self.audit.close().await;
        handover
    }
}

fn raft_config(config: &ServeConfig) -> anyhow::Result<openraft::Config> {
    let t = config.raft;
    let raft = openraft::Config {
        cluster_name: "gatehouse".to_owned(),
        heartbeat_interval: t.heartbeat.as_millis() as u64,
        election_timeout_min: t.election_min.as_millis() as u64,
        election_timeout_max: t.election_max.as_millis() as u64,
        install_snapshot_timeout: t.install_snapshot_timeout.as_millis() as u64,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(t.snapshot_every),
        snapshot_max_chunk_size: 1024 * 1024,
        max_in_snapshot_log_to_keep: t.logs_kept_after_snapshot,
        // openraft bounds each AppendEntries by the heartbeat interval: keep one request small
        // enough to travel and be flushed in that time even when entries are big batches.
        max_payload_entries: 32,
        ..Default::default()
    };
    Ok(raft.validate()?)
}

/// Binds `wanted`, or, when it asks for port 0 and an earlier start recorded an address, that.
async fn bind(wanted: SocketAddr, recorded: Option<SocketAddr>) -> anyhow::Result<TcpListener> {
    let addr = match recorded {
        Some(recorded) if wanted.port() == 0 => recorded,
        _ => wanted,
    };
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))
}

pub async fn start(config: ServeConfig) -> anyhow::Result<NodeHandle> {
    // Key files are read now, so a bad one stops the start before anything is opened.
    let authenticator = Authenticator::new(&config.jwt)?;
    let files = NodeFiles::new(&config.data_dir)?;
    let known = files.identity()?;
    if let Some(known) = &known
        && known.node_id != config.node_id
    {
        bail!(
            "{} belongs to node {}, not node {}",
            config.data_dir.display(),
            known.node_id,
            config.node_id
        );
    }
    gatehouse_cluster::backup::check_restored_for(&files, config.node_id)?;
    let grpc_listener = bind(config.grpc, known.as_ref().map(|k| k.grpc)).await?;
    let http_listener = bind(config.http, known.as_ref().map(|k| k.http)).await?;
    let identity = Identity {
        node_id: config.node_id,
        grpc: grpc_listener.local_addr()?,
        http: http_listener.local_addr()?,
    };
    files.write_identity(&identity)?;
    // The address peers dial: the listener's own, unless it is reached through something else.
    let advertised = config
        .advertise_grpc
        .clone()
        .unwrap_or_else(|| identity.grpc.to_string());

    let secret = files.peer_secret()?;
    let joined = secret.is_some();
    let peers = Peers::new(secret, PeerTransport::new(config.tls.as_ref()))
        .connecting_from(identity.grpc.ip());
    let (log, state_machine) = gatehouse_raft_store::open(&files.raft_dir())?;
    let log = log.leading_as(config.node_id);
    let commit_hold = CommitHold::new(log.synced());
    let log_tail = log.tail();
    let registry = state_machine.registry();
    let applied = state_machine.applied_watch();
    let call_events = state_machine.subscribe();
    let actor_events = state_machine.subscribe();
    let discovery_events = state_machine.subscribe();
    let network = NetworkFactory::new(
        config.node_id,
        peers.clone(),
        config.filter.clone(),
        config.raft.election_max,
        commit_hold.clone(),
    );
    let raft = Raft::new(
        config.node_id,
        Arc::new(raft_config(&config)?),
        network,
        log,
        state_machine,
    )
    .await?;
    // Whoever built the config, no credential file in the data directory is ever read.
    let grants = Arc::new(config.grants.clone().guarding(&config.data_dir));
    let cluster = Cluster::new(
        config.node_id,
        raft.clone(),
        registry,
        applied,
        peers.clone(),
        config.filter.clone(),
    )
    .with_grants(grants.clone())
    .with_batching();

    let node_executor = NodeExecutor::new(cluster.registry.clone(), grants)
        .with_state_dir(config.data_dir.join("builtin"));
    let breakers = node_executor.breaker_states();
    let executor: Arc<dyn Executor> = Arc::new(node_executor);
    let audit = AuditLog::open(&files.audit_dir(), config.node_id)
        .with_context(|| format!("opening the audit log in {}", files.audit_dir().display()))?;
    let actors = Actors::start(
        config.actors.clone(),
        cluster.registry.clone(),
        actor_events,
        Arc::new(AuditedPort::new(cluster.clone(), audit.clone())),
        Arc::new(Audited::new(
            executor.clone(),
            cluster.registry.clone(),
            audit.clone(),
            files.audit_dir(),
        )),
    )
    .await?;

    let metrics = Metrics::for_node(
        NodeSources {
            cluster: cluster.clone(),
            actors: actors.clone(),
            breakers,
        },
        config.metrics.tenant_labels,
    );
    let pipeline = Pipeline::new(
        cluster.clone(),
        actors.clone(),
        executor,
        authenticator,
        audit.clone(),
    )
    .with_metrics(metrics.clone());
    let (grpc_health, health_service) = GrpcHealth::start().await;
    let (stop, stopped) = watch::channel(false);
    let mcp_stop = CancellationToken::new();
    let feed = CallFeed::start(call_events, cluster.registry.clone(), stopped.clone());
    let console = config.a2a.public_url.clone().unwrap_or_else(|| {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", identity.http)
    });
    let notifier = Notifier::new(
        cluster.clone(),
        feed.clone(),
        audit.clone(),
        Arc::new(gatehouse_gateway::executor::ProcessEnv),
        console,
        NotifySettings::default(),
    )
    .spawn(stopped.clone());
    // One service for the gRPC listener and the HTTP approvals API.
    let approvals = services::approval::Approvals::new(
        cluster.clone(),
        pipeline.authenticator().clone(),
        feed,
        pipeline.audit_log().clone(),
    );
    let a2a = gatehouse_fronts::a2a::Front::new(
        pipeline.clone(),
        gatehouse_fronts::a2a::A2aSettings {
            grpc_url: config
                .a2a
                .grpc_url
                .clone()
                .unwrap_or_else(|| advertised.clone()),
            http_addr: identity.http.to_string(),
            public_url: config.a2a.public_url.clone(),
            https: config.tls.is_some(),
        },
        mcp_stop.clone(),
    );
    let tasks = vec![
        serve_grpc(
            grpc_listener,
            &cluster,
            Services {
                approvals: approvals.clone(),
                pipeline: pipeline.clone(),
                a2a: a2a.clone(),
                log_tail: log_tail.clone(),
            },
            health_service,
            &config,
            stopped.clone(),
        )?,
        serve_http(
            http_listener,
            gatehouse_fronts::http::router(
                Readiness {
                    cluster: cluster.clone(),
                    health: actors.health(),
                    max_lag: config.ready_max_lag,
                    stopping: pipeline.stopping_flag(),
                },
                metrics.clone(),
                config.metrics.token.clone(),
                pipeline.clone(),
                config.mcp.clone(),
                a2a,
                approvals,
                mcp_stop.clone(),
            ),
            config.tls.as_ref().map(NodeTls::http_server),
            mcp_stop,
            config.http_threads,
            stopped.clone(),
        )?,
        gatehouse_gateway::discovery::spawn_discovery(
            cluster.clone(),
            discovery_events,
            Arc::new(gatehouse_gateway::executor::ProcessEnv),
            stopped.clone(),
        ),
        notifier,
        commit_hold.release(raft.clone(), stopped.clone()),
        gatehouse_cluster::elections::spawn(cluster.clone(), log_tail.clone(), stopped),
    ];

    let admin_key = match (&config.start, joined) {
        (_, true) | (Start::Resume, false) => {
            if !joined && !raft.is_initialized().await? {
                bail!(
                    "{} holds no cluster: start with --bootstrap, or --join ADDR",
                    config.data_dir.display()
                );
            }
            None
        }
        (Start::Bootstrap, false) => Some(bootstrap(&cluster, &files, &advertised).await?),
        (Start::Join { addr, key }, false) => {
            join(&cluster, &files, addr, key, &advertised).await?;
            None
        }
    };
    gatehouse_cluster::backup::finish_restore(&cluster, &files, &advertised).await?;
    tracing::info!(node = config.node_id, grpc = %identity.grpc, %advertised, http = %identity.http, "node started");
    Ok(NodeHandle {
        id: config.node_id,
        grpc_addr: identity.grpc,
        http_addr: identity.http,
        cluster,
        admin_key,
        actors,
        audit,
        metrics,
        grpc_health,
        handover_within: config.raft.election_max * 2 + Duration::from_secs(1),
        pipeline,
        stop,
        tasks,
    })
}

/// What the client-facing services need besides the cluster.
struct Services {
    approvals: services::approval::Approvals,
    pipeline: Pipeline,
    a2a: Arc<gatehouse_fronts::a2a::Front>,
    /// Where this node's log ends, for answering pre-votes.
    log_tail: gatehouse_raft_store::LogTail,
}

fn serve_grpc<H>(
    listener: TcpListener,
    cluster: &Cluster,
    front: Services,
    health: tonic_health::pb::health_server::HealthServer<H>,
    config: &ServeConfig,
    mut stopped: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>>
where
    H: tonic_health::pb::health_server::Health,
{
    let reachable_window = (config.raft.election_max * 3).max(Duration::from_secs(1));
    let router = tonic::transport::Server::builder()
        // A peer back from a partition resets the requests it gave up on while the link was
        // down; at h2's default of 20 such resets it would be sent away (GOAWAY
        // `too_many_resets`) and its Raft connection with it.
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        .layer(gatehouse_fronts::deadline::DeadlineLayer)
        .add_service(
            RaftServiceServer::new(services::raft::RaftRpc::new(
                cluster.raft.clone(),
                cluster.peers.clone(),
                front.log_tail.clone(),
                stopped.clone(),
            ))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            RegistryServiceServer::new(services::registry::Registry::new(
                cluster.clone(),
                front.pipeline.authenticator().clone(),
                front.pipeline.audit_log().clone(),
            ))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(ClusterServiceServer::new(
            services::cluster::Membership::new(
                cluster.clone(),
                front.pipeline.authenticator().clone(),
                reachable_window,
            ),
        ))
        .add_service(SnapshotServiceServer::new(
            services::snapshot::Snapshots::new(
                cluster.clone(),
                front.pipeline.authenticator().clone(),
            ),
        ))
        .add_service(ApprovalServiceServer::new(front.approvals))
        .add_service(GatewayServiceServer::new(services::gateway::Gateway::new(
            front.pipeline,
        )))
        .add_service(gatehouse_fronts::a2a::grpc_service(front.a2a))
        .add_service(health)
        .add_service(gatehouse_fronts::grpc_health::reflection_v1()?)
        .add_service(gatehouse_fronts::grpc_health::reflection_v1alpha()?);
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    // Small RPCs (votes, acks, one-resource writes) must not wait for Nagle: both incoming
    // streams set NODELAY.
    let Some(tls) = &config.tls else {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        return Ok(tokio::spawn(async move {
            let served = router.serve_with_incoming_shutdown(incoming, shutdown);
            if let Err(e) = served.await {
                tracing::error!(error = %e, "gRPC listener failed");
            }
        }));
    };
    let incoming = TlsListener::new(listener, tls.grpc_server(), Plaintext::Grpc)
        .context("the gRPC listener's TLS")?;
    Ok(tokio::spawn(async move {
        let served = router.serve_with_incoming_shutdown(incoming, shutdown);
        if let Err(e) = served.await {
            tracing::error!(error = %e, "gRPC listener (TLS) failed");
        }
    }))
}

/// Serves `router` on the front threads ([`front`]), over TLS only when `tls` is given; on
/// stop, ends the MCP front's sessions first (their event streams would otherwise hold the
/// graceful shutdown open).
fn serve_http(
    listener: TcpListener,
    router: axum::Router,
    tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    mcp_stop: CancellationToken,
    threads: usize,
    stopped: watch::Receiver<bool>,
) -> anyhow::Result<JoinHandle<()>> {
    let serve = move |handoff: front::Handoff, mut stopped: watch::Receiver<bool>| {
        let (router, tls, mcp_stop) = (router.clone(), tls.clone(), mcp_stop.clone());
        async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
                mcp_stop.cancel();
            };
            let served = match tls {
                None => {
                    axum::serve(handoff, router)
                        .with_graceful_shutdown(shutdown)
                        .await
                }
                Some(config) => match TlsListener::new(handoff, config, Plaintext::Http) {
                    Ok(listener) => {
                        axum::serve(listener, router)
                            .with_graceful_shutdown(shutdown)
                            .await
                    }
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = served {
                tracing::error!(error = %e, "HTTP listener failed");
            }
        }
    };
    front::spawn(listener, threads, stopped, serve).context("the HTTP front's threads")
}

/// Makes a one-node cluster: this node the only voter, a peer secret, and an admin principal
/// whose key is written to `admin.key` (mode 0600) and kept nowhere else.
async fn bootstrap(cluster: &Cluster, files: &NodeFiles, grpc: &str) -> anyhow::Result<String> {
    let raft = &cluster.raft;
    if !raft.is_initialized().await? {
        let members = BTreeMap::from([(
            cluster.id,
            BasicNode {
                addr: grpc.to_owned(),
            },
        )]);
        raft.initialize(members).await?;
    }
    raft.wait(Some(Duration::from_secs(30)))
        .current_leader(cluster.id, "bootstrap: become leader")
        .await
        .context("the new cluster elected no leader")?;
    let secret = new_key("peer");
    files.write_peer_secret(&secret)?;
    cluster.peers.set_secret(secret);

    let key = new_key("gate");
    let admin = Resource::Principal(Object {
        api_version: API_VERSION.to_owned(),
        metadata: Metadata {
            name: "admin".to_owned(),
            tenant: None,
            labels: BTreeMap::new(),
        },
        spec: PrincipalSpec {
            api_key_sha256: Some(sha256_hex(key.as_bytes())),
            cluster_roles: vec![Role::Admin, Role::Operator],
            ..Default::default()
        },
    });
    cluster
        .propose(Command::Put {
            resources: vec![admin],
        })
        .await?;
    // A node that bootstraps twice (a crash between the steps) is admitted already.
    let _ = cluster
        .propose(Command::AdmitNode {
            node: cluster.id,
            addr: grpc.to_owned(),
        })
        .await;
    files.write_admin_key(&key)?;
    Ok(key)
}

/// Asks a member to add this node as a learner, and keeps the peer secret it answers with.
async fn join(
    cluster: &Cluster,
    files: &NodeFiles,
    addr: &str,
    key: &JoinKey,
    grpc: &str,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // A key file written by a member that is still bootstrapping appears a little later.
        let token = match key.read() {
            Ok(token) => token,
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(e.context("reading the admin key to join with"));
            }
            Err(e) => {
                tracing::info!("waiting for the admin key: {e:#}");
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        };
        // Under TLS 1.3 a refused client certificate shows only after the handshake, and the
        // join call may see just a closed connection: a handshake on its own says it surely.
        if let Probe::Refused(why) = cluster.peers.probe(addr).await {
            bail!(
                "joining through {addr}: the TLS handshake failed: {why} (is this node's \
                 certificate from the cluster's CA, and does tls-ca hold the CA of the member's?)"
            );
        }
        let attempt = async {
            let channel = cluster.peers.endpoint(addr)?.connect().await?;
            let mut client = ClusterServiceClient::new(channel);
            let mut request = tonic::Request::new(pb::JoinRequest {
                node_id: cluster.id,
                grpc_addr: grpc.to_owned(),
            });
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse()?);
            anyhow::Ok(client.join(request).await?.into_inner())
        };
        match attempt.await {
            Ok(joined) => {
                files.write_peer_secret(&joined.peer_secret)?;
                cluster.peers.set_secret(joined.peer_secret);
                tracing::info!(leader = joined.leader_id, "joined as a learner");
                return Ok(());
            }
            Err(e) => {
                // A refusal (a reused id, a wrong key) is final; unavailability is worth a retry.
                let refused = e
                    .downcast_ref::<tonic::Status>()
                    .is_some_and(|s| s.code() != tonic::Code::Unavailable);
                if refused || tokio::time::Instant::now() > deadline {
                    return Err(e.context(format!("joining through {addr}")));
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}
