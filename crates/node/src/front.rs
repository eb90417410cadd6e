//! The HTTP front's threads. Each serves the node's router on a single-threaded runtime of its
//! own; the node's listener, on the shared runtime, hands accepted connections to them in turn.
//! A request, the upstream call it makes and its answer then stay on one thread from the first
//! byte to the last: on the shared runtime they moved between its workers, each waking the
//! other about once per call (futex and eventfd syscalls, context switches), about a quarter
//! of a sequential read-only MCP call's CPU (README, "The MCP front").
//!
//! What a request spawns (an MCP session's tasks, an A2A stream) runs on its thread's runtime,
//! which lives until the node stops; actors, Raft, the audit writer and everything else stay on
//! the shared runtime.
//!
//! Each thread also keeps a timer pending (`wake_floor`): tokio wakes a runtime's driver (an
//! eventfd write, then a turn of its I/O loop that finds nothing) whenever a timer is set to go
//! off before the runtime's next wake, and with no other timer pending that was every call's
//! upstream deadline.

use axum::serve::Listener;
use std::io;
use std::net::SocketAddr;
use std::thread;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// One connection handed to a front thread: the socket out of the shared runtime's reactor.
type Handed = (std::net::TcpStream, SocketAddr);

/// How often a front thread's floor timer goes off: an upstream's deadline (30 s unless set,
/// seldom under a second) then falls after the runtime's next wake and sets no wake of its own.
const WAKE_FLOOR: Duration = Duration::from_secs(1);

/// How many front threads a node runs unless told (`http-threads`): one per core the process
/// may use.
pub fn threads() -> usize {
    thread::available_parallelism().map_or(1, usize::from)
}

/// The connections one front thread serves, as axum's listener.
#[derive(Debug)]
pub struct Handoff {
    connections: mpsc::UnboundedReceiver<Handed>,
    local: SocketAddr,
}

impl Listener for Handoff {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Some((stream, peer)) = self.connections.recv().await else {
                // The acceptor is gone (the node stops): nothing more comes.
                return std::future::pending().await;
            };
            match TcpStream::from_std(stream) {
                Ok(stream) => return (stream, peer),
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "an HTTP connection could not join its thread")
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// Accepts on `listener` and hands each connection (NODELAY set) to the next of `threads` front
/// threads, each running `serve` on its own runtime with its [`Handoff`] until `stopped`; with
/// none, `serve` runs on the current runtime. The handle ends once every thread has ended
/// (their graceful shutdowns included).
pub fn spawn<S, F>(
    listener: TcpListener,
    threads: usize,
    stopped: watch::Receiver<bool>,
    serve: S,
) -> io::Result<JoinHandle<()>>
where
    S: Fn(Handoff, watch::Receiver<bool>) -> F + Clone + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let local = listener.local_addr()?;
    if threads == 0 {
        let (queue, connections) = mpsc::unbounded_channel();
        let served = tokio::spawn(serve(Handoff { connections, local }, stopped.clone()));
        return Ok(tokio::spawn(async move {
            hand_out(listener, vec![queue], stopped).await;
            let _ = served.await;
        }));
    }
    let mut queues = Vec::new();
    let mut ended = Vec::new();
    for i in 0..threads {
        let (queue, connections) = mpsc::unbounded_channel();
        let (done, end) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(format!("gatehouse-http-{i}"))
            .build()?;
        let serve = serve.clone();
        let stopped = stopped.clone();
        thread::Builder::new()
            .name(format!("gatehouse-http-{i}"))
            .spawn(move || {
                runtime.block_on(async {
                    // Dropped with the runtime, once serve has ended.
                    tokio::spawn(wake_floor());
                    serve(Handoff { connections, local }, stopped).await
                });
                drop(done);
            })?;
        queues.push(queue);
        ended.push(end);
    }
    Ok(tokio::spawn(async move {
        hand_out(listener, queues, stopped).await;
        for end in ended {
            let _ = end.await;
        }
    }))
}

/// Keeps a timer pending on the current runtime, going off every [`WAKE_FLOOR`], so that the
/// runtime always has a next wake no later than that. tokio wakes the driver when a timer is
/// registered ahead of the next wake (`time::Handle::reregister`), and a thread with no timer
/// pending has none: each call's `tokio::time::timeout` on its upstream then cost an eventfd
/// write and an empty turn of the I/O loop (0.6 `write` and 0.45 `epoll_wait` a call more, in
/// `perf stat` of the MCP benchmark). A timer behind the floor is only put in the wheel.
async fn wake_floor() {
    loop {
        tokio::time::sleep(WAKE_FLOOR).await;
    }
}

/// The acceptor: connections to the threads in turn, until the node stops.
async fn hand_out(
    mut listener: TcpListener,
    queues: Vec<mpsc::UnboundedSender<Handed>>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut next = 0;
    loop {
        let (stream, peer) = tokio::select! {
            _ = stopped.wait_for(|s| *s) => return,
            (stream, peer) = Listener::accept(&mut listener) => (stream, peer),
        };
        // An answer streamed as SSE is several small writes: without NODELAY each waits for
        // the client's delayed ACK (40 ms).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "TCP_NODELAY not set on an HTTP connection");
        }
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "an HTTP connection could not be handed over");
                continue;
            }
        };
        // A thread that is gone (its serve ended early) takes nothing more; the next one does.
        let mut handed = Some((stream, peer));
        for _ in 0..queues.len() {
            let queue = &queues[next % queues.len()];
            next += 1;
            match queue.send(handed.take().expect("a connection to hand over")) {
                Ok(()) => break,
                Err(mpsc::error::SendError(back)) => handed = Some(back),
            }
        }
        if handed.is_some() {
            tracing::error!("no HTTP front thread is serving; the listener stops");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A front whose serve answers each connection, in a task of its own as a connection is
    /// served, with what `answer` makes of it on the thread that took it.
    async fn answering_front<A, F>(
        threads: usize,
        answer: A,
    ) -> (SocketAddr, watch::Sender<bool>, JoinHandle<()>)
    where
        A: Fn() -> F + Clone + Send + 'static,
        F: Future<Output = String> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let serve = move |mut handoff: Handoff, mut stopped: watch::Receiver<bool>| {
            let answer = answer.clone();
            async move {
                loop {
                    tokio::select! {
                        () = async { let _ = stopped.wait_for(|s| *s).await; } => return,
                        (stream, _) = handoff.accept() => drop(tokio::spawn({
                            let said = answer();
                            async move {
                                let said = said.await;
                                let _ = tokio::io::AsyncWriteExt::write_all(
                                    &mut { stream },
                                    said.as_bytes(),
                                )
                                .await;
                            }
                        })),
                    }
                }
            }
        };
        let handle = spawn(listener, threads, stopped, serve).unwrap();
        (addr, stop, handle)
    }

    /// A front that answers each connection with the name of the thread that took it.
    async fn naming_front(threads: usize) -> (SocketAddr, watch::Sender<bool>, JoinHandle<()>) {
        answering_front(threads, || async {
            thread::current().name().unwrap_or("?").to_owned()
        })
        .await
    }

    async fn served_by(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut name = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut name)
            .await
            .unwrap();
        name
    }

    #[tokio::test]
    async fn connections_go_to_the_front_threads_in_turn_and_stop_ends_them_all() {
        let (addr, stop, handle) = naming_front(2).await;
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(served_by(addr).await);
        }
        assert_eq!(
            names,
            [
                "gatehouse-http-0",
                "gatehouse-http-1",
                "gatehouse-http-0",
                "gatehouse-http-1"
            ]
        );
        stop.send(true).unwrap();
        handle.await.unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the listener is closed once the front has stopped"
        );
    }

    /// Write syscalls this thread has made so far (Linux's per-thread I/O accounting).
    fn writes_so_far() -> Option<u64> {
        let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
        io.lines()
            .find_map(|line| line.strip_prefix("syscw:"))?
            .trim()
            .parse()
            .ok()
    }

    #[tokio::test]
    async fn a_calls_deadline_on_a_front_thread_does_not_wake_its_driver() {
        if writes_so_far().is_none() {
            eprintln!("skipped: no /proc/thread-self/io to count a thread's write syscalls");
            return;
        }
        // Each connection is answered with the write syscalls its thread made while a call's
        // upstream deadline (30 s, the default) ran around work finished on the same thread.
        let (addr, stop, handle) = answering_front(1, || async {
            let before = writes_so_far().unwrap();
            let (answer, answered) = oneshot::channel();
            tokio::spawn(async move {
                let _ = answer.send(());
            });
            let _ = tokio::time::timeout(Duration::from_secs(30), answered).await;
            (writes_so_far().unwrap() - before).to_string()
        })
        .await;
        // The first may come before the thread has ever parked, and so before its runtime took
        // the floor as its next wake.
        served_by(addr).await;
        let mut writes = Vec::new();
        for _ in 0..5 {
            writes.push(served_by(addr).await);
        }
        assert_eq!(
            writes, ["0"; 5],
            "setting a call's deadline wrote to the runtime's eventfd"
        );
        stop.send(true).unwrap();
        handle.await.unwrap();
    }

    #[tokio::test]
    async fn with_no_threads_the_front_serves_on_the_current_runtime() {
        let (addr, stop, handle) = naming_front(0).await;
        let name = served_by(addr).await;
        assert!(!name.starts_with("gatehouse-http-"), "{name}");
        stop.send(true).unwrap();
        handle.await.unwrap();
    }
}
