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

/// Logs to stderr at `RUST_LOG`'s levels, or else at `default_levels` without openraft's lines
/// for each failed RPC to a peer (the network says an outage once:
/// `gatehouse_cluster::net::Reachability`). Colour only for a person at a terminal: a file or
/// a journal gets plain text.
pub(super) fn stderr_logs<S>(default_levels: &str) -> impl Layer<S> + Send + Sync
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let (levels, quiet) = match EnvFilter::try_from_default_env() {
        Ok(levels) => (levels, None),
        Err(_) => (EnvFilter::new(default_levels), Some(OpenraftRpcFailures)),
    };
    fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(levels.and(quiet))
}

/// A process that hosts nodes without being one (the benchmarks) logs as a node does, at
/// `default_levels` unless `RUST_LOG` says otherwise. A subscriber installed earlier is kept.
pub fn install_stderr_logs(default_levels: &str) {
    let _ = tracing_subscriber::registry()
        .with(stderr_logs(default_levels))
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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::{Layer, fmt};

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

    /// What the filtered log printed while `emit` ran.
    fn printed(emit: impl FnOnce()) -> String {
        let lines = Lines::default();
        let out = lines.clone();
        let layer = fmt::layer()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .with_filter(OpenraftRpcFailures);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn the_per_rpc_failure_lines_are_dropped() {
        let log = printed(|| {
            tracing::error!(target: "openraft::replication", err = "timeout after 200ms", "RPCError");
            tracing::warn!(target: "openraft::replication", error = "deadline has elapsed", "error replication to target={}", 3);
            tracing::warn!(target: "openraft::replication", interval = ?Duration::from_millis(50), "{} backoff mode: drain events without processing them", "backoff_drain_events");
            tracing::warn!(target: "openraft::engine::handler::replication_handler", result = "unreachable", "update progress error");
            tracing::warn!(target: "openraft::engine::handler::replication_handler", "heartbeat error: {}, no update to inflight data", "unreachable");
            tracing::error!(target: "openraft::core::raft_core", error = "unreachable", target = 2, "while requesting vote");
            tracing::warn!(target: "openraft::core::raft_core", "A message will be ignored because vote changed: msg sent by vote: {}; current my vote: {}; when ({})", "T1-N1", "T2-N2", "VoteResponse");
            tracing::warn!(target: "openraft::core::raft_core", "membership_log_id changed: msg sent by: {}; curr: {}; ignore when ({})", "T1-N1-6", "T1-N1-7", "UpdateReplicationMatched");
        });
        assert_eq!(log, "", "printed: {log}");
    }

    #[test]
    fn storage_errors_and_other_lines_pass() {
        let log = printed(|| {
            tracing::error!(target: "openraft::replication", error = "disk full", "error replication to target={}", 3);
            tracing::error!(target: "openraft::core::raft_core", error = "disk full", "quit RaftCore::main on error");
            tracing::warn!(target: "gatehouse_cluster::net", "peer 3 has not answered Raft for 2s");
            tracing::error!(target: "gatehouse_node", "RPCError in our own words");
        });
        assert!(log.contains("disk full"), "{log}");
        assert!(log.contains("quit RaftCore::main on error"), "{log}");
        assert!(log.contains("peer 3 has not answered Raft"), "{log}");
        assert!(log.contains("RPCError in our own words"), "{log}");
        assert_eq!(log.lines().count(), 4, "{log}");
    }
}
