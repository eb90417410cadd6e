//! The keep-alive HTTP/1.1 connections a thread posts MCP calls through (`mcp_post.rs`). Each
//! thread keeps its own idle connections, each driven by a task on the runtime that opened it,
//! so a call made on one of the node's HTTP front threads is written, answered and read on that
//! thread, and no other thread is woken to carry it.
//!
//! hyper_util's pooled client, which calls went through before, kept connections the same way
//! but paid on every call for what a shared pool needs: the `(scheme, authority)` key hashed
//! with SipHash about five times, a checkout racing a lazily built connect, the connection
//! wrapped and unwrapped, and trace events (about 9 thousand instructions a call; README, "The
//! MCP front"). Here a thread's idle connections are a short list per upstream, behind a lock
//! that only the thread and its reaper take. A request on a connection the upstream closed while it sat idle is made once more on
//! a new one when it was never written, as hyper_util's client did.

use bytes::Bytes;
use http::uri::{Authority, Uri};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

/// How long a connection may sit unused before it is closed.
pub(super) const IDLE: Duration = Duration::from_secs(90);
/// The most idle connections a thread keeps to one upstream; one given back past it is closed.
const MAX_IDLE_PER_UPSTREAM: usize = 64;

type Sender = SendRequest<Full<Bytes>>;

/// A connection to an upstream, with whether it was kept from an earlier call.
pub(super) struct Connection {
    sender: Sender,
    authority: Authority,
    reused: bool,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

/// One thread's idle connections, by upstream, and the task that closes those idle too long.
#[derive(Default)]
struct Pool {
    by_authority: Vec<(Authority, Vec<Idle>)>,
    reaper: Option<AbortHandle>,
}

thread_local! {
    // Shared with the thread's reaper, which may run on another worker of a multi-threaded
    // runtime: it sweeps this pool, not the thread-local of wherever it runs.
    static POOL: Arc<Mutex<Pool>> = Arc::default();
}

fn lock(pool: &Mutex<Pool>) -> MutexGuard<'_, Pool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends `request` (origin-form, with its `Host`) to the upstream at `url`, on a connection of
/// this thread's. The connection goes back to the thread's idle ones when its answer has been
/// read: pass it to [`keep`] then. `Err` says why no answer came.
pub(super) async fn send(
    url: &Uri,
    mut request: Request<Full<Bytes>>,
) -> Result<(Response<Incoming>, Connection), SendError> {
    let authority = url.authority().cloned().ok_or(SendError::NoHost)?;
    let mut connection = match take(&authority).await {
        Some(connection) => connection,
        None => open(url, authority.clone()).await?,
    };
    loop {
        match connection.sender.try_send_request(request).await {
            Ok(response) => return Ok((response, connection)),
            Err(mut e) => match e.take_message() {
                // Never written: the upstream closed the idle connection first.
                Some(unsent) if connection.reused => {
                    request = unsent;
                    connection = open(url, authority.clone()).await?;
                }
                _ => return Err(e.into_error().into()),
            },
        }
    }
}

/// Gives a connection back to this thread's idle ones once its answer has been read. One whose
/// answer was left unread (an event stream read up to the call's answer) is closed by hyper
/// unless what is left was already buffered, and is skipped when taken.
pub(super) fn keep(connection: Connection) {
    if connection.sender.is_closed() {
        return;
    }
    let now = Instant::now();
    POOL.with(|shared| {
        let mut pool = lock(shared);
        let pool = &mut *pool;
        let idle = match pool
            .by_authority
            .iter_mut()
            .position(|(authority, _)| *authority == connection.authority)
        {
            Some(at) => &mut pool.by_authority[at].1,
            None => {
                pool.by_authority.push((connection.authority, Vec::new()));
                &mut pool.by_authority.last_mut().expect("just pushed").1
            }
        };
        if idle.len() < MAX_IDLE_PER_UPSTREAM {
            idle.push(Idle {
                sender: connection.sender,
                since: now,
            });
        }
        if pool.reaper.as_ref().is_none_or(AbortHandle::is_finished) {
            pool.reaper = tokio::runtime::Handle::try_current()
                .ok()
                .map(|runtime| runtime.spawn(reap(Arc::downgrade(shared))).abort_handle());
        }
    });
}

/// The most recently kept connection to `authority` that is still open, once it takes a
/// request.
async fn take(authority: &Authority) -> Option<Connection> {
    loop {
        let mut sender = POOL.with(|pool| {
            let mut pool = lock(pool);
            let (_, idle) = pool
                .by_authority
                .iter_mut()
                .find(|(kept, _)| kept == authority)?;
            idle.pop().map(|idle| idle.sender)
        })?;
        if sender.is_closed() {
            continue;
        }
        // The connection's task marks it ready once it has finished reading the last answer,
        // which it has nearly always done by the time that answer's reader gave it back.
        if sender.is_ready() || sender.ready().await.is_ok() {
            return Some(Connection {
                sender,
                authority: authority.clone(),
                reused: true,
            });
        }
    }
}

/// A new connection to the upstream at `url`, driven by a task on the current runtime. Only
/// plain `http` is spoken, as by the sessions' own client, which has no TLS.
async fn open(url: &Uri, authority: Authority) -> Result<Connection, SendError> {
    if url.scheme_str() != Some("http") {
        return Err(SendError::NotHttp);
    }
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = TcpStream::connect((host, authority.port_u16().unwrap_or(80)))
        .await
        .map_err(SendError::Connect)?;
    stream.set_nodelay(true).map_err(SendError::Connect)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    // Ends when the connection closes: the upstream closed it, or its sender was dropped.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "an upstream connection ended");
        }
    });
    Ok(Connection {
        sender,
        authority,
        reused: false,
    })
}

/// Closes the connections of `pool` idle longer than [`IDLE`], and ends when none is left.
async fn reap(pool: Weak<Mutex<Pool>>) {
    loop {
        tokio::time::sleep(IDLE / 2).await;
        if !sweep(&pool, Instant::now()) {
            return;
        }
    }
}

/// Sweeps `pool` as at `now`; whether its reaper goes on (connections are left). A reaper that
/// ends says so under the lock, so the next connection kept starts another.
fn sweep(pool: &Weak<Mutex<Pool>>, now: Instant) -> bool {
    let Some(pool) = pool.upgrade() else {
        return false;
    };
    let mut pool = lock(&pool);
    if pool.sweep(now) > 0 {
        return true;
    }
    pool.reaper = None;
    false
}

impl Pool {
    /// Drops the connections idle since before `now - IDLE` or closed; answers how many are
    /// left.
    fn sweep(&mut self, now: Instant) -> usize {
        for (_, idle) in &mut self.by_authority {
            idle.retain(|idle| now.duration_since(idle.since) < IDLE && !idle.sender.is_closed());
        }
        self.by_authority.retain(|(_, idle)| !idle.is_empty());
        self.by_authority.iter().map(|(_, idle)| idle.len()).sum()
    }
}

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum SendError {
    #[error("the upstream's URL names no host")]
    NoHost,
    #[error("only plain http upstreams are reached (the URL's scheme is not http)")]
    NotHttp,
    #[error("connecting to the upstream")]
    Connect(#[source] io::Error),
    #[error(transparent)]
    Http(#[from] hyper::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Connections an upstream accepted, and how many of them have ended.
    #[derive(Default)]
    struct Seen {
        accepted: AtomicUsize,
        ended: AtomicUsize,
    }

    /// A listener on a loopback port, and the `/mcp` URL of it under `scheme`.
    async fn listening(scheme: &str) -> (tokio::net::TcpListener, Uri) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("{scheme}://{}/mcp", listener.local_addr().unwrap());
        (listener, url.parse().unwrap())
    }

    /// An HTTP/1.1 upstream on a loopback port answering every request with `{}`, keeping
    /// connections alive; its URL and what it has seen.
    async fn upstream() -> (Uri, Arc<Seen>) {
        let (listener, url) = listening("http").await;
        let seen = Arc::new(Seen::default());
        let counted = seen.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                counted.accepted.fetch_add(1, Ordering::SeqCst);
                let counted = counted.clone();
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(|_| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{}"))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                    counted.ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        (url, seen)
    }

    fn request(url: &Uri) -> Request<Full<Bytes>> {
        Request::post(url.path())
            .header(http::header::HOST, url.authority().unwrap().as_str())
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap()
    }

    /// Sends a request, reads its answer to the end and keeps the connection; whether the
    /// connection was one kept before.
    async fn exchange(url: &Uri) -> bool {
        let (response, connection) = send(url, request(url)).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{}");
        let reused = connection.reused;
        keep(connection);
        reused
    }

    /// Waits, up to a deadline, until `done` holds.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_connection_whose_answer_was_read_carries_the_next_request() {
        let (url, seen) = upstream().await;
        assert!(
            !exchange(&url).await,
            "the first request opens a connection"
        );
        for _ in 0..5 {
            assert!(exchange(&url).await, "a later request takes the kept one");
        }
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn requests_at_the_same_time_take_a_connection_each_and_all_are_kept() {
        let (url, seen) = upstream().await;
        let (a, b) = tokio::join!(exchange(&url), exchange(&url));
        assert!(!a && !b);
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
        let (a, b) = tokio::join!(exchange(&url), exchange(&url));
        assert!(a && b, "both kept connections are taken again");
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_is_not_taken_again() {
        // Answers one request per connection, then closes it without saying so.
        let (listener, url) = listening("http").await;
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                counted.fetch_add(1, Ordering::SeqCst);
                let mut read = vec![0; 4096];
                let mut len = 0;
                // The request's head and its two-byte body.
                while !read[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    len += tokio::io::AsyncReadExt::read(&mut stream, &mut read[len..])
                        .await
                        .unwrap();
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                tokio::io::AsyncWriteExt::write_all(&mut stream, answer)
                    .await
                    .unwrap();
            }
        });
        let authority = url.authority().unwrap().clone();
        assert!(!exchange(&url).await);
        until("the kept connection is seen closed", || {
            POOL.with(|pool| {
                lock(pool)
                    .by_authority
                    .iter()
                    .filter(|(kept, _)| *kept == authority)
                    .flat_map(|(_, idle)| idle)
                    .all(|idle| idle.sender.is_closed())
            })
        })
        .await;
        assert!(!exchange(&url).await, "a closed connection is not taken");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn connections_idle_too_long_are_closed_by_a_sweep_from_any_thread() {
        let (url, seen) = upstream().await;
        exchange(&url).await;
        let pool = POOL.with(Arc::downgrade);
        // The reaper may run on another worker than the thread whose connections it sweeps.
        let elsewhere = |now: Instant| {
            let pool = pool.clone();
            std::thread::spawn(move || sweep(&pool, now))
                .join()
                .unwrap()
        };
        assert!(
            elsewhere(Instant::now() + IDLE / 2),
            "a connection idle for less than the limit stays"
        );
        assert!(!elsewhere(Instant::now() + IDLE), "nothing is left");
        until("the upstream sees the connection end", || {
            seen.ended.load(Ordering::SeqCst) == 1
        })
        .await;
        assert!(
            POOL.with(|pool| lock(pool).reaper.is_none()),
            "a reaper that found nothing left is gone, so the next kept connection starts one"
        );
        assert!(!exchange(&url).await, "the next request opens a new one");
        assert!(POOL.with(|pool| lock(pool).reaper.is_some()));
    }

    #[tokio::test]
    async fn an_https_upstream_is_never_sent_a_request_in_clear_text() {
        let (listener, url) = listening("https").await;
        let refused = send(&url, request(&url)).await.err();
        assert!(matches!(refused, Some(SendError::NotHttp)), "{refused:?}");
        let nothing = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(nothing.is_err(), "no connection was opened");
    }
}
