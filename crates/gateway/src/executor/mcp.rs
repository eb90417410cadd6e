//! MCP upstreams over streamable HTTP. Each node keeps one client session per upstream and
//! reuses it across calls; a session that fails, or whose URL or credential changed, is dropped
//! and the next attempt opens a new one. Sessions are opened through one pooled HTTP client and
//! calls posted on keep-alive connections of the calling thread's, so calls reuse
//! connections instead of opening one each. A call is `tools/call` with
//! the tool's own name, the arguments, and in `_meta` the skill context, the idempotency key and
//! the trace context.
//!
//! rmcp opens the session (the handshake, the version) and keeps it. A call on a session of a
//! revision before 2026-07-28 is posted by the calling task itself, with the headers rmcp's
//! worker would send (`Mcp-Session-Id` if the upstream gave one, `MCP-Protocol-Version`), and
//! its answer read from the response (`mcp_post.rs`): rmcp's client would pass it through its
//! service task and transport worker, four hand-offs between tasks per call. A 2026-07-28
//! session's calls go through rmcp.

use super::mcp_post;
use super::resilience::Attempt;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use gatehouse_registry::redact;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ClientJsonRpcMessage, ErrorData,
    JsonObject, JsonRpcVersion2_0, MetaObject, ProtocolVersion, RequestId, RequestMetaObject, Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sse_stream::Sse;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
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
    /// How its calls are posted without rmcp's worker, when they can be.
    direct: Option<Direct>,
}

/// What a call posted by the calling task carries besides its body, made once per session.
struct Direct {
    url: http::Uri,
    /// `Accept` and `Content-Type` as rmcp's client sends them, `MCP-Protocol-Version` (the
    /// revision the handshake settled on), the session id if the upstream keeps sessions, and
    /// the credential.
    headers: HeaderMap,
    in_session: bool,
    /// Ids of the calls posted directly; strings, apart from the numbers rmcp's own requests on
    /// the session take.
    next_id: AtomicU64,
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
        let recording = Recording {
            http: self.http.clone(),
            session_id: Arc::default(),
        };
        // Boxed: the handshake is a large future, and every call awaits `get`.
        let session = Box::pin(connect(&recording, url, bearer, timeout)).await?;
        let direct = direct(&session, recording.session_id.get().cloned(), url, bearer);
        let open = Arc::new(Open {
            url: url.to_owned(),
            bearer: bearer.map(str::to_owned),
            session,
            direct,
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

/// How the calls of `session` are posted directly: when the handshake settled on a revision before
/// 2026-07-28, whose requests carry no `Mcp-Method`/`Mcp-Name` headers; with the session id the
/// upstream gave, if it keeps sessions.
fn direct(
    session: &Session,
    session_id: Option<Arc<str>>,
    url: &str,
    bearer: Option<&str>,
) -> Option<Direct> {
    let version = session.peer_info()?.protocol_version.clone();
    if version >= ProtocolVersion::STANDARD_HEADERS {
        return None;
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("text/event-stream, application/json"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("mcp-protocol-version"),
        HeaderValue::from_str(version.as_str()).ok()?,
    );
    if let Some(id) = &session_id {
        headers.insert(
            HeaderName::from_static("mcp-session-id"),
            HeaderValue::from_str(id).ok()?,
        );
    }
    if let Some(token) = bearer {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    let url = url.parse().ok()?;
    headers.insert(HOST, mcp_post::host(&url)?);
    Some(Direct {
        url,
        headers,
        in_session: session_id.is_some(),
        next_id: AtomicU64::new(1),
    })
}

/// The pooled client, remembering the session id the upstream gives the handshake. Events are
/// bounded by reqwest's client as by rmcp's transport with its default settings, which sessions
/// use.
#[derive(Clone)]
struct Recording {
    http: a2a_reqwest::Client,
    session_id: Arc<OnceLock<Arc<str>>>,
}

impl StreamableHttpClient for Recording {
    type Error = a2a_reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        let posted = self
            .http
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        self.remember(&posted);
        posted
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<
        futures::stream::BoxStream<'static, Result<Sse, SseError>>,
        StreamableHttpError<Self::Error>,
    > {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }
}

impl Recording {
    fn remember(
        &self,
        posted: &Result<StreamableHttpPostResponse, StreamableHttpError<a2a_reqwest::Error>>,
    ) {
        if let Ok(
            StreamableHttpPostResponse::Json(_, Some(id))
            | StreamableHttpPostResponse::Sse(_, Some(id)),
        ) = posted
        {
            let _ = self.session_id.set(id.as_str().into());
        }
    }
}

/// Opens a client session with the upstream over `http`; the credential goes as a bearer token.
pub(crate) async fn connect<C: StreamableHttpClient>(
    http: &C,
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
    let Some(arguments) = json_object(&execution.arguments) else {
        return Attempt::refused(ExecError {
            message: "the arguments are not a JSON object".into(),
        });
    };
    let mut open = match sessions.get(key, url, bearer, timeout).await {
        Ok(open) => open,
        Err(e) => return Attempt::transient(Err(e)),
    };
    let params = Params {
        name: tool,
        arguments,
        meta: meta(execution, traceparent),
    };
    // The URL as logs and errors may show it, made only when one does.
    let shown = || redact::url(url);
    tracing::debug!(call = %execution.call_id, tool = %execution.tool, url = %shown(), "calling mcp upstream");
    let mut called = tokio::time::timeout(timeout, call_tool(&open, &params)).await;
    if matches!(called, Ok(Called::Expired)) {
        // The upstream forgot the session and did not take the call: once more on a new one,
        // as rmcp's own client does.
        sessions.drop_failed(key, &open).await;
        open = match Box::pin(sessions.get(key, url, bearer, timeout)).await {
            Ok(open) => open,
            Err(e) => return Attempt::transient(Err(e)),
        };
        called = tokio::time::timeout(timeout, call_tool(&open, &params)).await;
    }
    let error = match called {
        Ok(Called::AnsweredAsSent(output)) => return Attempt::answered(output),
        Ok(Called::Answered(result)) => {
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
        Ok(Called::Refused(e)) => {
            // The session works; the upstream refused this request.
            return Attempt::answered_error(ExecError {
                message: redact::text(&format!(
                    "{} answered tools/call with an error: {}",
                    shown(),
                    e.message
                )),
            });
        }
        Ok(Called::Failed(e)) => redact::text(&format!("calling {}: {e}", shown())),
        Ok(Called::Expired) => format!("{} forgot the session opened for the call", shown()),
        Err(_) => format!("{} did not answer within {timeout:?}", shown()),
    };
    sessions.drop_failed(key, &open).await;
    Attempt::transient(Err(ExecError { message: error }))
}

/// What came of one `tools/call` on a session.
pub(super) enum Called {
    /// A tool's result kept as the upstream wrote it (`as_sent`).
    AnsweredAsSent(ToolOutput),
    /// A tool's result as rmcp reads it, to be written out again.
    Answered(CallToolResult),
    /// The upstream answered with a JSON-RPC error.
    Refused(ErrorData),
    /// No answer: the session or the connection failed.
    Failed(String),
    /// The upstream no longer knows the session (404), so it did not take the call.
    Expired,
}

/// The text of `json` when it is one JSON object, to be sent on as it is.
fn json_object(json: &str) -> Option<&RawValue> {
    serde_json::from_str::<&RawValue>(json)
        .ok()
        .filter(|raw| raw.get().starts_with('{'))
}

/// A `tools/call`'s params: the tool's name as the upstream knows it, the arguments as the
/// call carries them (checked to be an object, passed on as they are), and `_meta`.
#[derive(Serialize)]
struct Params<'a> {
    #[serde(rename = "_meta")]
    meta: RequestMetaObject,
    name: &'a str,
    arguments: &'a RawValue,
}

/// A `tools/call` request as rmcp's client writes one.
#[derive(Serialize)]
struct Posted<'a> {
    jsonrpc: JsonRpcVersion2_0,
    id: &'a RequestId,
    method: &'static str,
    params: &'a Params<'a>,
}

/// One `tools/call` on `open`: posted by this task when the session allows it, else through
/// rmcp's session.
async fn call_tool(open: &Open, params: &Params<'_>) -> Called {
    let Some(direct) = &open.direct else {
        let arguments = match serde_json::from_str::<JsonObject>(params.arguments.get()) {
            Ok(arguments) => arguments,
            Err(e) => return Called::Failed(format!("the arguments do not read back: {e}")),
        };
        let mut request =
            CallToolRequestParams::new(params.name.to_owned()).with_arguments(arguments);
        request.meta = Some(params.meta.clone());
        // Boxed, as the calls posted directly need none of rmcp's session future.
        return match Box::pin(open.session.call_tool(request)).await {
            Ok(result) => Called::Answered(result),
            Err(ServiceError::McpError(e)) => Called::Refused(e),
            Err(e) => Called::Failed(e.to_string()),
        };
    };
    let n = direct.next_id.fetch_add(1, Ordering::Relaxed);
    let id = RequestId::String(format!("gatehouse-{n}").into());
    let message = Posted {
        jsonrpc: JsonRpcVersion2_0,
        id: &id,
        method: "tools/call",
        params,
    };
    // Room for the arguments and the request around them, written without growing.
    let mut body = Vec::with_capacity(params.arguments.get().len() + 512);
    let body = match serde_json::to_writer(&mut body, &message) {
        Ok(()) => body,
        Err(e) => return Called::Failed(format!("the call does not serialize: {e}")),
    };
    let to = mcp_post::Target {
        url: &direct.url,
        headers: &direct.headers,
        in_session: direct.in_session,
    };
    mcp_post::post(to, &id, body).await
}
