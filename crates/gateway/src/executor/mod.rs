//! Reaching upstreams: the node's `Executor`. It finds the tool's upstream in this node's copy of
//! the registry (the tenant's own first, then a shared one) and invokes it, by kind: built-in
//! tools here in the process, HTTP/JSON services by the tool's binding, MCP servers over
//! streamable HTTP with a session kept per upstream, A2A agents as one task each with a client
//! kept per upstream. Every attempt goes through the upstream's circuit breaker, and a
//! retry-safe call is tried again after a transient failure.
//!
//! Whether a call may run at all is decided before it gets here (the pipeline, the approval
//! queue's claim); this module only moves the bytes, and asks this node's grants (`gatehouse_cluster::grants`)
//! once more: a built-in tool runs only when the operator enabled it for the calling tenant, and
//! an Upstream's credential is used only when it names one the operator granted that tenant.
//! Credentials are read on each call, sent as a bearer token, and never logged; an Upstream
//! naming a node's variable or file (the form of earlier versions) is never read. Every error
//! message goes through `redact::text`: transport errors embed the URL they failed on.

pub mod a2a;
mod as_sent;
pub mod builtin;
mod http;
mod keep_alive;
pub(crate) mod mcp;
mod mcp_post;
mod resilience;

use crate::telemetry;
use futures::FutureExt;
use futures::future::BoxFuture;
use gatehouse_actors::{ExecError, Execution, Executor, ToolOutput};
use gatehouse_cluster::grants::BuiltinTool;
use gatehouse_cluster::grants::{CredentialSource, Grants};
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::redact;
use gatehouse_registry::resource::{
    CredentialRef, HttpBinding, Kind, LEGACY_CREDENTIAL, Resource, ResourceKey, UpstreamKind,
    UpstreamSpec,
};
pub use resilience::BreakerState;
use resilience::{Breakers, Plan};
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument;

/// Where credentials named `env` come from. The process environment in production; a map in
/// tests, which never set environment variables.
pub trait EnvSource: Send + Sync + 'static {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl<S: std::hash::BuildHasher + Send + Sync + 'static> EnvSource
    for std::collections::HashMap<String, String, S>
{
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// The node's executor. Cheap to clone; clones share the HTTP connection pools, the MCP
/// sessions, the A2A clients and the circuit breakers.
#[derive(Clone)]
pub struct NodeExecutor {
    registry: SharedRegistry,
    /// What the operator lets each tenant use: credentials and built-in tools.
    grants: Arc<Grants>,
    env: Arc<dyn EnvSource>,
    http: reqwest::Client,
    /// Where built-in tools that keep state (the demo ledger) keep it, a directory per tenant.
    state_dir: Option<std::path::PathBuf>,
    sessions: Arc<mcp::Sessions>,
    /// a2a-client speaks through its own major version of reqwest.
    a2a_http: a2a_reqwest::Client,
    a2a_clients: Arc<a2a::Clients>,
    breakers: Arc<Breakers>,
}

impl std::fmt::Debug for NodeExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeExecutor").finish_non_exhaustive()
    }
}

impl NodeExecutor {
    /// An executor that uses what `grants` allows, reading credentials named `env` from the
    /// process environment.
    pub fn new(registry: SharedRegistry, grants: Arc<Grants>) -> Self {
        NodeExecutor {
            registry,
            grants,
            env: Arc::new(ProcessEnv),
            http: http::client(),
            state_dir: None,
            sessions: Arc::default(),
            a2a_http: a2a::http_client(),
            a2a_clients: Arc::default(),
            breakers: Arc::default(),
        }
    }

    /// A view of this executor's circuit breakers (shared with its clones), for the metrics.
    pub fn breaker_states(&self) -> BreakerStates {
        BreakerStates(self.breakers.clone())
    }

    /// Reads credentials named `env` from `env` instead of the process environment.
    pub fn with_env(mut self, env: Arc<dyn EnvSource>) -> Self {
        self.env = env;
        self
    }

    /// Lets built-in tools keep state under `dir`, in a directory per tenant (the node's data
    /// directory has one).
    pub fn with_state_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.state_dir = Some(dir);
        self
    }

    /// The upstream a tenant's tool names, with its registry key as text (the breaker's and
    /// the session's key), and the tool's HTTP binding if it has one.
    fn resolve(
        &self,
        tenant: &str,
        upstream: &str,
        tool: &str,
    ) -> Option<(String, UpstreamSpec, Option<HttpBinding>)> {
        let registry = self.registry.read();
        let spec = registry.upstream(tenant, upstream)?.clone();
        let own = ResourceKey {
            kind: Kind::Upstream,
            tenant: Some(tenant.to_owned()),
            name: upstream.to_owned(),
        };
        let key = match registry.get(&own) {
            Some(stored) if matches!(stored.resource, Resource::Upstream(_)) => own,
            _ => ResourceKey {
                tenant: None,
                ..own
            },
        };
        let binding = registry
            .tool(tenant, tool)
            .and_then(|(spec, _)| spec.http.clone());
        Some((key.text(), spec, binding))
    }
}

/// Read-only access to an executor's circuit breakers: what the node's metrics report, without
/// the executor knowing about metrics.
#[derive(Debug, Clone)]
pub struct BreakerStates(Arc<Breakers>);

impl BreakerStates {
    /// Each upstream this node has called, by its registry key, and its breaker's state now.
    pub fn snapshot(&self) -> Vec<(String, BreakerState)> {
        self.0.snapshot()
    }
}

impl Executor for NodeExecutor {
    /// Runs the call in an `execute` span that continues the call's trace; the upstream's
    /// `traceparent` names that span as the parent.
    fn execute(&self, execution: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
        let span = tracing::info_span!(
            "execute",
            tenant = %execution.tenant,
            tool = %execution.tool,
            call = %execution.call_id,
            outcome = tracing::field::Empty,
        );
        let parent =
            telemetry::execution_parent(&execution.call_id, execution.trace_parent.as_deref());
        let traceparent = telemetry::continue_trace(&span, parent).to_string();
        let run = self.run(execution, traceparent);
        let recorder = span.clone();
        async move {
            // Whatever an error says reaches the agent, the call record and the logs: no URL
            // in it keeps its secrets.
            let result = run.await.map_err(|e| ExecError {
                message: redact::text(&e.message),
            });
            let outcome = match &result {
                Ok(out) if out.is_error => "tool_error",
                Ok(_) => "succeeded",
                Err(_) => "failed",
            };
            recorder.record("outcome", outcome);
            result
        }
        .instrument(span)
        .boxed()
    }
}

impl NodeExecutor {
    /// Invokes the upstream, `traceparent` being what it receives.
    fn run(
        &self,
        execution: Execution,
        traceparent: String,
    ) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
        let Some((upstream_name, tool)) = execution.tool.split_once('.') else {
            return fail(format!(
                "tool {} has no upstream: tools are named upstream.tool",
                execution.tool
            ));
        };
        let (upstream_name, tool) = (upstream_name.to_owned(), tool.to_owned());
        let Some((key, upstream, binding)) =
            self.resolve(&execution.tenant, &upstream_name, &execution.tool)
        else {
            return fail(format!(
                "upstream {upstream_name} of tool {} is not declared for tenant {}",
                execution.tool, execution.tenant
            ));
        };
        let kind = upstream.kind;
        if kind == UpstreamKind::Builtin {
            let enabled = BuiltinTool::parse(&tool)
                .filter(|t| self.grants.builtin_enabled(&execution.tenant, *t));
            let Some(builtin) = enabled else {
                return fail(format!(
                    "the built-in tool {tool} is not enabled for tenant {} on this node",
                    execution.tenant
                ));
            };
            let state_dir = self
                .state_dir
                .as_deref()
                .map(|dir| builtin::tenant_dir(dir, &execution.tenant));
            return builtin::run(builtin, execution, state_dir).boxed();
        }
        let this = self.clone();
        async move {
            let Some(url) = upstream.url.clone() else {
                return Err(ExecError {
                    message: format!("the {kind:?} upstream {upstream_name} has no url"),
                });
            };
            let bearer = match &upstream.credential {
                Some(credential) => Some(
                    read_credential(
                        &this.grants,
                        &*this.env,
                        Some(&execution.tenant),
                        credential,
                    )
                    .await?,
                ),
                None => None,
            };
            let timeout = upstream.timeout();
            let plan = Plan {
                key: &key,
                name: &upstream_name,
                retries: upstream.retry_policy(),
                breaker: upstream.breaker_policy(),
                retry_safe: execution.retry_safe,
            };
            match kind {
                UpstreamKind::Http => {
                    let request =
                        http::request(&url, &tool, binding.as_ref(), &execution.arguments)?;
                    // Each kind's calls boxed: the future of every call, whatever its kind,
                    // would otherwise have room for the largest kind's (15.9 KB in all against
                    // the MCP call's 7.6 KB), and be copied whole into its box.
                    Box::pin(resilience::run(&this.breakers, plan, || {
                        http::attempt(
                            &this.http,
                            &request,
                            &execution,
                            &traceparent,
                            bearer.as_deref(),
                            timeout,
                        )
                    }))
                    .await
                }
                UpstreamKind::Mcp => {
                    let call = mcp::Call {
                        key: &key,
                        url: &url,
                        bearer: bearer.as_deref(),
                        tool: &tool,
                        traceparent: &traceparent,
                        timeout,
                    };
                    Box::pin(resilience::run(&this.breakers, plan, || {
                        mcp::attempt(&this.sessions, call, &execution)
                    }))
                    .await
                }
                UpstreamKind::A2a => {
                    let call = a2a::Call {
                        key: &key,
                        name: &upstream_name,
                        url: &url,
                        bearer: bearer.as_deref(),
                        tool: &tool,
                        traceparent: &traceparent,
                        timeout,
                    };
                    Box::pin(resilience::run(&this.breakers, plan, || {
                        a2a::attempt(&this.a2a_clients, &this.a2a_http, call, &execution)
                    }))
                    .await
                }
                UpstreamKind::Builtin => unreachable_kind(kind),
            }
        }
        .boxed()
    }
}

fn unreachable_kind(kind: UpstreamKind) -> Result<ToolOutput, ExecError> {
    Err(ExecError {
        message: format!("upstreams of kind {kind:?} are not called over the network"),
    })
}

fn fail(message: String) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
    futures::future::ready(Err(ExecError { message })).boxed()
}

/// Reads the credential an Upstream names, at call time, so a rotated secret is used from the
/// next call on. Only an operator's credential granted to `tenant` is read (`None`: work no
/// tenant asked for, which only a credential granted to every tenant serves); the old form,
/// naming a variable or file of the node, never is. Errors name the credential, never what was
/// found.
pub(crate) async fn read_credential(
    grants: &Grants,
    env: &dyn EnvSource,
    tenant: Option<&str>,
    credential: &CredentialRef,
) -> Result<String, ExecError> {
    let refuse = |message: String| Err(ExecError { message });
    let name = match credential {
        CredentialRef::Named(name) => name,
        CredentialRef::Legacy(_) => {
            return refuse(format!(
                "the upstream's credential {LEGACY_CREDENTIAL}; it is not used"
            ));
        }
    };
    let Some(source) = grants.credential_for(tenant, name) else {
        return refuse(match tenant {
            Some(tenant) => format!(
                "credential {name:?} is not one this node grants to tenant \
                 {tenant}"
            ),
            None => format!(
                "credential {name:?} is not granted to every tenant, and no \
                 tenant asked for this"
            ),
        });
    };
    let value = match source {
        CredentialSource::Env(var) => match env.var(var) {
            Some(value) => value,
            None => {
                return refuse(format!(
                    "credential {name:?}: its environment variable is not set on \
                     this node"
                ));
            }
        },
        CredentialSource::File(path) => {
            if let Some(dir) = grants.guarded_dir()
                && inside_data_dir(path, dir).await
            {
                return refuse(format!(
                    "credential {name:?} is a file in the node's data directory, \
                     which is never sent anywhere"
                ));
            }
            tokio::fs::read_to_string(path)
                .await
                .map_err(|e| ExecError {
                    message: format!(
                        "credential {name:?}: reading its file on this node: {}",
                        e.kind()
                    ),
                })?
        }
    };
    let value = value.trim();
    if value.is_empty() {
        return refuse(format!("credential {name:?} is empty"));
    }
    Ok(value.to_owned())
}

/// Whether `path` is in the data directory, by its real path now: a link put in place after
/// the configuration was checked is followed too.
async fn inside_data_dir(path: &std::path::Path, data_dir: &std::path::Path) -> bool {
    let path = path.to_owned();
    let data_dir = data_dir.to_owned();
    tokio::task::spawn_blocking(move || gatehouse_cluster::grants::inside(&path, &data_dir))
        .await
        .unwrap_or(true)
}

/// An MCP `CallToolResult` with one text content, and the structured form when the output is a
/// JSON object (MCP's `structuredContent` is always an object).
pub(crate) fn tool_result(text: String, structured: Option<Value>, is_error: bool) -> ToolOutput {
    let mut result = serde_json::json!({
        "content": [{"type": "text", "text": text}],
        "isError": is_error,
    });
    if let Some(object) = structured.filter(Value::is_object) {
        result["structuredContent"] = object;
    }
    ToolOutput {
        result_json: result.to_string(),
        is_error,
    }
}

#[cfg(test)]
pub(crate) mod test_mcp;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_upstreams;
