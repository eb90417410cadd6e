//! How a node reaches its peers, and what it asks of peers that reach it: plain HTTP/2, or TLS
//! trusting the cluster's CA, with client certificates under `peer-mtls`. Every channel to a
//! peer (Raft, forwarded writes, join, membership calls passed to the leader) is built by
//! [`PeerTransport::endpoint`].

use crate::tls::NodeTls;
use std::time::Duration;
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

/// Whether `error` (or one of its causes) is a TLS failure: a certificate the other side did
/// not accept, or one this side did not. Retrying does not help.
pub fn is_tls_refusal(error: &(dyn std::error::Error + 'static)) -> bool {
    // A refusal that arrives as an alert after the handshake (TLS 1.3 checks the client's
    // certificate last) reaches tonic through h2, which keeps only the text of the I/O error:
    // rustls's own wording is what is left to recognise.
    const RUSTLS_REFUSALS: [&str; 3] = [
        "received fatal alert",
        "invalid peer certificate",
        "peer sent no certificates",
    ];
    let mut cause = Some(error);
    while let Some(e) = cause {
        if e.is::<tokio_rustls::rustls::Error>() {
            return true;
        }
        let text = e.to_string();
        if RUSTLS_REFUSALS.iter().any(|r| text.contains(r)) {
            return true;
        }
        // An I/O error's `source` skips the error it wraps, which is where rustls puts its own.
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && inner.is::<tokio_rustls::rustls::Error>()
        {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_refusals_are_told_from_other_failures() {
        let alert = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            tokio_rustls::rustls::Error::AlertReceived(
                tokio_rustls::rustls::AlertDescription::UnknownCA,
            ),
        );
        assert!(is_tls_refusal(&alert));
        // As h2 passes it on: only the text is left.
        let text = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: UnknownCA",
        );
        assert!(is_tls_refusal(&text));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_tls_refusal(&refused));
    }
}
