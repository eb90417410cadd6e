//! A2A upstreams: a tool whose upstream is an A2A v1 agent runs as one task of that agent, sent
//! over the agent's JSON-RPC interface with the official a2a-client.
//!
//! Each node keeps one client per upstream, made from the agent card at
//! `{url}/.well-known/agent-card.json` and remade when it fails or when the URL or credential
//! changed. Only a JSON-RPC interface on the upstream's own origin is used, so the credential
//! (sent as `Authorization: Bearer`) goes nowhere the admin did not declare.
//!
//! A call is one `SendMessage`, blocking: role user, the call's idempotency key as the message id
//! (a retry, or a re-claim after a failover, finds the task the first attempt started instead of
//! starting another), and one data part `{"tool": T, "arguments": {...}}`, the task shape of a
//! Gatehouse peer. T is the local tool's name after its first `.`: the local tool
//! `partner.demo.echo` of the upstream `partner` asks the agent for `demo.echo`. The message's
//! metadata holds the skill context (`dev.gatehouse/skill-context`) and `traceparent`.
//!
//! A task that is not final when the answer comes is polled with `GetTask` until it is, or until
//! the upstream's timeout; a remote task still waiting then (for its own approvers, or for input)
//! is cancelled, and the call fails naming the remote task and its state. What the agent answered:
//! - completed: the artifacts' parts (with no artifacts, the final status message's) are the
//!   result. A single data part that is an MCP `CallToolResult` (a Gatehouse peer's `result`
//!   artifact) is passed on as it is; otherwise the parts become one: a lone text as the text, a
//!   lone data part as the text and structured content, several texts joined by lines, a mix as
//!   a JSON array (texts as strings, data as values, files described).
//! - failed with a `CallToolResult` marked `isError` in its status: the tool's own error result.
//! - failed otherwise, rejected, canceled: an error naming the state and the status text.
//! - a message instead of a task: its parts, as for a completed task.
//!
//! A transport failure, an answer that is not A2A, or an internal error of the agent is transient
//! for the resilience plan; any other A2A error is the agent's refusal.

mod reply;

use super::resilience::Attempt;
use ::a2a::{
    A2AError, AgentCard, CancelTaskRequest, GetTaskRequest, Message, Part, Role,
    SendMessageConfiguration, SendMessageRequest, SendMessageResponse, TRANSPORT_PROTOCOL_JSONRPC,
    Task, TaskState,
};
use a2a_client::agent_card::AgentCardResolver;
use a2a_client::auth::AuthInterceptor;
use a2a_client::jsonrpc::JsonRpcTransportFactory;
use a2a_client::{A2AClient, A2AClientFactory, Transport};
use gatehouse_actors::{ExecError, Execution};
use gatehouse_registry::redact;
use reply::{outcome, rendered, state_name, status_text};
use reqwest::Url;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// The data part's key naming the tool, in the task shape of a Gatehouse peer: what this
/// executor sends and what the inbound A2A front reads.
pub const DATA_TOOL: &str = "tool";
/// The data part's key holding the arguments.
pub const DATA_ARGUMENTS: &str = "arguments";

/// The message metadata key of the resolved skill context.
pub const SKILL_CONTEXT_META: &str = super::mcp::SKILL_CONTEXT_META;
/// The message metadata key of the W3C trace context.
pub const TRACEPARENT_META: &str = "traceparent";

/// The first pause between two `GetTask`s of an unfinished task; it doubles up to the last.
const FIRST_POLL: Duration = Duration::from_millis(100);
const LAST_POLL: Duration = Duration::from_secs(2);
/// How long cancelling a remote task left waiting may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

type Client = A2AClient<Box<dyn Transport>>;

/// The HTTP client every A2A upstream is reached through.
pub(super) fn http_client() -> a2a_reqwest::Client {
    a2a_reqwest::Client::builder()
        // As for HTTP upstreams: the declared URL is the only place a call and its credential go.
        .redirect(a2a_reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap_or_default()
}

/// A client and what it was made with.
struct Open {
    url: String,
    bearer: Option<String>,
    client: Client,
}

/// One upstream's client, if made; locked while one is being made.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Open>>>>;

/// This node's clients, by upstream key.
#[derive(Default)]
pub(super) struct Clients {
    by_upstream: Mutex<HashMap<String, Slot>>,
}

impl Clients {
    fn slot(&self, key: &str) -> Slot {
        self.by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// The upstream's client, made from its card when there is none or it no longer fits.
    async fn get(
        &self,
        http: &a2a_reqwest::Client,
        key: &str,
        url: &str,
        bearer: Option<&str>,
    ) -> Result<Arc<Open>, A2AError> {
        let slot = self.slot(key);
        // Held while the card is read, so concurrent calls to a cold upstream read it once.
        let mut slot = slot.lock().await;
        if let Some(open) = slot.as_ref()
            && open.url == url
            && open.bearer.as_deref() == bearer
        {
            return Ok(open.clone());
        }
        let open = Arc::new(Open {
            url: url.to_owned(),
            bearer: bearer.map(str::to_owned),
            client: connect(http, url, bearer).await?,
        });
        *slot = Some(open.clone());
        Ok(open)
    }

    /// Forgets the upstream's client if it is still `failed`, so the next attempt reads the card
    /// again.
    async fn drop_failed(&self, key: &str, failed: &Arc<Open>) {
        let slot = self.slot(key);
        let mut slot = slot.lock().await;
        if slot.as_ref().is_some_and(|open| Arc::ptr_eq(open, failed)) {
            *slot = None;
        }
    }
}

/// Reads the agent card and makes a JSON-RPC client for its interface on the upstream's origin.
async fn connect(
    http: &a2a_reqwest::Client,
    url: &str,
    bearer: Option<&str>,
) -> Result<Client, A2AError> {
    let card = AgentCardResolver::new(Some(http.clone()))
        .resolve(url)
        .await?;
    let card = reachable(card, url)?;
    let mut factory = A2AClientFactory::builder()
        .no_defaults()
        .register(Arc::new(JsonRpcTransportFactory::new(Some(http.clone()))));
    if let Some(token) = bearer {
        factory = factory.with_interceptor(Arc::new(AuthInterceptor::bearer(token)));
    }
    factory.build().create_from_card(&card).await
}

/// The card with only the interfaces this node may use: JSON-RPC, on the upstream's origin.
fn reachable(mut card: AgentCard, url: &str) -> Result<AgentCard, A2AError> {
    let origin = Url::parse(url)
        .map_err(|e| {
            A2AError::invalid_params(format!("the upstream's url {}: {e}", redact::url(url)))
        })?
        .origin();
    let offered: Vec<String> = card
        .supported_interfaces
        .iter()
        .map(|i| format!("{} {}", i.protocol_binding, i.url))
        .collect();
    card.supported_interfaces.retain(|iface| {
        iface.protocol_binding == TRANSPORT_PROTOCOL_JSONRPC
            && Url::parse(&iface.url).is_ok_and(|u| u.origin() == origin)
    });
    if card.supported_interfaces.is_empty() {
        return Err(A2AError::unsupported_operation(format!(
            "the agent card at {} offers no JSON-RPC interface on {}: {}",
            redact::url(url),
            origin.ascii_serialization(),
            redact::text(&offered.join(", "))
        )));
    }
    Ok(card)
}

/// Where one call goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call<'a> {
    /// The client's key: the upstream's registry key.
    pub key: &'a str,
    /// The upstream's name, for messages.
    pub name: &'a str,
    pub url: &'a str,
    pub bearer: Option<&'a str>,
    /// The tool's name as the agent knows it.
    pub tool: &'a str,
    pub traceparent: &'a str,
    pub timeout: Duration,
}

/// One attempt of a call: send, follow the task until it is final or the time is up.
pub(super) async fn attempt(
    clients: &Clients,
    http: &a2a_reqwest::Client,
    call: Call<'_>,
    execution: &Execution,
) -> Attempt {
    let Ok(Value::Object(arguments)) = serde_json::from_str::<Value>(&execution.arguments) else {
        return Attempt::refused(ExecError {
            message: "the arguments are not a JSON object".into(),
        });
    };
    let Call { key, name, url, .. } = call;
    let deadline = Instant::now() + call.timeout;
    let late = || {
        Attempt::transient(Err(ExecError {
            message: format!(
                "the a2a upstream {name} did not answer within {:?}",
                call.timeout
            ),
        }))
    };
    let open =
        match tokio::time::timeout_at(deadline, clients.get(http, key, url, call.bearer)).await {
            Ok(Ok(open)) => open,
            Ok(Err(e)) => return failure(name, "reading the agent card", e),
            Err(_) => return late(),
        };
    let request = message(execution, call.tool, arguments, call.traceparent);
    let shown = redact::url(url);
    tracing::debug!(call = %execution.call_id, tool = %execution.tool, url = %shown, "sending a task to an a2a upstream");
    let answered = tokio::time::timeout_at(deadline, open.client.send_message(&request)).await;
    let task = match answered {
        Ok(Ok(SendMessageResponse::Message(message))) => {
            return Attempt::answered(rendered(&message.parts));
        }
        Ok(Ok(SendMessageResponse::Task(task))) => task,
        Ok(Err(e)) => {
            let attempt = failure(name, "SendMessage", e);
            if attempt.transient {
                clients.drop_failed(key, &open).await;
            }
            return attempt;
        }
        Err(_) => return late(),
    };
    match follow(&open.client, task, deadline).await {
        Ok(task) => outcome(name, &task),
        Err(Followed::Failed(e)) => {
            clients.drop_failed(key, &open).await;
            failure(name, "GetTask", e)
        }
        Err(Followed::Unfinished(task)) => Attempt::answered_error(ExecError {
            message: unfinished(&open.client, name, &task, call.timeout).await,
        }),
    }
}

/// How following a task ended, short of its end.
enum Followed {
    Failed(A2AError),
    /// Still not final at the deadline: the task as last read.
    Unfinished(Box<Task>),
}

/// Reads the task again, at doubling pauses, until it is final or `deadline` passes.
async fn follow(client: &Client, mut task: Task, deadline: Instant) -> Result<Task, Followed> {
    let mut pause = FIRST_POLL;
    while !task.status.state.is_terminal() {
        let now = Instant::now();
        if now >= deadline {
            return Err(Followed::Unfinished(Box::new(task)));
        }
        tokio::time::sleep_until((now + pause).min(deadline)).await;
        pause = (pause * 2).min(LAST_POLL);
        let request = GetTaskRequest {
            id: task.id.clone(),
            history_length: Some(0),
            tenant: None,
        };
        task = match tokio::time::timeout_at(deadline, client.get_task(&request)).await {
            Ok(Ok(now)) => now,
            Ok(Err(e)) => return Err(Followed::Failed(e)),
            Err(_) => return Err(Followed::Unfinished(Box::new(task))),
        };
    }
    Ok(task)
}

/// Why the call failed with its remote task unfinished. A task that has not started its work
/// (waiting for approval or input) is cancelled, so that it cannot run after the call failed.
async fn unfinished(client: &Client, name: &str, task: &Task, timeout: Duration) -> String {
    let state = &task.status.state;
    let mut message = format!(
        "the a2a upstream {name}'s task {} was still {} after {timeout:?}{}",
        task.id,
        state_name(state),
        status_text(task)
            .map(|text| format!(" ({text})"))
            .unwrap_or_default()
    );
    if matches!(
        state,
        TaskState::AuthRequired | TaskState::InputRequired | TaskState::Submitted
    ) {
        let request = CancelTaskRequest {
            id: task.id.clone(),
            metadata: Some(HashMap::from([(
                "reason".to_owned(),
                json!(format!("the delegating call timed out after {timeout:?}")),
            )])),
            tenant: None,
        };
        match tokio::time::timeout(CANCEL_WAIT, client.cancel_task(&request)).await {
            Ok(Ok(_)) => message.push_str("; it was cancelled"),
            Ok(Err(e)) => message.push_str(&format!("; cancelling it failed: {}", e.message)),
            Err(_) => message.push_str("; cancelling it did not finish in time"),
        }
    }
    message
}

/// The message one call becomes.
fn message(
    execution: &Execution,
    tool: &str,
    arguments: Map<String, Value>,
    traceparent: &str,
) -> SendMessageRequest {
    let mut metadata = HashMap::from([(TRACEPARENT_META.to_owned(), json!(traceparent))]);
    if let Some(context) = &execution.skill_context {
        metadata.insert(SKILL_CONTEXT_META.to_owned(), json!(context));
    }
    let data = json!({
        DATA_TOOL: tool,
        DATA_ARGUMENTS: arguments,
    });
    SendMessageRequest {
        message: Message {
            message_id: execution.idempotency_key.clone(),
            context_id: None,
            task_id: None,
            role: Role::User,
            parts: vec![Part::data(data).with_media_type("application/json")],
            metadata: Some(metadata),
            extensions: None,
            reference_task_ids: None,
        },
        configuration: Some(SendMessageConfiguration {
            accepted_output_modes: None,
            task_push_notification_config: None,
            history_length: Some(0),
            return_immediately: Some(false),
        }),
        metadata: None,
        tenant: None,
    }
}

/// An A2A error as an attempt: the agent's own refusal, or a failure another try might not meet.
fn failure(name: &str, doing: &str, error: A2AError) -> Attempt {
    let error_of = |kind: &str| ExecError {
        message: format!(
            "the a2a upstream {name} {kind} {doing}: {} (code {})",
            redact::text(&error.message),
            error.code
        ),
    };
    if error.code == ::a2a::error_code::INTERNAL_ERROR {
        Attempt::transient(Err(error_of("failed")))
    } else {
        Attempt::answered_error(error_of("refused"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::a2a::{AgentCapabilities, AgentInterface, PartContent};
    use gatehouse_registry::call::CallId;

    fn execution() -> Execution {
        Execution {
            call_id: CallId("call_1".into()),
            claim_id: None,
            tenant: "front".into(),
            tool: "partner.demo.echo".into(),
            arguments: r#"{"text":"hi"}"#.into(),
            idempotency_key: "call_1".into(),
            skill_context: Some("Be brief.".into()),
            end_user: None,
            retry_safe: true,
            trace_parent: None,
        }
    }

    #[test]
    fn a_call_is_one_blocking_message_keyed_by_the_call() {
        let Value::Object(arguments) = json!({"text": "hi"}) else {
            unreachable!()
        };
        let sent = message(&execution(), "demo.echo", arguments, "00-ab-cd-01");
        assert_eq!(sent.message.message_id, "call_1");
        assert_eq!(sent.message.role, Role::User);
        assert_eq!(
            sent.message.parts[0].content,
            PartContent::Data(json!({"tool": "demo.echo", "arguments": {"text": "hi"}}))
        );
        let metadata = sent.message.metadata.unwrap();
        assert_eq!(metadata[SKILL_CONTEXT_META], json!("Be brief."));
        assert_eq!(metadata[TRACEPARENT_META], json!("00-ab-cd-01"));
        assert_eq!(sent.configuration.unwrap().return_immediately, Some(false));
    }

    #[test]
    fn only_a_json_rpc_interface_on_the_upstreams_origin_is_used() {
        let card = |interfaces: Vec<AgentInterface>| AgentCard {
            name: "peer".into(),
            description: String::new(),
            version: "1".into(),
            supported_interfaces: interfaces,
            capabilities: AgentCapabilities::default(),
            default_input_modes: vec![],
            default_output_modes: vec![],
            skills: vec![],
            provider: None,
            documentation_url: None,
            icon_url: None,
            security_schemes: None,
            security_requirements: None,
            signatures: None,
        };
        let offered = card(vec![
            AgentInterface::new("http://elsewhere:80/a2a", TRANSPORT_PROTOCOL_JSONRPC),
            AgentInterface::new("peer:9000", ::a2a::TRANSPORT_PROTOCOL_GRPC),
            AgentInterface::new("http://peer:8080/a2a", TRANSPORT_PROTOCOL_JSONRPC),
        ]);
        let kept = reachable(offered, "http://peer:8080").unwrap();
        assert_eq!(kept.supported_interfaces.len(), 1);
        assert_eq!(kept.supported_interfaces[0].url, "http://peer:8080/a2a");

        let foreign = card(vec![AgentInterface::new(
            "http://elsewhere/a2a",
            TRANSPORT_PROTOCOL_JSONRPC,
        )]);
        let refused = reachable(foreign, "http://peer:8080").unwrap_err();
        assert!(refused.message.contains("http://peer:8080"), "{refused:?}");
    }
}
