//! A TCP delay proxy in front of each node's gRPC listener, since this kernel has no netem to
//! add latency. Peers reach a node through its proxy (the node advertises the proxy's address),
//! and every chunk each way waits for the delay the nemesis sets before it is written on. The
//! proxy connects onwards from the address the connection came from, so the firewall's rule
//! between two nodes' addresses still cuts that pair through it. It lives for the whole campaign,
//! across kills and restarts of its node, and never buffers without bound: a full delay line
//! stops reading, and TCP pushes back.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Chunks in flight each way, at most [`CHUNK`] bytes each.
const LINE: usize = 1024;
const CHUNK: usize = 16 * 1024;
/// As long as a node gives a connection to a peer: a SYN the firewall drops is not waited on
/// for TCP's own minutes, and the node behind the proxy sees its connection fail.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One proxy; dropping it stops it and every connection through it.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Microseconds each chunk read from now on waits.
    delay: AtomicU64,
    /// Where connections go: unknown until the node behind reported its address.
    target: Mutex<Option<SocketAddr>>,
}

impl Proxy {
    /// Listens on `listen` (port 0 for any); connections are refused until [`Proxy::set_target`].
    /// Must be called within a tokio runtime.
    pub fn start(listen: SocketAddr) -> io::Result<Proxy> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn(accept(listener, shared.clone()));
        Ok(Proxy {
            addr,
            shared,
            accept,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_target(&self, target: SocketAddr) {
        *self.shared.target.lock().expect("target lock") = Some(target);
    }

    /// The delay for chunks read from now on; chunks already waiting keep theirs.
    pub fn set_delay(&self, delay: Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay.store(micros, Ordering::Relaxed);
    }

    pub fn delay(&self) -> Duration {
        Duration::from_micros(self.shared.delay.load(Ordering::Relaxed))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept task owns every connection's task: aborting it ends them all.
        self.accept.abort();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, peer)) = accepted else {
                    // Out of descriptors, say: give the connections a moment to end.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let target = *shared.target.lock().expect("target lock");
                if let Some(target) = target {
                    connections.spawn(connection(inbound, peer.ip(), target, shared.clone()));
                }
            }
            Some(_) = connections.join_next() => {}
        }
    }
}

/// One connection, both ways, until both sides closed or either failed.
async fn connection(inbound: TcpStream, from: IpAddr, target: SocketAddr, shared: Arc<Shared>) {
    let Ok(Ok(outbound)) = tokio::time::timeout(CONNECT_TIMEOUT, connect(from, target)).await
    else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    // An error either way drops both sockets; an end either way is passed on as one.
    let _ = tokio::try_join!(
        delay_line(in_read, out_write, &shared),
        delay_line(out_read, in_write, &shared),
    );
}

/// Connects to `target` from `from`, the address the proxied connection came from.
async fn connect(from: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(target).await
}

/// Copies `from` to `to`, each chunk written no earlier than the delay after it was read, in
/// order; at the end of `from`, shuts `to` down once everything read was written.
async fn delay_line(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &Shared,
) -> io::Result<()> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(LINE);
    let read = async move {
        loop {
            let mut chunk = vec![0; CHUNK];
            let n = from.read(&mut chunk).await?;
            if n == 0 {
                return Ok::<_, io::Error>(());
            }
            chunk.truncate(n);
            let delay = Duration::from_micros(shared.delay.load(Ordering::Relaxed));
            if tx.send((Instant::now() + delay, chunk)).await.is_err() {
                // The writer failed; it says why.
                return Ok(());
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            to.write_all(&chunk).await?;
        }
        to.shutdown().await
    };
    tokio::try_join!(read, write).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const DELAY: Duration = Duration::from_millis(500);

    /// An echo server on `ip`; it first writes the peer address it saw, as one line.
    async fn echo(ip: &str) -> SocketAddr {
        let listener = TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut stream, peer) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let _ = stream
                        .write_all(format!("{}\n", peer.ip()).as_bytes())
                        .await;
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// Connects to `proxy` from `ip`; returns the stream and the echo server's first line.
    async fn client(ip: &str, proxy: SocketAddr) -> (TcpStream, String) {
        let socket = TcpSocket::new_v4().unwrap();
        socket
            .bind((ip.parse::<IpAddr>().unwrap(), 0).into())
            .unwrap();
        let mut stream = socket.connect(proxy).await.unwrap();
        let mut line = Vec::new();
        loop {
            let byte = stream.read_u8().await.unwrap();
            if byte == b'\n' {
                break;
            }
            line.push(byte);
        }
        (stream, String::from_utf8(line).unwrap())
    }

    async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Duration {
        let start = Instant::now();
        stream.write_all(message).await.unwrap();
        let mut back = vec![0; message.len()];
        stream.read_exact(&mut back).await.unwrap();
        assert_eq!(back, message);
        start.elapsed()
    }

    async fn proxied() -> Proxy {
        let proxy = Proxy::start("127.0.0.1:0".parse().unwrap()).unwrap();
        proxy.set_target(echo("127.0.0.1").await);
        proxy
    }

    #[tokio::test]
    async fn bytes_arrive_intact_and_in_order() {
        let proxy = proxied().await;
        let (mut stream, _) = client("127.0.0.1", proxy.addr()).await;
        // More than a chunk and more than a socket buffer, so it is split and pushed back.
        let message: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = stream.split();
        let send = async {
            w.write_all(&message).await.unwrap();
        };
        let receive = async {
            let mut back = vec![0; message.len()];
            r.read_exact(&mut back).await.unwrap();
            back
        };
        let ((), back) = tokio::join!(send, receive);
        assert!(back == message, "the echo differs from what was sent");
    }

    #[tokio::test]
    async fn a_delay_holds_traffic_and_clearing_it_does_not() {
        let proxy = proxied().await;
        let (mut stream, _) = client("127.0.0.1", proxy.addr()).await;
        proxy.set_delay(DELAY);
        let delayed = round_trip(&mut stream, b"slow").await;
        // Each way waits the delay.
        assert!(delayed >= DELAY * 2, "a round trip took {delayed:?}");
        proxy.set_delay(Duration::ZERO);
        let cleared = round_trip(&mut stream, b"fast").await;
        assert!(
            cleared < DELAY,
            "a round trip after clearing took {cleared:?}"
        );
    }

    #[tokio::test]
    async fn connects_onwards_from_the_clients_address() {
        let proxy = proxied().await;
        let (mut stream, seen) = client("127.0.0.21", proxy.addr()).await;
        assert_eq!(seen, "127.0.0.21");
        round_trip(&mut stream, b"hello").await;
    }

    #[tokio::test]
    async fn refuses_connections_until_it_has_a_target() {
        let proxy = Proxy::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut buf = [0; 1];
        assert_eq!(stream.read(&mut buf).await.unwrap(), 0);
    }
}
