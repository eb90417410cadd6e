//! A TLS handshake with a peer on its own, to learn whether the peer accepts this node's
//! certificate. Under TLS 1.3 a server checks the client's certificate after the client has
//! finished its handshake, so a refusal arrives as an alert on the first read; through tonic
//! and h2 that can surface as a closed or reset connection instead. Joining asks this first,
//! for a clear and certain answer.

use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;

/// What a probe learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The handshake completed and the peer spoke first (an HTTP/2 server's SETTINGS), or the
    /// peer serves no TLS to probe.
    Accepted,
    /// No connection (yet): worth a retry.
    Unreachable(String),
    /// One side refused the other's certificate: retrying does not help.
    Refused(String),
}

/// Connects to `addr` (`host:port`), completes a handshake with `config`, and reads the peer's
/// first byte; each step within `within`.
pub async fn handshake(config: Arc<ClientConfig>, addr: &str, within: Duration) -> Probe {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = match ServerName::try_from(host.to_owned()) {
        Ok(name) => name,
        Err(e) => return Probe::Refused(format!("{host:?} is no server name: {e}")),
    };
    let tcp = match timeout(within, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Probe::Unreachable(e.to_string()),
        Err(_) => return Probe::Unreachable(format!("no connection within {within:?}")),
    };
    let mut tls = match timeout(within, TlsConnector::from(config).connect(name, tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return failed(e),
        Err(_) => return Probe::Unreachable(format!("no TLS handshake within {within:?}")),
    };
    let mut first = [0u8; 1];
    match timeout(within, tls.read(&mut first)).await {
        Ok(Ok(0)) => Probe::Refused("the peer closed the connection after the handshake".into()),
        Ok(Ok(_)) => Probe::Accepted,
        Ok(Err(e)) => failed(e),
        // A peer that says nothing has not refused: the call that follows will tell.
        Err(_) => Probe::Accepted,
    }
}

/// A TLS failure is a refusal; any other I/O failure leaves the peer unreachable for now.
fn failed(error: io::Error) -> Probe {
    let tls = error
        .get_ref()
        .is_some_and(|inner| inner.is::<tokio_rustls::rustls::Error>());
    if tls {
        Probe::Refused(error.to_string())
    } else {
        Probe::Unreachable(error.to_string())
    }
}
