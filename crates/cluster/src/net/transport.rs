//! How a node reaches its peers, and what it asks of peers that reach it: plain HTTP/2, or TLS
//! trusting the cluster's CA, with client certificates under `peer-mtls`. Every channel to a
//! peer (Raft, forwarded writes, join, membership calls passed to the leader) is built by
//! [`PeerTransport::endpoint`].

use crate::tls::{NodeTls, Probe};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tonic::transport::{ClientTlsConfig, Endpoint};

/// How long reaching a peer may take: a peer whose machine vanished answers no SYN, and without
/// a bound a call would hang on TCP's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Default)]
pub enum PeerTransport {
    #[default]
    Plain,
    Tls {
        client: ClientTlsConfig,
        /// The same trust and identity, for a handshake on its own.
        probe: Arc<rustls::ClientConfig>,
        /// Peers present a client certificate, and peer RPCs without one are refused.
        mtls: bool,
    },
}

impl PeerTransport {
    /// TLS with the node's material, or plain without any.
    pub fn new(tls: Option<&NodeTls>) -> Self {
        match tls {
            None => PeerTransport::Plain,
            Some(tls) => PeerTransport::Tls {
                client: tls.peer_client(),
                probe: tls.peer_probe(),
                mtls: tls.peer_mtls,
            },
        }
    }

    /// An endpoint for the peer at `addr` (`host:port`, as membership stores it).
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        let endpoint = match self {
            PeerTransport::Plain => Endpoint::from_shared(format!("http://{addr}"))?,
            PeerTransport::Tls { client, .. } => {
                Endpoint::from_shared(format!("https://{addr}"))?.tls_config(client.clone())?
            }
        };
        Ok(endpoint.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true))
    }

    /// Whether the peer at `addr` accepts this node's certificate, and this node the peer's.
    pub async fn probe(&self, addr: &str) -> Probe {
        match self {
            PeerTransport::Plain => Probe::Accepted,
            PeerTransport::Tls { probe, .. } => {
                crate::tls::probe(probe.clone(), addr, CONNECT_TIMEOUT).await
            }
        }
    }

    /// Refuses a peer RPC that came without a client certificate, under `peer-mtls`.
    pub fn check_client<T>(&self, request: &tonic::Request<T>) -> Result<(), tonic::Status> {
        match self {
            PeerTransport::Tls { mtls: true, .. } => {
                crate::tls::require_client_certificate(request)
            }
            PeerTransport::Plain | PeerTransport::Tls { mtls: false, .. } => Ok(()),
        }
    }
}
