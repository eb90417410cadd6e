//! Reaching upstreams: the node's `Executor`. It finds the tool's upstream in this node's copy of
//! the registry (the tenant's own first, then a shared one) and invokes it once per `execute`,
//! by kind: built-in tools here in the process, HTTP/JSON services with a POST.
//!
//! Whether a call may run at all is decided before it gets here (the pipeline, the approval
//! queue's claim); this module only moves the bytes. Credentials are read on each call from this
//! node's environment or files, sent as a bearer token, and never logged.

pub mod builtin;
mod http;

use futures::FutureExt;
use futures::future::BoxFuture;
use gatehouse_actors::{ExecError, Execution, Executor, ToolOutput};
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::resource::{CredentialRef, UpstreamKind};
use serde_json::Value;
use std::sync::{Arc, PoisonError};

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

/// The node's executor. Cheap to clone; clones share one HTTP connection pool.
#[derive(Clone)]
pub struct NodeExecutor {
    registry: SharedRegistry,
    env: Arc<dyn EnvSource>,
    http: reqwest::Client,
    /// Where built-in tools that keep state (the demo ledger) keep it.
    state_dir: Option<std::path::PathBuf>,
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
        }
    }

    /// Lets built-in tools keep state in `dir` (the node's data directory has one).
    pub fn with_state_dir(mut self, dir: std::path::PathBuf) -> Self {
        self.state_dir = Some(dir);
        self
    }
}

impl Executor for NodeExecutor {
    fn execute(&self, execution: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
        let Some((upstream_name, tool)) = execution.tool.split_once('.') else {
            return fail(format!(
                "tool {} has no upstream: tools are named upstream.tool",
                execution.tool
            ));
        };
        let (upstream_name, tool) = (upstream_name.to_owned(), tool.to_owned());
        let upstream = self
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .upstream(&execution.tenant, &upstream_name)
            .cloned();
        let Some(upstream) = upstream else {
            return fail(format!(
                "upstream {upstream_name} of tool {} is not declared for tenant {}",
                execution.tool, execution.tenant
            ));
        };
        match upstream.kind {
            UpstreamKind::Builtin => builtin::run(tool, execution, self.state_dir.clone()).boxed(),
            UpstreamKind::Http => {
                let client = self.http.clone();
                let env = self.env.clone();
                async move {
                    let bearer = match &upstream.credential {
                        Some(credential) => Some(read_credential(&*env, credential).await?),
                        None => None,
                    };
                    http::call(&client, &upstream, &tool, &execution, bearer).await
                }
                .boxed()
            }
            UpstreamKind::Mcp => fail("upstreams of kind mcp arrive with the MCP front".into()),
            UpstreamKind::A2a => fail("upstreams of kind a2a arrive with the A2A front".into()),
        }
    }
}

fn fail(message: String) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
    futures::future::ready(Err(ExecError { message })).boxed()
}

/// Reads a named credential at call time, so a rotated secret is used from the next call on.
/// Errors name where it was looked for, never what was found.
async fn read_credential(
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
mod tests;
