//! openraft's lines for one failed RPC to a peer, and for a stale reply it ignores, dropped from
//! the node's default log. openraft 0.9 says each failure several times (a WARN and an ERROR
//! from the replication stream, a WARN or two from the engine, a WARN for the back-off) and
//! warns of every reply that arrives after a membership change or an election, so a learner's
//! join or a follower's restart reads like an outage. The node's network says a failure once
//! per outage instead (`gatehouse_cluster::net::Reachability`). Storage errors and everything
//! else openraft says pass: only these callsites are matched, by target, level and message.

use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt as _};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{Layer, fmt};

/// openraft's per-RPC failure and stale-reply lines: (target, level, words in the message).
const PER_RPC_FAILURE: [(&str, Level, &str); 8] = [
    ("openraft::replication", Level::ERROR, "RPCError"),
    (
        "openraft::replication",
        Level::WARN,
        "error replication to target=",
    ),
    ("openraft::replication", Level::WARN, "backoff mode:"),
    (
        "openraft::engine::handler::replication_handler",
        Level::WARN,
        "update progress error",
    ),
    (
        "openraft::engine::handler::replication_handler",
        Level::WARN,
        "heartbeat error:",
    ),
    (
        "openraft::core::raft_core",
        Level::ERROR,
        "while requesting vote",
    ),
    (
        "openraft::core::raft_core",
        Level::WARN,
        "A message will be ignored because vote changed",
    ),
    (
        "openraft::core::raft_core",
        Level::WARN,
        "membership_log_id changed:",
    ),
];

/// The levels to log at: `RUST_LOG`'s, or else `default_levels` without openraft's lines for
/// each failed RPC to a peer (the network says an outage once:
/// `gatehouse_cluster::net::Reachability`).
fn levels(default_levels: &str) -> (EnvFilter, Option<OpenraftRpcFailures>) {
    match EnvFilter::try_from_default_env() {
        Ok(levels) => (levels, None),
        Err(_) => (EnvFilter::new(default_levels), Some(OpenraftRpcFailures)),
    }
}

/// Log lines on stderr. Colour only for a person at a terminal: a file or a journal gets plain
/// text.
fn stderr_lines<S>() -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

/// Logs to stderr at [`levels`], filtered for this layer alone: for a subscriber with another
/// layer (the OTLP exporter's) that sees other spans than the log.
pub(super) fn stderr_logs<S>(default_levels: &str) -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let (levels, quiet) = levels(default_levels);
    filtered_alone(levels, quiet, stderr_lines())
}

/// Logs to stderr at [`levels`], filtered for the whole subscriber: for a subscriber whose only
/// output is the log (see [`filtering_all`]).
pub(super) fn stderr_logs_alone<S>(default_levels: &str) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let (levels, quiet) = levels(default_levels);
    filtering_all(levels, quiet, stderr_lines())
}

/// `lines` with `levels` and `quiet` as a filter of its own.
fn filtered_alone<S, L>(
    levels: EnvFilter,
    quiet: Option<OpenraftRpcFailures>,
    lines: L,
) -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S> + Send + Sync,
{
    lines.with_filter(levels.and(quiet))
}

/// `lines` behind `levels` and `quiet` as layers, which filter for every layer of the
/// subscriber. A filter of one layer is asked again on every enter, exit, record and close of
/// every span it let through, a look-up of the span each time, and beside an absent layer it
/// let every library's debug event be built and dispatched to be dropped: together about 12
/// thousand instructions of a read-only call's 170 (`scripts/bench-mcp-instructions`, without
/// SHA-256). A filter of the subscriber decides once per callsite, and once per span when it
/// is made.
fn filtering_all<S, L>(
    levels: EnvFilter,
    quiet: Option<OpenraftRpcFailures>,
    lines: L,
) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    L: Layer<S> + Send + Sync,
{
    // The levels outermost: composed the other way round (`levels.and_then(lines)`), the
    // layers give tracing no most verbose level (`max_level_hint` is `None`), so every disabled
    // `trace!` and `debug!` of h2, hyper and openraft asks the filter at run time: about 2% of
    // the machine's CPU under the cluster benchmark.
    match quiet {
        Some(quiet) => Box::new(lines.and_then(quiet).and_then(levels)),
        None => Box::new(lines.and_then(levels)),
    }
}

/// A process that hosts nodes without being one (the benchmarks) logs as a node does, at
/// `default_levels` unless `RUST_LOG` says otherwise. A subscriber installed earlier is kept.
pub fn install_stderr_logs(default_levels: &str) {
    let _ = tracing_subscriber::registry()
        .with(stderr_logs_alone(default_levels))
        .try_init();
}

/// The filter: passes every event but openraft's per-RPC failure lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenraftRpcFailures;

impl<S: Subscriber> Filter<S> for OpenraftRpcFailures {
    fn enabled(&self, _meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _cx: &Context<'_, S>) -> bool {
        !is_per_rpc_failure(event)
    }
}

/// As a layer of the subscriber (beside a global [`EnvFilter`]): drops the same lines for
/// every layer.
impl<S: Subscriber> Layer<S> for OpenraftRpcFailures {
    fn event_enabled(&self, event: &Event<'_>, _cx: Context<'_, S>) -> bool {
        !is_per_rpc_failure(event)
    }
}

fn is_per_rpc_failure(event: &Event<'_>) -> bool {
    let meta = event.metadata();
    if !meta.target().starts_with("openraft") {
        return false;
    }
    let candidates: Vec<&str> = PER_RPC_FAILURE
        .iter()
        .filter(|(target, level, _)| meta.target() == *target && meta.level() == level)
        .map(|(_, _, words)| *words)
        .collect();
    if candidates.is_empty() {
        return false;
    }
    let mut message = Message(String::new());
    event.record(&mut message);
    candidates.iter().any(|words| message.0.contains(words))
}

/// The `message` field of an event, as text.
struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tracing_subscriber::fmt;
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the log printed at `info` while `emit` ran, built as a node builds it: with the
    /// filter on the log's layer alone, as beside an exporter (`global` false), or on the whole
    /// subscriber, as without one.
    fn printed_by(global: bool, emit: impl FnOnce()) -> String {
        let lines = Lines::default();
        let out = lines.clone();
        let layer = fmt::layer()
            .with_writer(move || out.clone())
            .with_ansi(false);
        let (levels, quiet) = (EnvFilter::new("info"), Some(OpenraftRpcFailures));
        if global {
            let logs = filtering_all(levels, quiet, layer);
            tracing::subscriber::with_default(tracing_subscriber::registry().with(logs), emit);
        } else {
            let logs = filtered_alone(levels, quiet, layer);
            tracing::subscriber::with_default(tracing_subscriber::registry().with(logs), emit);
        }
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn the_per_rpc_failure_lines_are_dropped() {
        for global in [false, true] {
            let log = printed_by(global, per_rpc_failures);
            assert_eq!(log, "", "global {global} printed: {log}");
        }
    }

    #[test]
    fn with_the_filter_on_the_whole_subscriber_an_event_below_its_level_is_never_built() {
        let built = std::cell::Cell::new(0);
        let count = || {
            built.set(built.get() + 1);
            "shown"
        };
        let log = printed_by(true, || {
            for _ in 0..3 {
                tracing::debug!(target: "hyper_util::client", url = %count(), "below the level");
                tracing::info!(target: "gatehouse_gateway", url = %count(), "at the level");
            }
        });
        assert_eq!(built.get(), 3, "only the info events' fields were built");
        assert_eq!(log.lines().count(), 3, "{log}");
        assert!(!log.contains("below the level"), "{log}");
    }

    /// tracing skips a callsite above the most verbose level any subscriber may want without
    /// asking a filter; a subscriber that names none has every disabled `trace!` ask at run time.
    #[test]
    fn with_the_filter_on_the_whole_subscriber_tracing_knows_the_most_verbose_level() {
        use tracing::Subscriber as _;
        use tracing_subscriber::filter::LevelFilter;
        for (levels, most) in [
            ("error", LevelFilter::ERROR),
            ("warn,gatehouse_cluster=debug", LevelFilter::DEBUG),
        ] {
            for quiet in [None, Some(OpenraftRpcFailures)] {
                let logs = filtering_all(EnvFilter::new(levels), quiet, stderr_lines());
                let subscriber = tracing_subscriber::registry().with(logs);
                assert_eq!(
                    subscriber.max_level_hint(),
                    Some(most),
                    "{levels}, quiet {}",
                    quiet.is_some()
                );
            }
        }
    }

    #[test]
    fn with_the_filter_on_the_whole_subscriber_a_spans_fields_still_reach_its_lines() {
        let log = printed_by(true, || {
            let span = tracing::info_span!("call", tenant = tracing::field::Empty);
            span.record("tenant", "acme");
            span.in_scope(|| tracing::warn!("inside the call"));
        });
        assert!(log.contains(r#"call{tenant="acme"}"#), "{log}");
        assert!(log.contains("inside the call"), "{log}");
    }

    fn per_rpc_failures() {
        tracing::error!(target: "openraft::replication", err = "timeout after 200ms", "RPCError");
        tracing::warn!(target: "openraft::replication", error = "deadline has elapsed", "error replication to target={}", 3);
        tracing::warn!(target: "openraft::replication", interval = ?Duration::from_millis(50), "{} backoff mode: drain events without processing them", "backoff_drain_events");
        tracing::warn!(target: "openraft::engine::handler::replication_handler", result = "unreachable", "update progress error");
        tracing::warn!(target: "openraft::engine::handler::replication_handler", "heartbeat error: {}, no update to inflight data", "unreachable");
        tracing::error!(target: "openraft::core::raft_core", error = "unreachable", target = 2, "while requesting vote");
        tracing::warn!(target: "openraft::core::raft_core", "A message will be ignored because vote changed: msg sent by vote: {}; current my vote: {}; when ({})", "T1-N1", "T2-N2", "VoteResponse");
        tracing::warn!(target: "openraft::core::raft_core", "membership_log_id changed: msg sent by: {}; curr: {}; ignore when ({})", "T1-N1-6", "T1-N1-7", "UpdateReplicationMatched");
    }

    #[test]
    fn storage_errors_and_other_lines_pass() {
        for global in [false, true] {
            let log = printed_by(global, || {
                tracing::error!(target: "openraft::replication", error = "disk full", "error replication to target={}", 3);
                tracing::error!(target: "openraft::core::raft_core", error = "disk full", "quit RaftCore::main on error");
                tracing::warn!(target: "gatehouse_cluster::net", "peer 3 has not answered Raft for 2s");
                tracing::error!(target: "gatehouse_node", "RPCError in our own words");
            });
            assert!(log.contains("disk full"), "{log}");
            assert!(log.contains("quit RaftCore::main on error"), "{log}");
            assert!(log.contains("peer 3 has not answered Raft"), "{log}");
            assert!(log.contains("RPCError in our own words"), "{log}");
            assert_eq!(log.lines().count(), 4, "global {global}: {log}");
        }
    }
}
