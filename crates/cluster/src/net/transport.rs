//! How a node reaches its peers, and what it asks of peers that reach it: plain HTTP/2, or TLS
//! trusting the cluster's CA, with client certificates under `peer-mtls`. Every channel to a
//! peer (Raft, forwarded writes, join, membership calls passed to the leader) is built by
//! [`PeerTransport::endpoint`]; the shared channels connect through [`Dialer`], which can
//! abort them.

use crate::tls::{NodeTls, Probe};
use futures::task::AtomicWaker;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::rustls;
use tonic::transport::{ClientTlsConfig, Endpoint, Uri};

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

/// Opens the TCP connections of the shared peer channels: from the node's own loopback address
/// when it has one, without Nagle's delay, with a zero linger, and each abortable by address
/// ([`Dialer::abort`]). A connection that stalled (its peer cut off) holds heartbeats and
/// entries that the peer would otherwise get when the path heals, at TCP's next retransmission,
/// up to seconds late; a peer that takes a dead leader's late heartbeat for a live one refuses
/// to elect its successor. Aborting fails the connection at once (HTTP/2's own close would wait
/// on the stalled socket) and closing it with a zero linger resets it, so the kernel throws away
/// what it still queued.
#[derive(Debug, Clone, Default)]
pub struct Dialer {
    source: Option<IpAddr>,
    open: Arc<Mutex<HashMap<String, Vec<Weak<Abort>>>>>,
}

impl Dialer {
    pub fn new(source: Option<IpAddr>) -> Dialer {
        Dialer {
            source,
            open: Arc::default(),
        }
    }

    /// Fails every open connection to `addr` (as the channel's URI names it); their channels
    /// connect anew on their next call.
    pub fn abort(&self, addr: &str) {
        let open = self
            .open
            .lock()
            .expect("dialer lock")
            .remove(addr)
            .unwrap_or_default();
        for conn in open.iter().filter_map(Weak::upgrade) {
            conn.abort();
        }
    }
}

impl tower::Service<Uri> for Dialer {
    type Response = Conn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Conn>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let dialer = self.clone();
        Box::pin(async move {
            let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no host"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri
                .port_u16()
                .unwrap_or(if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                });
            let mut last = None;
            for addr in tokio::net::lookup_host((host, port)).await? {
                match dial(addr, dialer.source).await {
                    Ok(stream) => {
                        let abort = Arc::new(Abort::default());
                        let mut open = dialer.open.lock().expect("dialer lock");
                        let conns = open.entry(authority).or_default();
                        conns.retain(|c| c.strong_count() > 0);
                        conns.push(Arc::downgrade(&abort));
                        return Ok(Conn {
                            io: TokioIo::new(stream),
                            abort,
                        });
                    }
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
            }))
        })
    }
}

async fn dial(addr: SocketAddr, source: Option<IpAddr>) -> io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = source.filter(|ip| ip.is_ipv4() == addr.is_ipv4()) {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    socket.set_nodelay(true)?;
    socket.set_zero_linger()?;
    socket.connect(addr).await
}

/// Whether a connection was aborted, and who to wake when it is.
#[derive(Debug, Default)]
pub struct Abort {
    aborted: AtomicBool,
    reader: AtomicWaker,
    writer: AtomicWaker,
}

impl Abort {
    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        self.reader.wake();
        self.writer.wake();
    }

    fn check(&self, waker: &AtomicWaker, cx: &Context<'_>) -> io::Result<()> {
        waker.register(cx.waker());
        if self.aborted.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the peer answered nothing for too long: reconnecting",
            ));
        }
        Ok(())
    }
}

/// A peer connection [`Dialer::abort`] can fail.
#[derive(Debug)]
pub struct Conn {
    io: TokioIo<TcpStream>,
    abort: Arc<Abort>,
}

#[cfg(test)]
impl Conn {
    /// The socket, to look at its options.
    pub fn tcp(&self) -> &TcpStream {
        self.io.inner()
    }
}

impl hyper::rt::Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.abort.check(&this.abort.reader, cx)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.abort.check(&this.abort.writer, cx)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.abort.check(&this.abort.writer, cx)?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.abort.check(&this.abort.writer, cx)?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.abort.check(&this.abort.writer, cx)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::Dialer;
    use std::time::Duration;
    use tower::Service;

    #[tokio::test]
    async fn a_peer_connection_is_dialled_without_delay_and_with_a_zero_linger() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let uri = format!("http://{}", listener.local_addr().expect("addr"))
            .parse()
            .expect("a URI");
        let conn = Dialer::new(None).call(uri).await.expect("connects");
        assert!(conn.tcp().nodelay().expect("nodelay"));
        #[allow(deprecated)] // Reading the option, not setting it.
        let linger = conn.tcp().linger().expect("linger");
        assert_eq!(linger, Some(Duration::ZERO));
    }
}
