//! One lazily connected gRPC channel per peer address, shared by Raft replication, votes,
//! pre-votes and write forwarding, and one more per peer for snapshots. Every request carries
//! the cluster's peer secret. A peer that answered nothing for a while has its shared channel
//! reset ([`Peers::reset_if_stalled`]).

use super::transport::Dialer;
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
    /// By address; snapshots by [`Use::Snapshot`]'s own key.
    channels: Arc<RwLock<HashMap<(String, Use), Channel>>>,
    /// When each address's shared channel was last reset.
    resets: Arc<RwLock<HashMap<String, Instant>>>,
    /// Opens the shared channels' connections, and aborts them.
    dialer: Dialer,
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
            resets: Arc::default(),
            dialer: Dialer::default(),
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
        self.dialer = Dialer::new(self.source);
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
        self.client_for(addr, Use::Shared)
    }

    /// A client for sending the peer at `addr` a snapshot, over a connection of its own: a
    /// snapshot may take longer than a stall ([`Peers::reset_if_stalled`]) and does not hold
    /// heartbeats up behind it.
    pub fn snapshot_client(&self, addr: &str) -> anyhow::Result<RaftServiceClient<Channel>> {
        self.client_for(addr, Use::Snapshot)
    }

    fn client_for(&self, addr: &str, to: Use) -> anyhow::Result<RaftServiceClient<Channel>> {
        let channel = self.channel(addr, to)?;
        Ok(RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_RAFT_MESSAGE)
            .max_encoding_message_size(MAX_RAFT_MESSAGE))
    }

    /// After a call to `node` at `addr` went unanswered: when the node has answered nothing for
    /// `window`, and the channel was not reset within it, aborts the shared channel's connection
    /// (`transport::Dialer::abort`), so the next call connects anew and what the old connection still
    /// queued is thrown away. Whatever else was in flight on it fails and is retried by its
    /// caller. Returns whether it reset.
    pub fn reset_if_stalled(&self, node: u64, addr: &str, window: Duration) -> bool {
        if self.answered_within(node, window) {
            return false;
        }
        let mut resets = self.resets.write().expect("resets lock");
        if resets.get(addr).is_some_and(|at| at.elapsed() < window) {
            return false;
        }
        resets.insert(addr.to_owned(), Instant::now());
        drop(resets);
        // Dropping the channel drops a connection still being made with it, so the next call
        // starts afresh instead of waiting on the old attempt's SYN retransmissions.
        self.channels
            .write()
            .expect("channels lock")
            .remove(&(addr.to_owned(), Use::Shared));
        self.dialer.abort(addr);
        true
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

    fn channel(&self, addr: &str, to: Use) -> anyhow::Result<Channel> {
        let key = (addr.to_owned(), to);
        if let Some(channel) = self.channels.read().expect("channels lock").get(&key) {
            return Ok(channel.clone());
        }
        let channel = match to {
            Use::Shared => self
                .endpoint(addr)?
                .connect_with_connector_lazy(self.dialer.clone()),
            Use::Snapshot => self.endpoint(addr)?.connect_lazy(),
        };
        let mut channels = self.channels.write().expect("channels lock");
        // Another caller may have made one meanwhile: everyone shares the first.
        Ok(channels.entry(key).or_insert(channel).clone())
    }
}

/// Which of a peer's channels a call goes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Use {
    Shared,
    Snapshot,
}

#[cfg(test)]
mod tests {
    use super::Peers;
    use crate::net::PeerTransport;
    use gatehouse_proto::v1 as pb;
    use std::io::ErrorKind;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    const MS: Duration = Duration::from_millis(1);

    /// A pre-vote to `addr` that gives up after 200 ms.
    async fn call(peers: &Peers, addr: &str) {
        let mut client = peers.client(addr).expect("a client");
        let asked = client.pre_vote(peers.request(pb::PreVoteRequest { payload: vec![] }));
        assert!(
            tokio::time::timeout(200 * MS, asked).await.is_err(),
            "a peer that never answers answered"
        );
    }

    #[tokio::test]
    async fn a_peer_silent_for_the_window_gets_a_new_connection_and_the_old_one_is_reset() {
        // A peer whose connection stalls: it takes the bytes and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let peers = Peers::new(Some("secret".into()), PeerTransport::Plain);

        call(&peers, &addr).await;
        let (mut first, _) = listener.accept().await.expect("the first connection");
        peers.note_answer(2);
        assert!(
            !peers.reset_if_stalled(2, &addr, 500 * MS),
            "a peer that answered within the window was cut off"
        );
        tokio::time::sleep(600 * MS).await;
        assert!(peers.reset_if_stalled(2, &addr, 500 * MS));
        assert!(
            !peers.reset_if_stalled(2, &addr, 500 * MS),
            "reset twice within one window"
        );

        // The old connection ends with a reset: what it still queued is thrown away, not
        // delivered late.
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), first.read(&mut buf)).await {
                Ok(Ok(0)) => panic!("the old connection was closed, not reset"),
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => {
                    assert_eq!(e.kind(), ErrorKind::ConnectionReset);
                    break;
                }
                Err(_) => panic!("the old connection is still open"),
            }
        }

        // The next call connects anew.
        call(&peers, &addr).await;
        let second = tokio::time::timeout(Duration::from_secs(2), listener.accept()).await;
        assert!(second.is_ok(), "no new connection after the reset");
    }
}
