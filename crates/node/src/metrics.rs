//! The node's Prometheus metrics, served at `/metrics` in the text exposition format 0.0.4.
//!
//! Calls are counted and timed by the pipeline as they happen, whichever front they came
//! through. Everything else (pending approvals, Raft, tenant actors, circuit breakers) is read
//! from its source when scraped, so a scrape shows the node as it is and no second copy of any
//! state is kept. Labels come from the registry, never straight from a request: a call naming a
//! tenant the caller is not in, or a tool that does not exist, is counted under `_unknown`.

use crate::cluster::Cluster;
use crate::executor::BreakerStates;
use gatehouse_actors::Actors;
use gatehouse_registry::CallState;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The label a tenant or tool takes when the request named one that is not there for it.
pub const UNKNOWN: &str = "_unknown";

/// The `Content-Type` of a scrape.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Call latency buckets, in seconds: a built-in tool answers in a millisecond, an upstream
/// behind retries may take tens of seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// What the scrape-time metrics are read from.
#[derive(Debug, Clone)]
pub struct NodeSources {
    pub cluster: Cluster,
    pub actors: Actors,
    pub breakers: BreakerStates,
}

/// The node's metrics registry. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

struct Inner {
    registry: Registry,
    calls: IntCounterVec,
    latency: HistogramVec,
    node: Option<NodeGauges>,
    /// One scrape at a time refreshes the gauges and encodes them.
    scrape: Mutex<()>,
}

/// The metrics read at scrape time, and where from.
struct NodeGauges {
    sources: NodeSources,
    pending: IntGaugeVec,
    term: IntGauge,
    leader: IntGauge,
    last_log: IntGauge,
    committed: IntGauge,
    applied: IntGauge,
    lag: IntGaugeVec,
    actors: IntGauge,
    restarts: IntCounter,
    breakers: IntGaugeVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Call metrics only: a pipeline running without a node around it.
    pub fn new() -> Metrics {
        Metrics::build(None)
    }

    /// Call metrics and the node's own, read from `sources` at each scrape.
    pub fn for_node(sources: NodeSources) -> Metrics {
        Metrics::build(Some(sources))
    }

    fn build(sources: Option<NodeSources>) -> Metrics {
        let registry = Registry::new();
        let calls = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gatehouse_calls_total",
                    "Tool calls taken by this node's pipeline (MCP, gRPC and A2A), by tenant, \
                     tool and outcome: the call's state when answered, or refused:<code>.",
                ),
                &["tenant", "tool", "outcome"],
            ),
        );
        let latency = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "gatehouse_call_duration_seconds",
                    "Time from a call entering the pipeline to its answer, by tenant and tool.",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                &["tenant", "tool"],
            ),
        );
        let node = sources.map(|sources| NodeGauges::register(&registry, sources));
        Metrics {
            inner: Arc::new(Inner {
                registry,
                calls,
                latency,
                node,
                scrape: Mutex::new(()),
            }),
        }
    }

    /// Counts one call and its latency.
    pub fn record_call(&self, tenant: &str, tool: &str, outcome: &str, elapsed: Duration) {
        self.inner
            .calls
            .with_label_values(&[tenant, tool, outcome])
            .inc();
        self.inner
            .latency
            .with_label_values(&[tenant, tool])
            .observe(elapsed.as_secs_f64());
    }

    /// Every metric, in the text exposition format.
    pub async fn render(&self) -> String {
        // The commit index is the Raft core's to tell, asked before the scrape lock is taken.
        let committed = match &self.inner.node {
            Some(node) => node
                .sources
                .cluster
                .raft
                .with_raft_state(|state| state.committed.map_or(0, |id| id.index))
                .await
                .ok(),
            None => None,
        };
        let _one = self
            .inner
            .scrape
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(node) = &self.inner.node {
            node.refresh(committed);
        }
        let mut out = Vec::new();
        // Encoding into memory fails only on a metric the registry would have refused.
        if let Err(e) = TextEncoder::new().encode(&self.inner.registry.gather(), &mut out) {
            tracing::error!(error = %e, "metrics could not be encoded");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl NodeGauges {
    fn register(registry: &Registry, sources: NodeSources) -> NodeGauges {
        let gauge = |name: &str, help: &str| register(registry, IntGauge::new(name, help));
        let gauges = |name: &str, help: &str, label: &str| {
            register(registry, IntGaugeVec::new(Opts::new(name, help), &[label]))
        };
        NodeGauges {
            pending: gauges(
                "gatehouse_approvals_pending",
                "Calls waiting for approval, by tenant, in this node's copy of the registry.",
                "tenant",
            ),
            term: gauge("gatehouse_raft_term", "This node's current Raft term."),
            leader: gauge(
                "gatehouse_raft_leader_id",
                "The Raft leader this node knows of; 0 when it knows none.",
            ),
            last_log: gauge(
                "gatehouse_raft_last_log_index",
                "The last Raft log index appended on this node.",
            ),
            committed: gauge(
                "gatehouse_raft_committed_index",
                "The last Raft log index this node knows to be committed.",
            ),
            applied: gauge(
                "gatehouse_raft_applied_index",
                "The last Raft log index applied to this node's registry.",
            ),
            lag: gauges(
                "gatehouse_raft_replication_lag_entries",
                "On the leader: entries each follower's log is behind the leader's.",
                "follower",
            ),
            actors: gauge(
                "gatehouse_tenant_actors_active",
                "Tenant actors running on this node.",
            ),
            restarts: register(
                registry,
                IntCounter::new(
                    "gatehouse_tenant_actor_restarts_total",
                    "Restarts of failed tenant actors since this node started.",
                ),
            ),
            breakers: gauges(
                "gatehouse_upstream_breaker_state",
                "Each called upstream's circuit breaker on this node: 0 closed, 1 half-open, \
                 2 open.",
                "upstream",
            ),
            sources,
        }
    }

    /// Reads every source once and sets the gauges to what it says. Labels no longer present
    /// (a deleted tenant, a follower removed) are dropped.
    fn refresh(&self, committed: Option<u64>) {
        let NodeSources {
            cluster,
            actors,
            breakers,
        } = &self.sources;

        self.pending.reset();
        for (tenant, count) in pending_by_tenant(cluster) {
            self.pending.with_label_values(&[&tenant]).set(count);
        }

        let raft = cluster.raft.metrics().borrow().clone();
        self.term.set(gauge_value(raft.current_term));
        self.leader
            .set(gauge_value(raft.current_leader.unwrap_or(0)));
        let last_log = raft.last_log_index.unwrap_or(0);
        self.last_log.set(gauge_value(last_log));
        if let Some(committed) = committed {
            self.committed.set(gauge_value(committed));
        }
        self.applied
            .set(gauge_value(raft.last_applied.map_or(0, |id| id.index)));
        self.lag.reset();
        for (follower, matched) in raft.replication.iter().flatten() {
            if *follower == cluster.id {
                continue;
            }
            let matched = matched.map_or(0, |id| id.index);
            self.lag
                .with_label_values(&[&follower.to_string()])
                .set(gauge_value(last_log.saturating_sub(matched)));
        }

        self.actors.set(gauge_value(actors.active_tenants() as u64));
        let restarts = actors.restarts();
        self.restarts
            .inc_by(restarts.saturating_sub(self.restarts.get()));

        self.breakers.reset();
        for (upstream, state) in breakers.snapshot() {
            self.breakers
                .with_label_values(&[&upstream])
                .set(state.level());
        }
    }
}

/// Pending calls per tenant, every tenant listed (0 when none waits).
fn pending_by_tenant(cluster: &Cluster) -> BTreeMap<String, i64> {
    let registry = cluster
        .registry
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    let mut pending: BTreeMap<String, i64> =
        registry.tenants().map(|t| (t.to_owned(), 0)).collect();
    for call in registry.unfinished_calls() {
        if call.state == CallState::Pending {
            *pending.entry(call.spec.tenant.clone()).or_default() += 1;
        }
    }
    pending
}

fn gauge_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Registers a metric whose name and labels are fixed in this file, so a refusal is a bug here.
fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("a metric defined in metrics.rs is valid");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names in metrics.rs are unique");
    metric
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_tenant_tool_and_outcome_with_latency_buckets() {
        let metrics = Metrics::new();
        metrics.record_call("acme", "demo.echo", "succeeded", Duration::from_millis(3));
        metrics.record_call("acme", "demo.echo", "succeeded", Duration::from_millis(4));
        metrics.record_call(
            "acme",
            UNKNOWN,
            "refused:unknown_tool",
            Duration::from_micros(200),
        );
        let text = futures::executor::block_on(metrics.render());
        assert!(
            text.contains("# TYPE gatehouse_calls_total counter"),
            "{text}"
        );
        assert!(
            text.contains(
                "gatehouse_calls_total{outcome=\"succeeded\",tenant=\"acme\",tool=\"demo.echo\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gatehouse_calls_total{outcome=\"refused:unknown_tool\",tenant=\"acme\",\
                 tool=\"_unknown\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gatehouse_call_duration_seconds_bucket{tenant=\"acme\",tool=\"demo.echo\",\
                 le=\"0.0025\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gatehouse_call_duration_seconds_bucket{tenant=\"acme\",tool=\"demo.echo\",\
                 le=\"0.005\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gatehouse_call_duration_seconds_count{tenant=\"acme\",tool=\"demo.echo\"} 2"
            ),
            "{text}"
        );
    }
}
