//! Tool discovery: the Raft leader lists every MCP upstream's tools when the upstream is put
//! and every `refreshSeconds` after, and proposes them as Tool resources `upstream.tool` in the
//! upstream's scope, labelled `gatehouse.dev/discovered-from`.
//!
//! What to propose is decided by `plan`, without I/O: a tool an admin declared (one without the
//! label) is never overwritten, discovered tools gone from the listing are deleted, and an
//! unchanged listing proposes nothing, so a refresh writes no Raft entry. `approvalMode` is never
//! set here: a discovered tool's annotations count only when its upstream is trusted.

use crate::executor::{EnvSource, read_credential};
use gatehouse_actors::{ClusterPort, ExecError, ProposeError};
use gatehouse_cluster::cluster::Cluster;
use gatehouse_cluster::grants::Grants;
use gatehouse_raft_store::{AppliedEntry, SharedRegistry};
use gatehouse_registry::resource::{
    API_VERSION, DISCOVERED_FROM, Kind, Metadata, Object, Resource, ResourceKey, ToolAnnotations,
    ToolSpec, UpstreamKind, UpstreamSpec,
};
use gatehouse_registry::{Command, Registry};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How often the loop looks for upstreams that are due.
const TICK: Duration = Duration::from_secs(1);
/// How soon a listing that failed is tried again: after the first failure, doubling with each
/// one after it up to the most.
const FIRST_RETRY: Duration = Duration::from_secs(1);
const MOST_RETRY: Duration = Duration::from_secs(30);

/// The wait before listing an upstream again after `failures` failures in a row (1 or more): an
/// upstream put a moment before it answered is listed again within a second, one that stays
/// down is asked every [`MOST_RETRY`].
fn retry_after(failures: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MOST_RETRY)
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(transparent)]
    Upstream(#[from] ExecError),
    #[error("proposing the discovered tools: {0}")]
    Propose(#[from] ProposeError),
}

/// Starts discovery on this node; it works only while this node leads. `events` is a fresh
/// subscription to the state machine's applied entries (`StateMachine::subscribe`), taken
/// before Raft starts; the task ends when `stop` turns true or the events end.
pub fn spawn_discovery(
    cluster: Cluster,
    events: broadcast::Receiver<AppliedEntry>,
    env: Arc<dyn EnvSource>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let registry = cluster.registry.clone();
    let grants = cluster.grants().clone();
    let sources = Sources { grants, env };
    tokio::spawn(run(Arc::new(cluster), registry, events, sources, stop))
}

/// Where an upstream's credential comes from: the node's grants, read from `env` or files.
struct Sources {
    grants: Arc<Grants>,
    env: Arc<dyn EnvSource>,
}

async fn run(
    port: Arc<dyn ClusterPort>,
    registry: SharedRegistry,
    mut events: broadcast::Receiver<AppliedEntry>,
    sources: Sources,
    mut stop: watch::Receiver<bool>,
) {
    // When each known MCP upstream is next listed.
    let mut due: BTreeMap<ResourceKey, Instant> = BTreeMap::new();
    // Failures in a row of each upstream's listing.
    let mut failures: BTreeMap<ResourceKey, u32> = BTreeMap::new();
    let mut leading = false;
    let mut tick = tokio::time::interval(TICK);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(applied) => {
                    let mut keys = BTreeSet::new();
                    upstreams_in(&applied.proposal.command, &mut keys);
                    for key in keys {
                        due.insert(key, Instant::now());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => due.clear(),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                if !port.is_leader() {
                    leading = false;
                    continue;
                }
                if !leading {
                    // A new leader lists everything once: it cannot know what the last one did.
                    due.clear();
                    leading = true;
                }
                for key in mcp_upstreams(&registry) {
                    due.entry(key).or_insert_with(Instant::now);
                }
                let now = Instant::now();
                let ready: Vec<ResourceKey> =
                    due.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
                for key in ready {
                    let next = match discover(&*port, &registry, &sources.grants, &*sources.env, &key).await {
                        Ok(refresh) => {
                            failures.remove(&key);
                            refresh
                        }
                        Err(e) => {
                            let failed = failures.entry(key.clone()).or_default();
                            *failed += 1;
                            let after = retry_after(*failed);
                            tracing::warn!(upstream = %key, error = %e, retry_in = ?after, "discovering tools failed");
                            Some(after)
                        }
                    };
                    match next {
                        Some(after) => due.insert(key, Instant::now() + after),
                        None => due.remove(&key),
                    };
                }
            }
            _ = stop.changed() => return,
        }
    }
}

/// The upstreams an applied command put or deleted.
fn upstreams_in(command: &Command, into: &mut BTreeSet<ResourceKey>) {
    match command {
        Command::Put { resources } => into.extend(
            resources
                .iter()
                .filter(|r| r.kind() == Kind::Upstream)
                .map(Resource::key),
        ),
        Command::Delete { keys } => {
            into.extend(keys.iter().filter(|k| k.kind == Kind::Upstream).cloned())
        }
        Command::Batch { proposals } => {
            for p in proposals {
                upstreams_in(&p.command, into);
            }
        }
        _ => {}
    }
}

fn mcp_upstreams(registry: &SharedRegistry) -> Vec<ResourceKey> {
    let registry = registry.read();
    registry
        .list(Kind::Upstream, None, None)
        .filter(
            |s| matches!(&s.resource, Resource::Upstream(u) if u.spec.kind == UpstreamKind::Mcp),
        )
        .map(|s| s.resource.key())
        .collect()
}

fn upstream_spec(registry: &Registry, key: &ResourceKey) -> Option<UpstreamSpec> {
    match registry.get(key).map(|s| &s.resource) {
        Some(Resource::Upstream(u)) if u.spec.kind == UpstreamKind::Mcp => Some(u.spec.clone()),
        _ => None,
    }
}

/// Lists one upstream and proposes what changed. Answers when to list it again: `None` once
/// the upstream is gone (its discovered tools are then deleted). A tenant's upstream is listed
/// with a credential the operator granted that tenant; a shared one only with a credential
/// granted to every tenant.
pub async fn discover(
    port: &dyn ClusterPort,
    registry: &SharedRegistry,
    grants: &Grants,
    env: &dyn EnvSource,
    key: &ResourceKey,
) -> Result<Option<Duration>, DiscoveryError> {
    let spec = upstream_spec(&registry.read(), key);
    let listed = match &spec {
        Some(spec) => {
            let url = spec.url.as_deref().ok_or_else(|| ExecError {
                message: "the mcp upstream has no url".into(),
            })?;
            let bearer = match &spec.credential {
                Some(credential) => {
                    Some(read_credential(grants, env, key.tenant.as_deref(), credential).await?)
                }
                None => None,
            };
            let tools =
                crate::executor::mcp::list_tools(url, bearer.as_deref(), spec.timeout()).await?;
            tools
                .into_iter()
                .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
                .collect()
        }
        None => Vec::new(),
    };
    let commands = plan(&registry.read(), key, &listed);
    for command in commands {
        port.propose(command).await?;
    }
    Ok(spec.map(|s| s.refresh_every()))
}

/// What to propose for an upstream's listing (MCP `Tool` objects as JSON): at most one `Put` of
/// the new and changed tools and one `Delete` of the vanished ones.
pub fn plan(registry: &Registry, upstream: &ResourceKey, listed: &[Value]) -> Vec<Command> {
    let scope = upstream.tenant.as_deref();
    let prefix = format!("{}.", upstream.name);
    let mut wanted: BTreeMap<String, Resource> = BTreeMap::new();
    for tool in listed {
        let Some(resource) = tool_resource(upstream, tool) else {
            continue;
        };
        let problems = resource.validate();
        if !problems.is_empty() {
            tracing::warn!(
                tool = resource.name(),
                ?problems,
                "a discovered tool is not valid here and is left out"
            );
            continue;
        }
        wanted.insert(resource.name().to_owned(), resource);
    }
    let discovered_here = |resource: &Resource| {
        resource.metadata().labels.get(DISCOVERED_FROM) == Some(&upstream.name)
    };
    let mut put = Vec::new();
    for (name, resource) in &wanted {
        let key = resource.key();
        match registry.get(&key) {
            Some(stored) if !discovered_here(&stored.resource) => {
                tracing::debug!(tool = %name, "an admin declared this tool; discovery leaves it");
            }
            Some(stored) if stored.resource == *resource => {}
            _ => put.push(resource.clone()),
        }
    }
    let gone: Vec<ResourceKey> = registry
        .list(Kind::Tool, Some(scope), None)
        .map(|s| &s.resource)
        .filter(|r| r.name().starts_with(&prefix) && discovered_here(r))
        .filter(|r| !wanted.contains_key(r.name()))
        .map(Resource::key)
        .collect();
    let mut commands = Vec::new();
    if !put.is_empty() {
        commands.push(Command::Put { resources: put });
    }
    if !gone.is_empty() {
        commands.push(Command::Delete { keys: gone });
    }
    commands
}

/// The Tool resource for one listed tool; `None` when the listing entry has no usable name.
fn tool_resource(upstream: &ResourceKey, tool: &Value) -> Option<Resource> {
    let name = tool.get("name")?.as_str()?;
    let annotations = tool.get("annotations").map(|a| {
        let flag = |field: &str| a.get(field).and_then(Value::as_bool);
        ToolAnnotations {
            title: a.get("title").and_then(Value::as_str).map(str::to_owned),
            read_only_hint: flag("readOnlyHint"),
            destructive_hint: flag("destructiveHint"),
            idempotent_hint: flag("idempotentHint"),
            open_world_hint: flag("openWorldHint"),
        }
    });
    let annotations = serde_json::to_value(annotations).ok()?;
    // Built from JSON so that fields this code does not set keep their defaults.
    let mut spec = serde_json::json!({
        "description": tool.get("description").and_then(Value::as_str).unwrap_or_default(),
        "inputSchema": tool.get("inputSchema").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"})),
        "annotations": annotations,
    });
    if let Some(output) = tool.get("outputSchema") {
        spec["outputSchema"] = output.clone();
    }
    let spec: ToolSpec = serde_json::from_value(spec).ok()?;
    Some(Resource::Tool(Object {
        api_version: API_VERSION.into(),
        metadata: Metadata {
            name: format!("{}.{name}", upstream.name),
            tenant: upstream.tenant.clone(),
            labels: [(DISCOVERED_FROM.to_owned(), upstream.name.clone())].into(),
        },
        spec,
    }))
}

#[cfg(test)]
mod tests;
