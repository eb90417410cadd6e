//! Reaching upstreams: the node's `Executor`. It finds the tool's upstream in this node's copy of
//! the registry (the tenant's own first, then a shared one) and invokes it, by kind: built-in
//! tools here in the process, HTTP/JSON services by the tool's binding, MCP servers over
//! streamable HTTP with a session kept per upstream, A2A agents as one task each with a client
//! kept per upstream. Every attempt goes through the upstream's circuit breaker, and a
//! retry-safe call is tried again after a transient failure.
//!
//! Whether a call may run at all is decided before it gets here (the pipeline, the approval
//! queue's claim); this module only moves the bytes. Credentials are read on each call from this
//! node's environment or files, sent as a bearer token, and never logged.

mod a2a;
pub mod builtin;
mod http;
pub(crate) mod mcp;
mod resilience;

use crate::telemetry;
use futures::FutureExt;
use futures::future::BoxFuture;
use gatehouse_actors::{ExecError, Execution, Executor, ToolOutput};
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::resource::{
    CredentialRef, HttpBinding, Kind, Resource, ResourceKey, UpstreamKind, UpstreamSpec,
};
pub use resilience::BreakerState;
use resilience::{Breakers, Plan};
use serde_json::Value;
use std::sync::{Arc, PoisonError};
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
    env: Arc<dyn EnvSource>,
    http: reqwest::Client,
    /// Where built-in tools that keep state (the demo ledger) keep it.
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
    /// An executor that reads credentials from the process environment.
    pub fn new(registry: SharedRegistry) -> Self {
        Self::with_env(registry, Arc::new(ProcessEnv))
    }

    pub fn with_env(registry: SharedRegistry, env: Arc<dyn EnvSource>) -> Self {
        NodeExecutor {
            registry,
            env,
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

    /// Lets built-in tools keep state in `dir` (the node's data directory has one).
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
        let registry = self.registry.read().unwrap_or_else(PoisonError::into_inner);
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
        Some((key.to_string(), spec, binding))
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
            let result = run.await;
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
            return builtin::run(tool, execution, self.state_dir.clone()).boxed();
        }
        let this = self.clone();
        async move {
            let Some(url) = upstream.url.clone() else {
                return Err(ExecError {
                    message: format!("the {kind:?} upstream {upstream_name} has no url"),
                });
            };
            let bearer = match &upstream.credential {
                Some(credential) => Some(read_credential(&*this.env, credential).await?),
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
                    resilience::run(&this.breakers, plan, || {
                        http::attempt(
                            &this.http,
                            &request,
                            &execution,
                            &traceparent,
                            bearer.as_deref(),
                            timeout,
                        )
                    })
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
                    resilience::run(&this.breakers, plan, || {
                        mcp::attempt(&this.sessions, call, &execution)
                    })
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
                    resilience::run(&this.breakers, plan, || {
                        a2a::attempt(&this.a2a_clients, &this.a2a_http, call, &execution)
                    })
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

/// Reads a named credential at call time, so a rotated secret is used from the next call on.
/// Errors name where it was looked for, never what was found.
pub(crate) async fn read_credential(
    env: &dyn EnvSource,
    credential: &CredentialRef,
) -> Result<String, ExecError> {
    let value = match (&credential.env, &credential.file) {
        (Some(name), _) => env.var(name).ok_or_else(|| ExecError {
            message: format!(
                "the upstream's credential: environment variable {name} is not set on this node"
            ),
        })?,
        (None, Some(path)) => tokio::fs::read_to_string(path)
            .await
            .map_err(|e| ExecError {
                message: format!("the upstream's credential: reading {path}: {e}"),
            })?,
        (None, None) => {
            return Err(ExecError {
                message: "the upstream's credential names neither env nor file".into(),
            });
        }
    };
    let value = value.trim();
    if value.is_empty() {
        return Err(ExecError {
            message: "the upstream's credential is empty".into(),
        });
    }
    Ok(value.to_owned())
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
