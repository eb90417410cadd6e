//! MCP upstreams over streamable HTTP. Each node keeps one client session per upstream and
//! reuses it across calls; a session that fails, or whose URL or credential changed, is dropped
//! and the next attempt opens a new one. Every session speaks through one pooled HTTP client, so
//! calls reuse keep-alive connections instead of opening one each. A call is `tools/call` with
//! the tool's own name, the arguments, and in `_meta` the skill context, the idempotency key and
//! the trace context.

use super::resilience::Attempt;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use gatehouse_registry::redact;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, ClientConfig, JsonObject, MetaObject, RequestMetaObject, Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The `_meta` key of the resolved skill context.
pub const SKILL_CONTEXT_META: &str = "dev.gatehouse/skill-context";
/// The `_meta` key of the call's idempotency key.
pub const IDEMPOTENCY_KEY_META: &str = "dev.gatehouse/idempotency-key";

type Session = RunningService<RoleClient, ClientConfig>;

/// An open session and what it was opened with.
struct Open {
    url: String,
    bearer: Option<String>,
    session: Session,
}

/// One upstream's session, if open; locked while one is being opened.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Open>>>>;

/// This node's sessions, by upstream key, and the HTTP client they share.
pub(super) struct Sessions {
    by_upstream: Mutex<HashMap<String, Slot>>,
    http: a2a_reqwest::Client,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            by_upstream: Mutex::default(),
            http: client(),
        }
    }
}

/// The HTTP client MCP sessions speak through: connections kept alive and pooled (rmcp's own
/// default opens a connection per request), no redirect followed (it would carry the credential
/// and the session id elsewhere: the upstream's declared URL is the only place a call goes), no
/// proxy from the environment (upstreams are reached directly, as the admin declared them).
/// rmcp speaks through reqwest's newer major version, the one a2a-client uses.
pub(crate) fn client() -> a2a_reqwest::Client {
    a2a_reqwest::Client::builder()
        .redirect(a2a_reqwest::redirect::Policy::none())
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .unwrap_or_default()
}

impl Sessions {
    /// The upstream's session, opened when there is none or it no longer fits.
    async fn get(
        &self,
        key: &str,
        url: &str,
        bearer: Option<&str>,
        timeout: Duration,
    ) -> Result<Arc<Open>, ExecError> {
        let slot = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .clone();
        // Held while connecting, so concurrent calls to a cold upstream open one session.
        let mut slot = slot.lock().await;
        if let Some(open) = slot.as_ref()
            && open.url == url
            && open.bearer.as_deref() == bearer
            && !open.session.is_closed()
        {
            return Ok(open.clone());
        }
        let session = connect(&self.http, url, bearer, timeout).await?;
        let open = Arc::new(Open {
            url: url.to_owned(),
            bearer: bearer.map(str::to_owned),
            session,
        });
        *slot = Some(open.clone());
        Ok(open)
    }

    /// Forgets the upstream's session if it is still `failed`, so the next attempt reconnects.
    async fn drop_failed(&self, key: &str, failed: &Arc<Open>) {
        let slot = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned();
        if let Some(slot) = slot {
            let mut slot = slot.lock().await;
            if slot.as_ref().is_some_and(|open| Arc::ptr_eq(open, failed)) {
                *slot = None;
            }
        }
    }
}

/// Opens a client session with the upstream over `http`; the credential goes as a bearer token.
pub(crate) async fn connect(
    http: &a2a_reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    timeout: Duration,
) -> Result<Session, ExecError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = bearer {
        config = config.auth_header(token.to_owned());
    }
    let transport = StreamableHttpClientTransport::with_client(http.clone(), config);
    match tokio::time::timeout(timeout, ClientConfig::default().serve(transport)).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(e)) => Err(ExecError {
            message: redact::text(&format!("connecting to the mcp upstream {url}: {e}")),
        }),
        Err(_) => Err(ExecError {
            message: format!(
                "the mcp upstream {} did not complete its handshake within {timeout:?}",
                redact::url(url)
            ),
        }),
    }
}

/// Every tool the upstream lists, all pages.
pub(crate) async fn list_tools(
    url: &str,
    bearer: Option<&str>,
    timeout: Duration,
) -> Result<Vec<Tool>, ExecError> {
    let session = connect(&client(), url, bearer, timeout).await?;
    let listed = tokio::time::timeout(timeout, session.peer().list_all_tools()).await;
    let _ = session.cancel().await;
    match listed {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(e)) => Err(ExecError {
            message: redact::text(&format!("listing the tools of {url}: {e}")),
        }),
        Err(_) => Err(ExecError {
            message: format!(
                "{} did not list its tools within {timeout:?}",
                redact::url(url)
            ),
        }),
    }
}

/// What goes to the upstream besides the arguments.
pub(super) fn meta(execution: &Execution, traceparent: &str) -> RequestMetaObject {
    let mut meta = JsonObject::new();
    if let Some(context) = &execution.skill_context {
        meta.insert(SKILL_CONTEXT_META.into(), Value::String(context.clone()));
    }
    meta.insert(
        IDEMPOTENCY_KEY_META.into(),
        Value::String(execution.idempotency_key.clone()),
    );
    let mut meta = MetaObject(meta);
    meta.set_traceparent(traceparent);
    RequestMetaObject(meta)
}

/// Where one call goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call<'a> {
    /// The session's key: the upstream's registry key.
    pub key: &'a str,
    pub url: &'a str,
    pub bearer: Option<&'a str>,
    /// The tool's name as the upstream knows it.
    pub tool: &'a str,
    pub traceparent: &'a str,
    pub timeout: Duration,
}

/// One attempt of a call.
pub(super) async fn attempt(sessions: &Sessions, call: Call<'_>, execution: &Execution) -> Attempt {
    let Call {
        key,
        url,
        bearer,
        tool,
        traceparent,
        timeout,
    } = call;
    let arguments = match serde_json::from_str::<Value>(&execution.arguments) {
        Ok(Value::Object(arguments)) => arguments,
        _ => {
            return Attempt::refused(ExecError {
                message: "the arguments are not a JSON object".into(),
            });
        }
    };
    let open = match sessions.get(key, url, bearer, timeout).await {
        Ok(open) => open,
        Err(e) => return Attempt::transient(Err(e)),
    };
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    params.meta = Some(meta(execution, traceparent));
    let shown = redact::url(url);
    tracing::debug!(call = %execution.call_id, tool = %execution.tool, url = %shown, "calling mcp upstream");
    let called = tokio::time::timeout(timeout, open.session.call_tool(params)).await;
    let error = match called {
        Ok(Ok(result)) => {
            let is_error = result.is_error == Some(true);
            return match serde_json::to_string(&result) {
                Ok(result_json) => Attempt::answered(ToolOutput {
                    result_json,
                    is_error,
                }),
                Err(e) => Attempt::answered_error(ExecError {
                    message: format!("the upstream's result does not serialize: {e}"),
                }),
            };
        }
        Ok(Err(ServiceError::McpError(e))) => {
            // The session works; the upstream refused this request.
            return Attempt::answered_error(ExecError {
                message: redact::text(&format!(
                    "{shown} answered tools/call with an error: {}",
                    e.message
                )),
            });
        }
        Ok(Err(e)) => redact::text(&format!("calling {shown}: {e}")),
        Err(_) => format!("{shown} did not answer within {timeout:?}"),
    };
    sessions.drop_failed(key, &open).await;
    Attempt::transient(Err(ExecError { message: error }))
}
