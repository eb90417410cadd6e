//! The MCP server every `/mcp` session (or stateless request) talks to: tools, the call
//! pipeline, tasks for calls that wait, the guide prompt and the call resources.

use super::guard::Agent;
use super::render::{self, META_IDEMPOTENCY_KEY, refused};
use super::tasks;
use super::tools::{CALL_STATUS, LOAD_TOOLSET, MAX_STATUS_WAIT_MS};
use super::{Front, catalog, guide};
use gatehouse_audit::Kind;
use gatehouse_gateway::pipeline::{CallInput, Envelope, ErrorCode, GatewayError};
use gatehouse_gateway::telemetry::{self, TRACEPARENT, TraceParent};
use gatehouse_registry::CallState;
use http::HeaderMap;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, GetPromptRequestParams, GetPromptResponse, GetPromptResult, GetTaskParams,
    GetTaskResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, RequestMetaObject,
    Resource, ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a call that needs no person (approved at once, but recorded because it carries an
/// idempotency key) is followed before the agent is told to poll.
const EXECUTION_WAIT: Duration = Duration::from_secs(30);

const CALLS_PREFIX: &str = "gatehouse://calls/";

#[derive(Debug, Clone)]
pub struct Handler {
    front: Arc<Front>,
    /// Whether this session already watches its tool list for changes.
    watching: Arc<AtomicBool>,
}

impl Handler {
    pub fn new(front: Arc<Front>) -> Self {
        Handler {
            front,
            watching: Arc::new(AtomicBool::new(false)),
        }
    }

    async fn call_status(&self, agent: &Agent, arguments: &Value) -> CallToolResult {
        let Some(call_id) = arguments.get("call_id").and_then(Value::as_str) else {
            let error = GatewayError::new(
                ErrorCode::InvalidArguments,
                "call_id is required",
                "pass the call_id an approval_pending answer gave",
            );
            return render::error_result(&error, None);
        };
        let wait_ms = arguments
            .get("wait_ms")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_STATUS_WAIT_MS);
        let pipeline = &self.front.pipeline;
        let envelope = if wait_ms > 0 {
            pipeline
                .wait(&agent.caller, call_id, Duration::from_millis(wait_ms))
                .await
        } else {
            pipeline.status(&agent.caller, call_id).await
        };
        match envelope {
            Ok(envelope) if settled(envelope.state) => render::settled(&envelope),
            Ok(envelope) => render::in_progress(&envelope),
            Err(error) => render::error_result(&error, None),
        }
    }

    async fn load_toolset(&self, agent: &Agent, arguments: &Value) -> CallToolResult {
        let Some(toolset) = arguments.get("toolset").and_then(Value::as_str) else {
            let error = GatewayError::new(
                ErrorCode::InvalidArguments,
                "toolset is required",
                "name one of the toolsets this tool's description lists",
            );
            return render::error_result(&error, None);
        };
        let Some(tenant) = agent.tenant.as_deref() else {
            let error = GatewayError::not_found(format!("no toolset {toolset}"));
            return render::error_result(&error, None);
        };
        let write = arguments
            .get("include_write_tools")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        match self
            .front
            .pipeline
            .load_toolset(&agent.caller, tenant, toolset, write)
            .await
        {
            Ok(write) => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "toolset {toolset} loaded{}; list the tools again to see them",
                    if write { " with its write tools" } else { "" }
                ))]);
                result.structured_content =
                    Some(json!({"toolset": toolset, "include_write_tools": write}));
                result.meta = Some(render::bare_meta());
                result
            }
            Err(error) => render::error_result(&error, None),
        }
    }

    /// Tells this session's client when the tools it sees change, until the session ends.
    fn watch_tool_list(&self, agent: Agent, peer: rmcp::Peer<RoleServer>) {
        if self.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let front = self.front.clone();
        let listing = move || catalog::digest(&catalog::listing(&front.pipeline, &agent));
        let mut applied = self.front.pipeline.applied();
        let stop = self.front.stop.clone();
        // The list as the session starts, taken before anything it does can change it.
        let mut seen = listing();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = applied.changed() => if changed.is_err() { return },
                    () = stop.cancelled() => return,
                }
                let now = listing();
                if now != seen {
                    seen = now;
                    if peer.notify_tool_list_changed().await.is_err() {
                        // The session is gone.
                        return;
                    }
                }
            }
        });
    }
}

/// Final, or stuck where only an approver can help: nothing more to wait for.
pub(super) fn settled(state: CallState) -> bool {
    state.is_finished() || state == CallState::OutcomeUnknown
}

/// A call as far as it got: past a short wait for approval when configured, and past its
/// execution when nobody needs to approve it.
async fn follow(front: &Front, agent: &Agent, envelope: Envelope) -> Envelope {
    let pipeline = &front.pipeline;
    let mut envelope = envelope;
    let wait = front.settings.approval_wait;
    if envelope.state == CallState::Pending && !wait.is_zero() {
        envelope = pipeline
            .wait(&agent.caller, &envelope.call_id, wait)
            .await
            .unwrap_or(envelope);
    }
    if matches!(envelope.state, CallState::Approved | CallState::Executing) {
        envelope = pipeline
            .wait(&agent.caller, &envelope.call_id, EXECUTION_WAIT)
            .await
            .unwrap_or(envelope);
    }
    envelope
}

/// What came of a `tools/call`.
pub(super) enum Ran {
    /// A call ran, or waited as long as the front waits: its envelope says how it stands.
    Settled(Envelope),
    /// An answer of its own: a refusal before any call existed, or a task's handle.
    Answered(CallToolResponse),
}

impl Ran {
    /// The answer as rmcp's type.
    pub(super) fn into_response(self) -> CallToolResponse {
        match self {
            Ran::Settled(envelope) => render::settled(&envelope).into(),
            Ran::Answered(response) => response,
        }
    }
}

/// A `tools/call` of one of the tenant's tools, through the pipeline. `meta` is the request's
/// `_meta` (rmcp hands it over beside `request.meta`), `headers` the HTTP request's. The rmcp
/// handler and the direct path (direct.rs) both run calls through this.
pub(super) async fn run_call(
    front: &Arc<Front>,
    agent: &Agent,
    request: CallToolRequestParams,
    meta: &RequestMetaObject,
    headers: Option<&HeaderMap>,
    tasks_declared: bool,
) -> Ran {
    let Some(tenant) = agent.tenant.clone() else {
        let error = GatewayError::new(
            ErrorCode::UnknownTool,
            format!("unknown tool {}", request.name),
            "you are an agent of no tenant: only the gatehouse.* tools are yours",
        );
        return Ran::Answered(render::error_result(&error, None).into());
    };
    let idempotency_key = request
        .meta
        .as_ref()
        .and_then(|m| m.get(META_IDEMPOTENCY_KEY))
        .or_else(|| meta.get(META_IDEMPOTENCY_KEY))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let trace_parent = trace_parent(&request, meta, headers);
    let input = CallInput {
        tenant,
        tool: request.name.to_string(),
        arguments: Value::Object(request.arguments.unwrap_or_default()),
        idempotency_key,
        a2a_peer: None,
        context_id: None,
        requested_mode: None,
        trace_parent,
    };
    let envelope = match front.pipeline.call(&agent.caller, input).await {
        Ok(envelope) => envelope,
        Err(error) => return Ran::Answered(render::error_result(&error, None).into()),
    };
    if tasks_declared && !settled(envelope.state) {
        let task = tasks::seed(front, &envelope);
        return Ran::Answered(CallToolResponse::Task(
            CreateTaskResult::new(task).with_meta(render::envelope_meta(&envelope)),
        ));
    }
    if settled(envelope.state) {
        return Ran::Settled(envelope);
    }
    // Boxed: waiting on a call's record is far larger a future than a call run at once.
    Ran::Settled(Box::pin(follow(front, agent, envelope)).await)
}

/// The trace context a `tools/call` continues: its `_meta.traceparent` when that is valid (it
/// names the MCP request itself, where an HTTP header may be a proxy's or a connection's), else
/// the HTTP request's `traceparent` header. An invalid value is ignored.
fn trace_parent(
    request: &CallToolRequestParams,
    meta: &RequestMetaObject,
    headers: Option<&HeaderMap>,
) -> Option<TraceParent> {
    let from_meta = request
        .meta
        .as_ref()
        .and_then(|m| m.get(TRACEPARENT))
        .or_else(|| meta.get(TRACEPARENT))
        .and_then(Value::as_str);
    let from_header = headers
        .and_then(|headers| headers.get(TRACEPARENT))
        .map(|value| value.as_bytes());
    telemetry::meta_over_header(from_meta, from_header)
}

/// The caller the `/mcp` guard authenticated, from the request's HTTP parts.
fn agent_of(extensions: &rmcp::model::Extensions) -> Result<Agent, McpError> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Agent>())
        .cloned()
        .ok_or_else(|| {
            refused(GatewayError::internal(
                "the request reached MCP unauthenticated",
            ))
        })
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_resources()
            .enable_tasks()
            .build();
        capabilities.completions = None;
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("gatehouse", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Gatehouse: governed tools. Read the operating_guide prompt for how calls, \
                 approvals (approval_pending, then gatehouse.call_status), idempotency keys and \
                 errors work here.",
            )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let agent = agent_of(&context.extensions)?;
        let tools = catalog::listing(&self.front.pipeline, &agent);
        let cursor = request.and_then(|r| r.cursor);
        let (page, next) = catalog::page(tools, cursor.as_deref())
            .map_err(|()| refused(GatewayError::invalid_request("unknown cursor")))?;
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let agent = agent_of(&context.extensions)?;
        let tasks_declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        match request.name.as_ref() {
            CALL_STATUS => {
                let arguments = Value::Object(request.arguments.unwrap_or_default());
                Ok(self.call_status(&agent, &arguments).await.into())
            }
            LOAD_TOOLSET => {
                let arguments = Value::Object(request.arguments.unwrap_or_default());
                Ok(self.load_toolset(&agent, &arguments).await.into())
            }
            _ => {
                let headers = context
                    .extensions
                    .get::<http::request::Parts>()
                    .map(|parts| &parts.headers);
                let ran = run_call(
                    &self.front,
                    &agent,
                    request,
                    &context.meta,
                    headers,
                    tasks_declared,
                )
                .await;
                Ok(ran.into_response())
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let agent = agent_of(&context.extensions)?;
        let envelope = self
            .front
            .pipeline
            .status(&agent.caller, &request.task_id)
            .await
            .map_err(refused)?;
        Ok(GetTaskResult::new(tasks::detailed(&self.front, &envelope)))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let agent = agent_of(&context.extensions)?;
        tasks::cancel(&self.front, &agent, &request.task_id).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            guide::PROMPT,
            Some(
                "How calls, approvals, call_status, toolsets, idempotency keys and errors work behind Gatehouse",
            ),
            None,
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let agent = agent_of(&context.extensions)?;
        let found = request.name == guide::PROMPT;
        let answer = if found {
            Ok(guide::TEXT.as_bytes())
        } else {
            Err("not_found")
        };
        self.front
            .pipeline
            .record_pull(
                &agent.caller,
                agent.tenant.as_deref(),
                Kind::PromptGet,
                &request.name,
                answer,
            )
            .map_err(refused)?;
        if !found {
            return Err(refused(GatewayError::not_found(format!(
                "unknown prompt {}",
                request.name
            ))));
        }
        Ok(
            GetPromptResult::new(vec![PromptMessage::new_text(Role::User, guide::TEXT)])
                .with_description("Operating guide for agents calling tools through Gatehouse")
                .into(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new(guide::URI, "guide")
                .with_title("Gatehouse operating guide")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(format!("{CALLS_PREFIX}{{call_id}}"), "call")
                .with_title("One of your calls")
                .with_description("The envelope of one of your own calls, as JSON")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let agent = agent_of(&context.extensions)?;
        let uri = request.uri;
        let contents = if uri == guide::URI {
            Ok(ResourceContents::text(guide::TEXT, uri.clone()).with_mime_type("text/plain"))
        } else if let Some(call_id) = uri.strip_prefix(CALLS_PREFIX) {
            self.front
                .pipeline
                .status(&agent.caller, call_id)
                .await
                .map(|envelope| {
                    ResourceContents::text(tasks::envelope_json(&envelope).to_string(), uri.clone())
                        .with_mime_type("application/json")
                })
                .map_err(|e| e.message)
        } else {
            Err(format!("no resource {uri}"))
        };
        let answer = match &contents {
            Ok(ResourceContents::TextResourceContents { text, .. }) => Ok(text.as_bytes()),
            Ok(_) => Ok(&[][..]),
            Err(_) => Err("not_found"),
        };
        self.front
            .pipeline
            .record_pull(
                &agent.caller,
                agent.tenant.as_deref(),
                Kind::ResourceRead,
                &uri,
                answer,
            )
            .map_err(refused)?;
        match contents {
            Ok(contents) => Ok(ReadResourceResult::new(vec![contents]).into()),
            // MCP's own code for a resource it does not have (rmcp answers a 2026-07-28 client
            // with invalid params instead).
            Err(message) => Err(McpError::resource_not_found(message, None)),
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(agent) = agent_of(&context.extensions) {
            self.watch_tool_list(agent, context.peer.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_or_unknown_calls_are_settled() {
        assert!(!settled(CallState::Pending));
        assert!(!settled(CallState::Approved));
        assert!(!settled(CallState::Executing));
        assert!(settled(CallState::Succeeded));
        assert!(settled(CallState::Rejected));
        assert!(settled(CallState::OutcomeUnknown));
    }
}
