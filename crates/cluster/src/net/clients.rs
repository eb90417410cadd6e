//! One lazily connected gRPC channel per peer address, shared by Raft replication and write
//! forwarding. Every request carries the cluster's peer secret.

use super::{PeerTransport, Reachability};
use gatehouse_proto::v1::raft_service_client::RaftServiceClient;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

/// Raft payloads can be large (a snapshot chunk is 1 MiB, an append batch more).
pub const MAX_RAFT_MESSAGE: usize = 64 * 1024 * 1024;

#[derive(Clone)]
pub struct Peers {
    channels: Arc<RwLock<HashMap<String, Channel>>>,
    secret: Arc<RwLock<Option<String>>>,
    /// When each peer last answered a Raft RPC: how the leader tells who is reachable.
    answered: Arc<RwLock<HashMap<u64, Instant>>>,
    reachability: Reachability,
    transport: PeerTransport,
    /// The address connections to peers leave from, when the node listens on one loopback
    /// address ([`Peers::connecting_from`]); the system's choice otherwise.
    source: Option<IpAddr>,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers").finish_non_exhaustive()
    }
}

impl Peers {
    pub fn new(secret: Option<String>, transport: PeerTransport) -> Self {
        Peers {
            channels: Arc::default(),
            secret: Arc::new(RwLock::new(secret)),
            answered: Arc::default(),
            reachability: Reachability::default(),
            transport,
            source: None,
        }
    }

    /// Connects to peers from `listening`, the address the node's gRPC listener is bound to,
    /// when that is a loopback address. Nodes sharing a host on 127.0.0.x addresses then tell
    /// each other apart by source address as well as by port, so a firewall rule between two of
    /// them cuts exactly that pair (the fault campaign's partitions rely on it). Any other
    /// address is left to the system's routing, which knows better which interface reaches a
    /// peer.
    pub fn connecting_from(mut self, listening: IpAddr) -> Self {
        self.source = listening.is_loopback().then_some(listening);
        self
    }

    /// An endpoint for the node at `addr` over the cluster's transport, for calls that do not
    /// use the shared channel (joining, passing a membership call to the leader).
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        Ok(self.transport.endpoint(addr)?.local_address(self.source))
    }

    /// Whether the peer at `addr` and this node accept each other's certificates.
    pub async fn probe(&self, addr: &str) -> crate::tls::Probe {
        self.transport.probe(addr).await
    }

    /// Whether the connection `request` came over may make peer RPCs: under `peer-mtls`, only
    /// with a client certificate from the cluster's CA.
    pub fn check_client<T>(&self, request: &tonic::Request<T>) -> Result<(), tonic::Status> {
        self.transport.check_client(request)
    }

    pub fn note_answer(&self, node: u64) {
        self.answered
            .write()
            .expect("answered lock")
            .insert(node, Instant::now());
        self.reachability.answered(node);
    }

    /// A Raft RPC to `node` failed: said once per outage, not once per RPC.
    pub fn note_failure(&self, node: u64, error: &str) {
        self.reachability.failed(node, error);
    }

    /// Whether `node` answered within `window`.
    pub fn answered_within(&self, node: u64, window: Duration) -> bool {
        self.answered
            .read()
            .expect("answered lock")
            .get(&node)
            .is_some_and(|at| at.elapsed() <= window)
    }

    pub fn set_secret(&self, secret: String) {
        *self.secret.write().expect("peer secret lock") = Some(secret);
    }

    pub fn secret(&self) -> Option<String> {
        self.secret.read().expect("peer secret lock").clone()
    }

    /// A client for the peer at `addr`; connecting happens on first use.
    pub fn client(&self, addr: &str) -> anyhow::Result<RaftServiceClient<Channel>> {
        let channel = self.channel(addr)?;
        Ok(RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_RAFT_MESSAGE)
            .max_encoding_message_size(MAX_RAFT_MESSAGE))
    }

    /// Wraps a message with the peer secret.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(secret) = self.secret()
            && let Ok(value) = MetadataValue::try_from(format!("Bearer {secret}"))
        {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }

    fn channel(&self, addr: &str) -> anyhow::Result<Channel> {
        if let Some(channel) = self.channels.read().expect("channels lock").get(addr) {
            return Ok(channel.clone());
        }
        let channel = self.endpoint(addr)?.connect_lazy();
        self.channels
            .write()
            .expect("channels lock")
            .insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }
}
