//! `RecordingUpstream`: a real HTTP/JSON upstream for tests, on 127.0.0.1 with a port of its
//! own, that records every request the gateway sends it. Tests count executions here, at the
//! far end of the wire, never in the registry.
//!
//! It runs on its own thread and runtime, so it outlives any node a test kills. A request's side
//! effect (an "execution") runs in a task of its own: a caller that goes away mid-request, as a
//! killed node does, does not stop it, just as it would not stop a real service. When asked to,
//! it dedupes by `Idempotency-Key` like a well-behaved service: a repeat gets the first answer
//! and runs nothing.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{OnceCell, oneshot, watch};

use axum::Router;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::routing::any;

/// One request the upstream received, recorded when it arrived (before any hold or delay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The path after the first `/`, percent-decoded: the tool's own name, the part after
    /// `upstream.`, for a tool without an HTTP binding.
    pub tool: String,
    /// The request's method.
    pub method: String,
    /// The request target's path exactly as it arrived on the request line: not decoded, no
    /// dot segment resolved.
    pub raw_path: String,
    pub idempotency_key: Option<String>,
    pub call_id: Option<String>,
    pub tenant: Option<String>,
    /// The request body as sent: the call's canonical JSON arguments.
    pub body: String,
    /// `Gatehouse-Skill-Context`, decoded from base64url; the raw header if it does not decode.
    pub skill_context: Option<String>,
    pub authorization: Option<String>,
    /// Unix milliseconds, comparable with the registry's timestamps.
    pub at_unix_ms: u64,
}

/// How one execution answered: status and body.
type Answer = (u16, String);

#[derive(Debug, Default)]
struct Log {
    invocations: Vec<Invocation>,
    /// Executions per idempotency key (requests without one are counted under "").
    executions: HashMap<String, usize>,
}

struct Shared {
    log: Mutex<Log>,
    changed: Condvar,
    held: watch::Sender<HashSet<String>>,
    delay: Mutex<Duration>,
    dedupe: AtomicBool,
    responses: Mutex<HashMap<String, Answer>>,
    /// The first answer per idempotency key, while deduping.
    first: Mutex<HashMap<String, Arc<OnceCell<Answer>>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub struct RecordingUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RecordingUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RecordingUpstream {
    /// Starts the upstream on 127.0.0.1 with a free port.
    pub fn start() -> RecordingUpstream {
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").expect("binding the test upstream");
        let addr = listener.local_addr().expect("the test upstream's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            log: Mutex::default(),
            changed: Condvar::new(),
            held: watch::Sender::new(HashSet::new()),
            delay: Mutex::default(),
            dedupe: AtomicBool::new(false),
            responses: Mutex::default(),
            first: Mutex::default(),
        });
        let (stop, stopped) = oneshot::channel();
        let app = Router::new()
            .route("/{*tool}", any(invoke))
            .with_state(shared.clone());
        let thread = std::thread::Builder::new()
            .name("recording-upstream".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the test upstream's runtime");
                runtime.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                    // Not graceful: a held request must not keep the upstream from stopping.
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
                runtime.shutdown_background();
            })
            .expect("the test upstream's thread");
        RecordingUpstream {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The base URL to declare for an `http` upstream: tools are POSTed to `{url}/{tool}`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order of arrival.
    pub fn invocations(&self) -> Vec<Invocation> {
        lock(&self.shared.log).invocations.clone()
    }

    /// Requests received that named this call id (`Gatehouse-Call-Id`).
    pub fn count_for(&self, call_id: &str) -> usize {
        lock(&self.shared.log)
            .invocations
            .iter()
            .filter(|i| i.call_id.as_deref() == Some(call_id))
            .count()
    }

    /// How many times the side effect really ran for this idempotency key: every request
    /// counts unless deduping, where only the first of a key does.
    pub fn executions_for(&self, idempotency_key: &str) -> usize {
        lock(&self.shared.log)
            .executions
            .get(idempotency_key)
            .copied()
            .unwrap_or(0)
    }

    /// Side effects run so far, over every key.
    pub fn executions(&self) -> usize {
        lock(&self.shared.log).executions.values().sum()
    }

    /// Dedupe by `Idempotency-Key` from now on: a request whose key already ran (or is running)
    /// gets that first answer and runs nothing.
    pub fn dedupe_by_key(&self, on: bool) {
        self.shared.dedupe.store(on, Ordering::SeqCst);
    }

    /// Requests to `tool` wait, after being recorded and before running, until `release`.
    pub fn hold(&self, tool: &str) {
        self.shared.held.send_modify(|held| {
            held.insert(tool.to_owned());
        });
    }

    pub fn release(&self, tool: &str) {
        self.shared.held.send_modify(|held| {
            held.remove(tool);
        });
    }

    /// Every request waits this long before running.
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.shared.delay) = delay;
    }

    /// What `tool` answers from now on. By default: 200 and
    /// `{"tool": ..., "arguments": ..., "execution": n}`.
    pub fn set_response(&self, tool: &str, status: u16, body: &str) {
        lock(&self.shared.responses).insert(tool.to_owned(), (status, body.to_owned()));
    }

    /// Waits until the recorded invocations satisfy `done`, up to `timeout`; whether they did.
    /// Blocks the calling thread (the upstream runs on its own).
    pub fn wait_until(&self, timeout: Duration, done: impl Fn(&[Invocation]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        let mut log = lock(&self.shared.log);
        loop {
            if done(&log.invocations) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            log = self
                .shared
                .changed
                .wait_timeout(log, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until `tool` has received at least `n` requests.
    pub fn wait_for_count(&self, tool: &str, n: usize, timeout: Duration) -> bool {
        self.wait_until(timeout, |all| {
            all.iter().filter(|i| i.tool == tool).count() >= n
        })
    }
}

impl Drop for RecordingUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn invoke(
    State(shared): State<Arc<Shared>>,
    Path(tool): Path<String>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let skill_context = header("gatehouse-skill-context").map(|raw| {
        URL_SAFE_NO_PAD
            .decode(&raw)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .unwrap_or(raw)
    });
    let invocation = Invocation {
        tool: tool.clone(),
        method: method.to_string(),
        raw_path: uri.path().to_owned(),
        idempotency_key: header("idempotency-key"),
        call_id: header("gatehouse-call-id"),
        tenant: header("gatehouse-tenant"),
        body: body.clone(),
        skill_context,
        authorization: header("authorization"),
        at_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    };
    let key = invocation.idempotency_key.clone();
    lock(&shared.log).invocations.push(invocation);
    shared.changed.notify_all();
    // The side effect runs to the end even if the caller goes away meanwhile.
    let (status, body) = tokio::spawn(execute(shared, tool, key, body))
        .await
        .unwrap_or((500, "the test upstream's task failed".into()));
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        body,
    )
}

async fn execute(shared: Arc<Shared>, tool: String, key: Option<String>, body: String) -> Answer {
    let mut held = shared.held.subscribe();
    let _ = held.wait_for(|held| !held.contains(&tool)).await;
    let delay = *lock(&shared.delay);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let dedupe = shared.dedupe.load(Ordering::SeqCst);
    match key.as_deref().filter(|_| dedupe) {
        Some(key) => {
            let first = lock(&shared.first)
                .entry(key.to_owned())
                .or_default()
                .clone();
            first
                .get_or_init(|| async { run(&shared, &tool, key, &body) })
                .await
                .clone()
        }
        None => run(&shared, &tool, key.as_deref().unwrap_or(""), &body),
    }
}

/// The side effect: counted, and answered.
fn run(shared: &Shared, tool: &str, key: &str, body: &str) -> Answer {
    let execution = {
        let mut log = lock(&shared.log);
        let count = log.executions.entry(key.to_owned()).or_default();
        *count += 1;
        *count
    };
    shared.changed.notify_all();
    if let Some(answer) = lock(&shared.responses).get(tool) {
        return answer.clone();
    }
    let arguments = serde_json::from_str::<serde_json::Value>(body)
        .unwrap_or_else(|_| serde_json::Value::String(body.to_owned()));
    let answer = serde_json::json!({"tool": tool, "arguments": arguments, "execution": execution});
    (200, answer.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A bare HTTP/1.1 POST, so the test needs no client library; (status, body).
    fn post(
        upstream: &RecordingUpstream,
        tool: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(upstream.addr).unwrap();
        let mut request = format!(
            "POST /{tool} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n",
            upstream.addr,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer[9..12].parse().unwrap();
        let body = answer.split_once("\r\n\r\n").unwrap().1.to_owned();
        (status, body)
    }

    #[test]
    fn records_what_the_gateway_sends() {
        let upstream = RecordingUpstream::start();
        let context = URL_SAFE_NO_PAD.encode("Be brief.");
        let (status, body) = post(
            &upstream,
            "create_refund",
            &[
                ("Idempotency-Key", "call_1"),
                ("Gatehouse-Call-Id", "call_1"),
                ("Gatehouse-Tenant", "acme"),
                ("Gatehouse-Skill-Context", &context),
            ],
            r#"{"amount":5}"#,
        );
        assert_eq!(status, 200);
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["arguments"]["amount"], 5);
        let seen = upstream.invocations();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].tool, "create_refund");
        assert_eq!(
            (seen[0].method.as_str(), seen[0].raw_path.as_str()),
            ("POST", "/create_refund")
        );
        assert_eq!(seen[0].tenant.as_deref(), Some("acme"));
        assert_eq!(seen[0].skill_context.as_deref(), Some("Be brief."));
        assert_eq!(seen[0].body, r#"{"amount":5}"#);
        assert_eq!(upstream.count_for("call_1"), 1);
        assert_eq!(upstream.executions_for("call_1"), 1);

        upstream.set_response("boom", 503, "down");
        assert_eq!(post(&upstream, "boom", &[], "{}"), (503, "down".into()));
    }

    #[test]
    fn the_request_line_is_recorded_as_it_arrived() {
        let upstream = RecordingUpstream::start();
        let mut stream = std::net::TcpStream::connect(upstream.addr).unwrap();
        let request = "GET /tenants/acme/items/../%2e%2E/summary HTTP/1.1\r\nHost: x\r\n\
             Connection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let seen = upstream.invocations();
        assert_eq!(seen[0].method, "GET");
        assert_eq!(seen[0].raw_path, "/tenants/acme/items/../%2e%2E/summary");
    }

    #[test]
    fn repeats_run_again_unless_deduping_by_key() {
        let upstream = RecordingUpstream::start();
        let key = [("Idempotency-Key", "k1"), ("Gatehouse-Call-Id", "call_1")];
        post(&upstream, "t", &key, "{}");
        post(&upstream, "t", &key, "{}");
        assert_eq!(upstream.executions_for("k1"), 2);

        upstream.dedupe_by_key(true);
        let key = [("Idempotency-Key", "k2"), ("Gatehouse-Call-Id", "call_2")];
        let first = post(&upstream, "t", &key, "{}");
        let again = post(&upstream, "t", &key, "{}");
        assert_eq!(first, again, "a repeat gets the first answer");
        assert_eq!(upstream.executions_for("k2"), 1);
        assert_eq!(upstream.count_for("call_2"), 2);
    }

    #[test]
    fn a_held_tool_runs_only_once_released_even_if_its_caller_left() {
        let upstream = RecordingUpstream::start();
        upstream.dedupe_by_key(true);
        upstream.hold("slow");
        let key = [("Idempotency-Key", "k"), ("Gatehouse-Call-Id", "call_9")];
        // The first caller goes away while held, as a killed node would.
        {
            let mut stream = std::net::TcpStream::connect(upstream.addr).unwrap();
            let request = "POST /slow HTTP/1.1\r\nHost: x\r\nIdempotency-Key: k\r\n\
                 Gatehouse-Call-Id: call_9\r\nContent-Length: 2\r\n\r\n{}";
            stream.write_all(request.as_bytes()).unwrap();
            assert!(upstream.wait_for_count("slow", 1, Duration::from_secs(5)));
        }
        assert_eq!(upstream.executions_for("k"), 0, "nothing runs while held");
        upstream.release("slow");
        // A retry under the same key is answered from the first run.
        let (status, _) = post(&upstream, "slow", &key, "{}");
        assert_eq!(status, 200);
        assert_eq!(upstream.executions_for("k"), 1);
        assert_eq!(upstream.count_for("call_9"), 2);
    }
}
