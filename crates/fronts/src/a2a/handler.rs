//! The A2A methods, for both bindings: each authenticates its caller, picks the tenant, and
//! turns the call pipeline's envelopes into tasks.

use super::Front;
use super::task::{refused_task, request_of, status_event, task_of};
use crate::jsonrpc_error::jsonrpc_error;
use a2a::{
    A2AError, AgentCard, Artifact, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    ListTasksRequest, ListTasksResponse, SendMessageRequest, SendMessageResponse, StreamResponse,
    SubscribeToTaskRequest, Task, TaskArtifactUpdateEvent, TaskPushNotificationConfig, TaskState,
};
use a2a_server::{RequestHandler, ServiceParams};
use async_trait::async_trait;
use futures::stream::BoxStream;
use gatehouse_gateway::auth::{Caller, TENANT_HEADER, agent_tenant, bearer_credential};
use gatehouse_gateway::pipeline::{CallInput, Envelope, ErrorCode, GatewayError, Pipeline};
use gatehouse_registry::CallState;
use tokio_util::sync::CancellationToken;

/// The protocol major version this front speaks.
const MAJOR: &str = "1";
/// ListTasks pages hold this many tasks unless the peer asks for fewer.
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 100;

fn param<'a>(params: &'a ServiceParams, name: &str) -> Option<&'a str> {
    params
        .get(name)
        .and_then(|values| values.first())
        .map(String::as_str)
}

/// A2A v1 peers send `A2A-Version: 1.0`; no header means a 0.3 peer, which this front cannot serve.
fn check_version(params: &ServiceParams) -> Result<(), A2AError> {
    let requested = param(params, "a2a-version").unwrap_or("0.3").trim();
    if requested.split('.').next() == Some(MAJOR) {
        Ok(())
    } else {
        Err(A2AError::version_not_supported(requested))
    }
}

/// What a pipeline refusal is to a peer: a refusal of the task itself (policy, arguments,
/// budget) ends the task `rejected`; anything else is an error of the request.
fn refuses_task(error: &GatewayError) -> bool {
    match error.code {
        ErrorCode::Denied
        | ErrorCode::InvalidArguments
        | ErrorCode::UnknownTool
        | ErrorCode::RateLimited
        | ErrorCode::Misconfigured => true,
        ErrorCode::Unauthenticated
        | ErrorCode::PermissionDenied
        | ErrorCode::NotFound
        | ErrorCode::ApprovalPending
        | ErrorCode::Rejected
        | ErrorCode::Expired
        | ErrorCode::Cancelled
        | ErrorCode::UpstreamFailed
        | ErrorCode::OutcomeUnknown
        | ErrorCode::Conflict
        | ErrorCode::Unavailable
        | ErrorCode::InvalidRequest
        | ErrorCode::AlreadyExists
        | ErrorCode::DeadlineExceeded
        | ErrorCode::Internal => false,
    }
}

/// An error of the request, through the map both JSON-RPC fronts share (a2a-grpc carries the
/// same error over the gRPC binding).
fn refused(error: GatewayError) -> A2AError {
    jsonrpc_error(&error).into()
}

impl Front {
    /// A call the pipeline approved at once, followed until it ran (or `SEND_WAIT` passed); a
    /// call that needs a person is answered as it stands.
    async fn settle(&self, caller: &Caller, envelope: Envelope) -> Envelope {
        if !matches!(envelope.state, CallState::Approved | CallState::Executing) {
            return envelope;
        }
        self.pipeline
            .wait(caller, &envelope.call_id, super::SEND_WAIT)
            .await
            .unwrap_or(envelope)
    }

    fn caller(&self, params: &ServiceParams) -> Result<Caller, A2AError> {
        check_version(params)?;
        let token = param(params, "authorization").and_then(bearer_credential);
        self.pipeline
            .authenticate_bearer(token)
            .map_err(|e| refused(e.into()))
    }

    /// The tenant a request acts in: the one it names (its `tenant` field, else the
    /// `Gatehouse-Tenant` header), or the caller's only agent tenant.
    fn tenant(
        &self,
        caller: &Caller,
        named: Option<&str>,
        params: &ServiceParams,
    ) -> Result<String, A2AError> {
        let requested = named
            .filter(|t| !t.trim().is_empty())
            .or_else(|| param(params, TENANT_HEADER));
        agent_tenant(caller, requested).map_err(|choice| refused(choice.into()))
    }

    /// A task the caller delegated, from a node that first catches up when it does not hold it
    /// (UNAVAILABLE, to retry, when it cannot). Another peer's task and no task at all read the
    /// same.
    async fn own_task(&self, caller: &Caller, id: &str) -> Result<Envelope, A2AError> {
        let call = match self.pipeline.own_call_caught_up(caller, id).await {
            Ok(call) => call,
            Err(e) if e.code == ErrorCode::Unavailable => return Err(refused(e)),
            Err(_) => return Err(A2AError::task_not_found(id)),
        };
        Some(call)
            .filter(|c| delegated_by(c, caller))
            .map(|c| Envelope::of_record(&c))
            .ok_or_else(|| A2AError::task_not_found(id))
    }

    /// Runs a message's task through the pipeline: its envelope, or the task refused at once.
    async fn start(
        &self,
        params: &ServiceParams,
        request: &SendMessageRequest,
    ) -> Result<(Caller, Result<Envelope, Task>), A2AError> {
        let caller = self.caller(params)?;
        let tenant = self.tenant(&caller, request.tenant.as_deref(), params)?;
        let message = &request.message;
        if let Some(task_id) = &message.task_id {
            return Err(A2AError::unsupported_operation(format!(
                "a Gatehouse task takes one message; task {task_id} cannot be continued, send a \
                 new message without a taskId"
            )));
        }
        if message.message_id.trim().is_empty() {
            return Err(refused(GatewayError::invalid_request(
                "the message has no messageId",
            )));
        }
        let asked = request_of(message).map_err(refused)?;
        let input = CallInput {
            tenant,
            tool: asked.tool,
            arguments: asked.arguments,
            // The message id names the task: a message sent again finds the task it started.
            idempotency_key: Some(format!("a2a:{}", message.message_id)),
            a2a_peer: Some(caller.name.clone()),
            context_id: Some(
                message
                    .context_id
                    .clone()
                    .unwrap_or_else(a2a::new_context_id),
            ),
            requested_mode: None,
            // The JSON-RPC binding's HTTP header or the gRPC binding's metadata.
            trace_parent: gatehouse_gateway::telemetry::incoming(
                param(params, gatehouse_gateway::telemetry::TRACEPARENT).map(str::as_bytes),
            ),
        };
        match self.pipeline.call(&caller, input).await {
            Ok(envelope) => Ok((caller, Ok(envelope))),
            Err(e) if refuses_task(&e) => Ok((caller, Err(refused_task(&e, message)))),
            Err(e) => Err(refused(e)),
        }
    }
}

/// A stream of a task: the task as it stands, then an event for every change of its call (the
/// result artifact before the completed status), until it is final or the node stops.
fn follow(
    pipeline: Pipeline,
    caller: Caller,
    first: Envelope,
    stop: CancellationToken,
) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
    let (events, mut receiver) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut applied = pipeline.applied();
        let mut last = first;
        if events
            .send(Ok(StreamResponse::Task(task_of(&last))))
            .await
            .is_err()
        {
            return;
        }
        while !last.state.is_finished() {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = applied.changed() => if changed.is_err() { return },
                // A peer that went away is noticed here rather than at the next change.
                () = events.closed() => return,
            }
            let now = match pipeline.status(&caller, &last.call_id).await {
                Ok(envelope) => envelope,
                Err(e) => {
                    let _ = events.send(Err(refused(e))).await;
                    return;
                }
            };
            if now.state == last.state {
                continue;
            }
            let task = task_of(&now);
            for artifact in task.artifacts.iter().flatten() {
                let update = artifact_event(&task, artifact);
                if events.send(Ok(update)).await.is_err() {
                    return;
                }
            }
            if events
                .send(Ok(StreamResponse::StatusUpdate(status_event(&now))))
                .await
                .is_err()
            {
                return;
            }
            last = now;
        }
    });
    Box::pin(futures::stream::poll_fn(move |cx| receiver.poll_recv(cx)))
}

fn artifact_event(task: &Task, artifact: &Artifact) -> StreamResponse {
    StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        artifact: artifact.clone(),
        append: Some(false),
        last_chunk: Some(true),
        metadata: None,
    })
}

fn single(task: Task) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
    Box::pin(futures::stream::once(async move {
        Ok(StreamResponse::Task(task))
    }))
}

#[async_trait]
impl RequestHandler for Front {
    async fn send_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        let (caller, started) = self.start(params, &req).await?;
        let envelope = match started {
            Ok(envelope) => envelope,
            Err(refused) => return Ok(SendMessageResponse::Task(refused)),
        };
        let immediately = req
            .configuration
            .as_ref()
            .and_then(|c| c.return_immediately)
            .unwrap_or(false);
        let envelope = if immediately {
            envelope
        } else {
            self.settle(&caller, envelope).await
        };
        Ok(SendMessageResponse::Task(task_of(&envelope)))
    }

    async fn send_streaming_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let (caller, started) = self.start(params, &req).await?;
        Ok(match started {
            Ok(envelope) => follow(
                self.pipeline.clone(),
                caller,
                envelope,
                self.stop.child_token(),
            ),
            Err(refused) => single(refused),
        })
    }

    async fn get_task(
        &self,
        params: &ServiceParams,
        req: GetTaskRequest,
    ) -> Result<Task, A2AError> {
        let caller = self.caller(params)?;
        Ok(task_of(&self.own_task(&caller, &req.id).await?))
    }

    async fn list_tasks(
        &self,
        params: &ServiceParams,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        let caller = self.caller(params)?;
        let tenant = self.tenant(&caller, req.tenant.as_deref(), params)?;
        let page_size = match req.page_size {
            None | Some(0) => DEFAULT_PAGE,
            Some(n) if n < 0 => {
                return Err(refused(GatewayError::invalid_request(
                    "pageSize must not be negative",
                )));
            }
            Some(n) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
        };
        let offset = match req.page_token.as_deref().filter(|t| !t.is_empty()) {
            None => 0,
            Some(token) => token.parse::<usize>().map_err(|_| {
                refused(GatewayError::invalid_request(format!(
                    "pageToken {token:?} is not one this server gave"
                )))
            })?,
        };
        let after_ms = req
            .status_timestamp_after
            .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0));
        let mut tasks: Vec<Envelope> = self
            .pipeline
            .own_calls(&caller, &tenant, |c| {
                delegated_by(c, &caller)
                    && req
                        .context_id
                        .as_deref()
                        .is_none_or(|ctx| c.spec.context_id.as_deref() == Some(ctx))
                    && req
                        .status
                        .as_ref()
                        .filter(|s| **s != TaskState::Unspecified)
                        .is_none_or(|s| super::task::state_of(c.state) == *s)
                    && after_ms.is_none_or(|after| c.updated_at > after)
            })
            .iter()
            .map(Envelope::of_record)
            .collect();
        // Most recently changed first, then by id so that pages are stable.
        tasks.sort_by(|a, b| {
            b.updated_at_ms
                .cmp(&a.updated_at_ms)
                .then_with(|| a.call_id.cmp(&b.call_id))
        });
        let total = tasks.len();
        let include_artifacts = req.include_artifacts.unwrap_or(false);
        let page: Vec<Task> = tasks
            .iter()
            .skip(offset)
            .take(page_size)
            .map(|envelope| {
                let mut task = task_of(envelope);
                if !include_artifacts {
                    task.artifacts = None;
                }
                task
            })
            .collect();
        let next = offset + page.len();
        Ok(ListTasksResponse {
            page_size: i32::try_from(page.len()).unwrap_or(i32::MAX),
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
            next_page_token: if next < total {
                next.to_string()
            } else {
                String::new()
            },
            tasks: page,
        })
    }

    async fn cancel_task(
        &self,
        params: &ServiceParams,
        req: CancelTaskRequest,
    ) -> Result<Task, A2AError> {
        let caller = self.caller(params)?;
        let task = self.own_task(&caller, &req.id).await?;
        if task.state != CallState::Pending {
            return Err(A2AError::task_not_cancelable(&req.id));
        }
        let reason = req
            .metadata
            .as_ref()
            .and_then(|m| m.get("reason"))
            .and_then(|r| r.as_str())
            .unwrap_or("cancelled by the delegating peer");
        match self.pipeline.cancel(&caller, &req.id, reason).await {
            Ok(envelope) => Ok(task_of(&envelope)),
            // The call moved on since it was read: A2A's own answer for that.
            Err(e) if e.code == ErrorCode::Conflict => Err(A2AError::task_not_cancelable(&req.id)),
            Err(e) => Err(refused(e)),
        }
    }

    async fn subscribe_to_task(
        &self,
        params: &ServiceParams,
        req: SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let caller = self.caller(params)?;
        let task = self.own_task(&caller, &req.id).await?;
        if task.state.is_finished() {
            return Err(A2AError::unsupported_operation(format!(
                "task {} is already final ({}); GetTask reads it",
                req.id, task.state
            )));
        }
        Ok(follow(
            self.pipeline.clone(),
            caller,
            task,
            self.stop.child_token(),
        ))
    }

    async fn create_push_config(
        &self,
        _params: &ServiceParams,
        _req: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_push_config(
        &self,
        _params: &ServiceParams,
        _req: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn list_push_configs(
        &self,
        _params: &ServiceParams,
        _req: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn delete_push_config(
        &self,
        _params: &ServiceParams,
        _req: DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_extended_agent_card(
        &self,
        params: &ServiceParams,
        req: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, A2AError> {
        let caller = self.caller(params)?;
        let tenant = self.tenant(&caller, req.tenant.as_deref(), params)?;
        Ok(self.extended_card(&caller, &tenant))
    }
}

/// A task is the peer's that delegated it, for the end user it delegated it for: another user
/// behind the same peer principal does not see it.
fn delegated_by(call: &gatehouse_registry::Call, caller: &Caller) -> bool {
    call.spec.chain.a2a_peer.as_deref() == Some(caller.name.as_str())
        && call.spec.chain.owned_by(caller.owner())
}
