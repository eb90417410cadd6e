//! A listener under TLS, for both of the node's: TCP connections are accepted and each handshake
//! runs in its own task, so a slow or silent client delays only itself; axum (as a
//! [`Listener`]) and tonic (as a [`Stream`]) are handed finished TLS streams. A client that
//! skips TLS is told, in its own protocol, that the node requires it.

use super::HANDSHAKE_TIMEOUT;
use axum::serve::Listener;
use futures::Stream;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;

/// At most this many handshakes run at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// The first byte of every TLS connection: the type of a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The protocol a client that skips TLS speaks, and is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plaintext {
    /// HTTP/1.1: `400` with a line of text.
    Http,
    /// gRPC over HTTP/2: every call ends `UNAVAILABLE` with a message.
    Grpc,
}

/// Accepted, handshaken connections, ready for axum.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` with TCP_NODELAY set on every connection; a client that
    /// skips TLS is answered in `plaintext`. Accepting, and every handshake still running, stop
    /// when this listener is dropped.
    pub fn new<L>(listener: L, config: Arc<ServerConfig>, plaintext: Plaintext) -> io::Result<Self>
    where
        L: Listener<Io = TcpStream, Addr = SocketAddr>,
    {
        let local = listener.local_addr()?;
        let (handshaken, ready) = mpsc::channel(16);
        let acceptor = TlsAcceptor::from(config);
        tokio::spawn(accept(listener, acceptor, plaintext, handshaken));
        Ok(TlsListener { ready, local })
    }
}

/// tonic's view: a stream of connections that never fails (failed handshakes are left out).
impl Stream for TlsListener {
    type Item = io::Result<TlsStream<TcpStream>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.ready
            .poll_recv(cx)
            .map(|ready| ready.map(|(stream, _)| Ok(stream)))
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop only ends once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Accepts until the listener's receiving end is dropped; each connection's handshake runs in
/// a task of its own, bounded by [`HANDSHAKE_TIMEOUT`].
async fn accept(
    mut listener: impl Listener<Io = TcpStream, Addr = SocketAddr>,
    acceptor: TlsAcceptor,
    plaintext: Plaintext,
    handshaken: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        while handshakes.try_join_next().is_some() {}
        if handshakes.len() >= MAX_HANDSHAKES {
            tokio::select! {
                _ = handshakes.join_next() => continue,
                () = handshaken.closed() => return,
            }
        }
        // The listener retries what accepting fails with (out of descriptors: after a pause).
        let (tcp, peer) = tokio::select! {
            () = handshaken.closed() => return,
            accepted = listener.accept() => accepted,
        };
        // An answer streamed as SSE is several small writes: without NODELAY each waits for the
        // client's delayed ACK (40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY not set on an HTTPS connection");
        }
        let acceptor = acceptor.clone();
        let handshaken = handshaken.clone();
        handshakes.spawn(async move {
            let handshake = handshake(&acceptor, plaintext, tcp);
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                Ok(Ok(Some(stream))) => {
                    let _ = handshaken.send((stream, peer)).await;
                }
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// The TLS stream, or `None` when the client closed at once or skipped TLS (and was told).
async fn handshake(
    acceptor: &TlsAcceptor,
    plaintext: Plaintext,
    tcp: TcpStream,
) -> io::Result<Option<TlsStream<TcpStream>>> {
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await? == 0 {
        return Ok(None);
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        match plaintext {
            Plaintext::Http => super::plaintext::refuse_http(tcp).await?,
            Plaintext::Grpc => super::plaintext::refuse_grpc(tcp).await?,
        }
        return Ok(None);
    }
    acceptor.accept(tcp).await.map(Some)
}
