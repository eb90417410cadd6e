//! The HTTP listener under TLS, as an axum [`Listener`]: TCP connections are accepted and each
//! handshake runs in its own task, so a slow or silent client delays only itself; axum is handed
//! finished TLS streams. A client that speaks plain HTTP is answered `400` in plain text saying
//! that the node serves HTTPS only.

use super::HANDSHAKE_TIMEOUT;
use axum::serve::Listener;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;

/// At most this many handshakes run at once; further connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

/// The first byte of every TLS connection: the type of a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What a plain HTTP request gets.
const PLAINTEXT_ANSWER: &str = "HTTP/1.1 400 Bad Request\r\n\
    content-type: text/plain; charset=utf-8\r\n\
    connection: close\r\n\
    content-length: 58\r\n\r\n\
    this node serves HTTPS only: use https:// and its CA cert\n";

/// Accepted, handshaken connections, ready for axum.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `listener` with TCP_NODELAY set on every connection. Accepting, and
    /// every handshake still running, stop when this listener is dropped.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (handshaken, ready) = mpsc::channel(16);
        tokio::spawn(accept(listener, TlsAcceptor::from(config), handshaken));
        Ok(TlsListener { ready, local })
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
    listener: TcpListener,
    acceptor: TlsAcceptor,
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
        let (tcp, peer) = tokio::select! {
            () = handshaken.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, most likely: give the others a moment to close.
                    tracing::warn!(error = %e, "accepting an HTTPS connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // An answer streamed as SSE is several small writes: without NODELAY each waits for the
        // client's delayed ACK (40 ms).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY not set on an HTTPS connection");
        }
        let acceptor = acceptor.clone();
        let handshaken = handshaken.clone();
        handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(&acceptor, tcp)).await {
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

/// The TLS stream, or `None` when the client closed at once or spoke plain HTTP (and was told).
async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
) -> io::Result<Option<TlsStream<TcpStream>>> {
    let mut first = [0u8; 1];
    if tcp.peek(&mut first).await? == 0 {
        return Ok(None);
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        refuse_plaintext(tcp).await?;
        return Ok(None);
    }
    acceptor.accept(tcp).await.map(Some)
}

/// Reads the plain request's first bytes, answers 400, and waits for the client to close, so
/// that unread request bytes do not turn the close into a reset that loses the answer.
async fn refuse_plaintext(mut tcp: TcpStream) -> io::Result<()> {
    let mut discard = [0u8; 8192];
    let _ = tcp.read(&mut discard).await?;
    tcp.write_all(PLAINTEXT_ANSWER.as_bytes()).await?;
    tcp.shutdown().await?;
    while tcp.read(&mut discard).await? > 0 {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plaintext_answer_declares_its_body_length() {
        let (head, body) = PLAINTEXT_ANSWER.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
    }
}
