//! The node's Prometheus metrics, served at `/metrics` in the text exposition format 0.0.4.
//!
//! Calls are counted and timed by the pipeline as they happen, whichever front they came
//! through. Everything else (pending approvals, Raft, tenant actors, circuit breakers) is read
//! from its source when scraped, so a scrape shows the node as it is and no second copy of any
//! state is kept. Labels come from the registry, never straight from a request: a call naming a
//! tenant the caller is not in, or a tool that does not exist, is counted under `_unknown`.
//!
//! By default no label names a tenant, a tool or an upstream: `/metrics` shares the listener
//! with `/mcp`, and a tenant's names and call counts are its own business. Calls are counted by
//! outcome, pending approvals in total, breakers by state. `metrics-tenant-labels` turns the
//! per-tenant, per-tool and per-upstream series on, and `metrics-token-file` makes a scrape
//! present a bearer token ([`ScrapeToken`]).

use crate::executor::{BreakerState, BreakerStates};
use gatehouse_actors::Actors;
use gatehouse_cluster::cluster::Cluster;
use gatehouse_registry::CallState;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use sha2::{Digest, Sha256};
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

/// How `/metrics` is served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Label series with tenant, tool and upstream names.
    pub tenant_labels: bool,
    /// The bearer token a scrape must present; none: `/metrics` is open.
    pub token: Option<ScrapeToken>,
}

/// The token `/metrics` requires. Only its SHA-256 is kept, and a presented token is compared
/// by digest in constant time, so neither its bytes nor the timing of a refusal tell anything.
#[derive(Clone, PartialEq, Eq)]
pub struct ScrapeToken {
    digest: [u8; 32],
}

impl ScrapeToken {
    pub fn new(token: &str) -> ScrapeToken {
        ScrapeToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// The token in `path`, without surrounding white space; an unreadable or empty file is an
    /// error naming the file.
    pub fn read(path: &std::path::Path) -> Result<ScrapeToken, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        Ok(ScrapeToken::new(token))
    }

    /// Whether an `Authorization` header value is `Bearer <this token>`.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some(presented) = authorization.and_then(crate::auth::bearer_credential) else {
            return false;
        };
        let presented: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        crate::auth::constant_time_eq(&presented, &self.digest)
    }
}

// Not even the digest is printed.
impl std::fmt::Debug for ScrapeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScrapeToken(..)")
    }
}

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
    /// Whether call series carry tenant and tool labels.
    tenant_labels: bool,
    calls: IntCounterVec,
    latency: HistogramVec,
    /// Stateless MCP `tools/call`s answered without rmcp's per-request service.
    direct_mcp_calls: IntCounter,
    node: Option<NodeGauges>,
    /// One scrape at a time refreshes the gauges and encodes them.
    scrape: Mutex<()>,
}

/// The metrics read at scrape time, and where from.
struct NodeGauges {
    sources: NodeSources,
    tenant_labels: bool,
    /// By tenant with tenant labels, else one series.
    pending: IntGaugeVec,
    term: IntGauge,
    leader: IntGauge,
    last_log: IntGauge,
    committed: IntGauge,
    applied: IntGauge,
    lag: IntGaugeVec,
    actors: IntGauge,
    /// Tenants by home node.
    homed: IntGaugeVec,
    restarts: IntCounter,
    /// Upstreams by breaker state.
    breakers: IntGaugeVec,
    /// Each upstream's breaker, with tenant labels only.
    breaker_by_upstream: IntGaugeVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(false)
    }
}

impl Metrics {
    /// Call metrics only: a pipeline running without a node around it.
    pub fn new(tenant_labels: bool) -> Metrics {
        Metrics::build(None, tenant_labels)
    }

    /// Call metrics and the node's own, read from `sources` at each scrape.
    pub fn for_node(sources: NodeSources, tenant_labels: bool) -> Metrics {
        Metrics::build(Some(sources), tenant_labels)
    }

    fn build(sources: Option<NodeSources>, tenant_labels: bool) -> Metrics {
        let registry = Registry::new();
        let (call_labels, latency_labels): (&[&str], &[&str]) = if tenant_labels {
            (&["tenant", "tool", "outcome"], &["tenant", "tool"])
        } else {
            (&["outcome"], &[])
        };
        let calls = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gatehouse_calls_total",
                    "Tool calls taken by this node's pipeline (MCP, gRPC and A2A), by outcome \
                     (the call's state when answered, or refused:<code>), and by tenant and \
                     tool with metrics-tenant-labels.",
                ),
                call_labels,
            ),
        );
        let latency = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "gatehouse_call_duration_seconds",
                    "Time from a call entering the pipeline to its answer; by tenant and tool \
                     with metrics-tenant-labels.",
                )
                .buckets(LATENCY_BUCKETS.to_vec()),
                latency_labels,
            ),
        );
        let direct_mcp_calls = register(
            &registry,
            IntCounter::new(
                "gatehouse_mcp_direct_calls_total",
                "Stateless MCP tools/calls the /mcp front answered on its direct path, without \
                 rmcp's per-request service (also counted in gatehouse_calls_total).",
            ),
        );
        let node = sources.map(|sources| NodeGauges::register(&registry, sources, tenant_labels));
        Metrics {
            inner: Arc::new(Inner {
                registry,
                tenant_labels,
                calls,
                latency,
                direct_mcp_calls,
                node,
                scrape: Mutex::new(()),
            }),
        }
    }

    /// Counts one call and its latency; tenant and tool become labels only when the operator
    /// asked for them.
    pub fn record_call(&self, tenant: &str, tool: &str, outcome: &str, elapsed: Duration) {
        let (calls, latency) = if self.inner.tenant_labels {
            (
                self.inner.calls.with_label_values(&[tenant, tool, outcome]),
                self.inner.latency.with_label_values(&[tenant, tool]),
            )
        } else {
            (
                self.inner.calls.with_label_values(&[outcome]),
                self.inner.latency.with_label_values::<&str>(&[]),
            )
        };
        calls.inc();
        latency.observe(elapsed.as_secs_f64());
    }

    /// Counts one MCP call answered on the `/mcp` front's direct path.
    pub fn count_direct_mcp_call(&self) {
        self.inner.direct_mcp_calls.inc();
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
    fn register(registry: &Registry, sources: NodeSources, tenant_labels: bool) -> NodeGauges {
        let gauge = |name: &str, help: &str| register(registry, IntGauge::new(name, help));
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            register(registry, IntGaugeVec::new(Opts::new(name, help), labels))
        };
        let tenant: &[&str] = if tenant_labels { &["tenant"] } else { &[] };
        NodeGauges {
            tenant_labels,
            pending: gauges(
                "gatehouse_approvals_pending",
                "Calls waiting for approval in this node's copy of the registry; by tenant \
                 with metrics-tenant-labels.",
                tenant,
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
                &["follower"],
            ),
            actors: gauge(
                "gatehouse_tenant_actors_active",
                "Tenant actors running on this node.",
            ),
            homed: gauges(
                "gatehouse_tenants_homed",
                "Tenants whose approval queue lives on each node (by home node id), as this \
                 node's copy of the registry places them.",
                &["node"],
            ),
            restarts: register(
                registry,
                IntCounter::new(
                    "gatehouse_tenant_actor_restarts_total",
                    "Restarts of failed tenant actors since this node started.",
                ),
            ),
            breakers: gauges(
                "gatehouse_upstream_breakers",
                "Upstreams this node has called, by the state of their circuit breaker here.",
                &["state"],
            ),
            breaker_by_upstream: gauges(
                "gatehouse_upstream_breaker_state",
                "With metrics-tenant-labels: each called upstream's circuit breaker on this \
                 node: 0 closed, 1 half-open, 2 open.",
                &["upstream"],
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
        let pending = pending_by_tenant(cluster);
        if self.tenant_labels {
            for (tenant, count) in pending {
                self.pending.with_label_values(&[&tenant]).set(count);
            }
        } else {
            self.pending
                .with_label_values::<&str>(&[])
                .set(pending.values().sum());
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
        self.homed.reset();
        for (node, tenants) in tenants_by_home(cluster) {
            self.homed
                .with_label_values(&[&node.to_string()])
                .set(tenants);
        }
        let restarts = actors.restarts();
        self.restarts
            .inc_by(restarts.saturating_sub(self.restarts.get()));

        self.breakers.reset();
        self.breaker_by_upstream.reset();
        let mut by_state: BTreeMap<&str, i64> = BreakerState::ALL
            .iter()
            .map(|state| (state.name(), 0))
            .collect();
        for (upstream, state) in breakers.snapshot() {
            *by_state.entry(state.name()).or_default() += 1;
            if self.tenant_labels {
                self.breaker_by_upstream
                    .with_label_values(&[&upstream])
                    .set(state.level());
            }
        }
        for (state, count) in by_state {
            self.breakers.with_label_values(&[state]).set(count);
        }
    }
}

/// Pending calls per tenant, every tenant listed (0 when none waits).
fn pending_by_tenant(cluster: &Cluster) -> BTreeMap<String, i64> {
    let registry = cluster.registry.read();
    let mut pending: BTreeMap<String, i64> =
        registry.tenants().map(|t| (t.to_owned(), 0)).collect();
    for call in registry.unfinished_calls() {
        if call.state == CallState::Pending {
            *pending.entry(call.spec.tenant.clone()).or_default() += 1;
        }
    }
    pending
}

/// How many tenants each node is home to.
fn tenants_by_home(cluster: &Cluster) -> BTreeMap<u64, i64> {
    let registry = cluster.registry.read();
    let mut homed = BTreeMap::new();
    for (_, placement) in registry.placements() {
        *homed.entry(placement.home).or_default() += 1;
    }
    homed
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
    fn calls_are_counted_by_outcome_alone_unless_tenant_labels_are_asked_for() {
        let metrics = Metrics::new(false);
        metrics.record_call("acme", "demo.echo", "succeeded", Duration::from_millis(3));
        metrics.record_call(
            "globex",
            "secret.tool",
            "succeeded",
            Duration::from_millis(4),
        );
        let text = futures::executor::block_on(metrics.render());
        assert!(
            text.contains("gatehouse_calls_total{outcome=\"succeeded\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("gatehouse_call_duration_seconds_count 2"),
            "{text}"
        );
        for name in ["acme", "globex", "demo.echo", "secret.tool", "tenant="] {
            assert!(!text.contains(name), "{name} in {text}");
        }
    }

    #[test]
    fn a_scrape_token_admits_only_its_bearer() {
        let token = ScrapeToken::new("s3cret-scrape");
        assert!(token.admits(Some("Bearer s3cret-scrape")));
        assert!(token.admits(Some("bearer s3cret-scrape")));
        for wrong in [None, Some(""), Some("Bearer s3cret"), Some("s3cret-scrape")] {
            assert!(!token.admits(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{token:?}"), "ScrapeToken(..)");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.token");
        std::fs::write(&path, "s3cret-scrape\n").unwrap();
        assert_eq!(ScrapeToken::read(&path).unwrap(), token);
        std::fs::write(&path, " \n").unwrap();
        assert!(ScrapeToken::read(&path).unwrap_err().contains("is empty"));
    }

    #[test]
    fn calls_are_counted_by_tenant_tool_and_outcome_with_latency_buckets() {
        let metrics = Metrics::new(true);
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
