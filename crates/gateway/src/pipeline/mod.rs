//! The call pipeline every front shares (gRPC, MCP, A2A):
//! authenticate (the front's job) -> tenant scope -> tool lookup -> validate arguments -> policy
//! -> budget -> resolve skills -> approval when the effective mode needs it -> execute -> audit.
//!
//! A call needing neither approval nor an idempotency record runs at once on this node and never
//! touches Raft; anything else becomes a replicated record that the tenant's home claims and
//! executes once approved. Fronts turn an [`Envelope`] or a [`GatewayError`] into their own
//! protocol's answer; nothing here knows about gRPC or JSON-RPC.

pub mod audit;
mod audited;
mod envelope;
mod reads;
pub use reads::caught_up;

pub use crate::error::{ErrorCode, GatewayError};
pub use audited::Audited;
pub use envelope::{Envelope, trace_id};

use crate::auth::{Authenticator, Caller};
use crate::budget::{Budgets, RetryAfter};
use crate::metrics::{self, Metrics};
use crate::telemetry::{self, TraceParent};
use gatehouse_actors::{Actors, Execution, Executor};
use gatehouse_audit::{AuditLog, Kind};
use gatehouse_cluster::cluster::{Cluster, WriteError, now_ms};
use gatehouse_registry::plan::{CallRequest, Plan, PlanError, Validators, plan_call_with};
use gatehouse_registry::{ApplyError, ApprovalMode, CallId, CallState, Command, NewCall, Response};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::Instrument;

/// What policy made of a call that may go ahead, for its span.
fn decision_of(call: &NewCall) -> &'static str {
    if call.required_approvals == 0 {
        "allowed"
    } else {
        "needs_approval"
    }
}

/// Longest idempotency key a caller may give.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;

/// One tool call, as a front received it from an authenticated caller.
#[derive(Debug, Clone)]
pub struct CallInput {
    pub tenant: String,
    /// `upstream.tool`.
    pub tool: String,
    /// A JSON object.
    pub arguments: Value,
    /// The caller's own key: a repeat answers with the recorded call instead of running again.
    pub idempotency_key: Option<String>,
    /// The A2A peer that delegated the call, when one did.
    pub a2a_peer: Option<String>,
    /// The A2A context the delegated task belongs to, kept in its record.
    pub context_id: Option<String>,
    pub requested_mode: Option<ApprovalMode>,
    /// The W3C trace context the request arrived with (already validated): the call's spans
    /// continue it, and so do its execution and its upstream's. `None` starts a trace.
    pub trace_parent: Option<TraceParent>,
}

#[derive(Clone)]
pub struct Pipeline {
    cluster: Cluster,
    actors: Actors,
    executor: Arc<dyn Executor>,
    budgets: Budgets,
    validators: Validators,
    authenticator: Authenticator,
    audit: AuditLog,
    metrics: Metrics,
    /// Set when the node begins to stop: new calls are refused, calls already in go on.
    stopping: Arc<AtomicBool>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    pub fn new(
        cluster: Cluster,
        actors: Actors,
        executor: Arc<dyn Executor>,
        authenticator: Authenticator,
        audit: AuditLog,
    ) -> Self {
        Pipeline {
            cluster,
            actors,
            executor,
            budgets: Budgets::new(),
            validators: Validators::new(10_000),
            authenticator,
            audit,
            metrics: Metrics::default(),
            stopping: Arc::default(),
        }
    }

    /// From now on every new call, on every front, is refused as unavailable (retryable, naming
    /// the stop), so agents and balancers move to another node while the calls already taken
    /// finish.
    pub fn stop_accepting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// The flag [`Pipeline::stop_accepting`] sets, for whatever else must stop taking traffic
    /// with the calls (readiness).
    pub fn stopping_flag(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    /// Counts and times every call in `metrics` (the node's registry) instead of a private one.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics registry calls are counted in.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// This node's audit log.
    pub fn audit_log(&self) -> &AuditLog {
        &self.audit
    }

    /// Records a context pull (`prompts/get`, `resources/read`) like a call: off the response
    /// path, group-committed with the rest. An audit log that takes no entry refuses the pull:
    /// nothing is answered without its record.
    pub fn record_pull(
        &self,
        caller: &Caller,
        tenant: Option<&str>,
        kind: Kind,
        target: &str,
        answer: Result<&[u8], &str>,
    ) -> Result<(), GatewayError> {
        self.audit
            .record(audit::pull_entry(caller, tenant, kind, target, answer))
            .map_err(|e| audit::unavailable(&e))
    }

    /// Who may call: API keys and the configured JWT issuers, for every front.
    pub fn authenticator(&self) -> &Authenticator {
        &self.authenticator
    }

    /// Runs a call through the pipeline. A call that must wait for approval answers at once
    /// with its pending envelope; [`Pipeline::wait`] follows it. Every call is audited: a call
    /// run at once and a refusal off the response path, a replicated call durably before the
    /// answer.
    ///
    /// The call runs in a `call` span continuing `input.trace_parent`; the span's own trace
    /// context goes into the call (and its record), so the execution continues the same trace.
    pub async fn call(&self, caller: &Caller, input: CallInput) -> Result<Envelope, GatewayError> {
        let started = std::time::Instant::now();
        let span = tracing::info_span!(
            "call",
            tenant = tracing::field::Empty,
            tool = tracing::field::Empty,
            call = tracing::field::Empty,
            mode = tracing::field::Empty,
            decision = tracing::field::Empty,
            policy_decision = tracing::field::Empty,
            replicated = tracing::field::Empty,
            refusal = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let trace = telemetry::continue_trace(&span, input.trace_parent);
        let result = self
            .call_audited(caller, &input, trace)
            .instrument(span.clone())
            .await;
        let (tenant, tool) = self.labels(caller, &input, result.as_ref().err());
        let outcome = match &result {
            Ok(envelope) => envelope.state.as_str().to_owned(),
            Err(error) => format!("refused:{}", error.code.as_str()),
        };
        span.record("tenant", tenant);
        span.record("tool", tool);
        span.record("outcome", outcome.as_str());
        if let Err(error) = &result {
            span.record("decision", "refused");
            span.record("refusal", error.code.as_str());
        }
        self.metrics
            .record_call(tenant, tool, &outcome, started.elapsed());
        result
    }

    /// The tenant and tool a call is counted under: the request's own only when they exist
    /// for the caller, so a caller cannot mint metric labels.
    fn labels<'a>(
        &self,
        caller: &Caller,
        input: &'a CallInput,
        error: Option<&GatewayError>,
    ) -> (&'a str, &'a str) {
        if !caller.member_of(&input.tenant) {
            return (metrics::UNKNOWN, metrics::UNKNOWN);
        }
        let tool_unknown = match error {
            Some(e) => matches!(e.code, ErrorCode::NotFound | ErrorCode::UnknownTool),
            None => false,
        };
        if tool_unknown {
            (&input.tenant, metrics::UNKNOWN)
        } else {
            (&input.tenant, &input.tool)
        }
    }

    async fn call_audited(
        &self,
        caller: &Caller,
        input: &CallInput,
        trace: TraceParent,
    ) -> Result<Envelope, GatewayError> {
        let (result, recorded) = self.run(caller, input, trace).await;
        if recorded {
            return result;
        }
        match &result {
            // A call run at once: its start record went in before the upstream request; its
            // outcome goes in before the answer leaves, or the answer does not.
            Ok(envelope) => self
                .audit
                .record(audit::call_entry(caller, input, envelope))
                .map_err(|e| audit::unavailable(&e))?,
            // Nothing was done; the refusal stands whether or not the log takes it.
            Err(error) => {
                if let Err(e) = self
                    .audit
                    .record(audit::refusal_entry(caller, input, error))
                {
                    tracing::warn!(error = %e, "a refused call could not be audited");
                }
            }
        }
        result
    }

    /// The pipeline's work, and whether its audit records are already written (a replicated
    /// call's, before and after its proposal). Runs in the `call` span, whose trace context is
    /// `trace`.
    async fn run(
        &self,
        caller: &Caller,
        input: &CallInput,
        trace: TraceParent,
    ) -> (Result<Envelope, GatewayError>, bool) {
        if self.stopping.load(Ordering::SeqCst) {
            return (Err(GatewayError::stopping()), false);
        }
        match self.plan_and_check(caller, input, trace) {
            Ok(plan) => {
                let span = tracing::Span::current();
                span.record("call", tracing::field::display(&plan.call.id));
                span.record("mode", plan.decision.effective.as_str());
                span.record("decision", decision_of(&plan.call));
                span.record("policy_decision", plan.call.policy_decision_id.as_str());
                span.record("replicated", plan.replicated);
                if plan.replicated {
                    // Boxed: a proposal's future (Raft's write, the audit's sync) is far larger
                    // than a call run at once, and every read-only call would carry its room.
                    let proposed = Box::pin(self.propose_audited(caller, input, plan.call));
                    (proposed.await, true)
                } else {
                    (self.run_now(plan.call).await, false)
                }
            }
            Err(e) => (Err(e), false),
        }
    }

    /// Proposes a call once the record of its proposal is durable, and records what came of it
    /// before the answer.
    async fn propose_audited(
        &self,
        caller: &Caller,
        input: &CallInput,
        call: NewCall,
    ) -> Result<Envelope, GatewayError> {
        let intent = audit::proposal_entry(caller, input, &call);
        audit::write_ahead(
            &self.audit,
            intent,
            self.propose(call),
            |result, mut entry| match result {
                Ok(envelope) => audit::call_entry(caller, input, envelope),
                Err(error) => {
                    entry.outcome = format!("refused:{}", error.code.as_str());
                    entry
                }
            },
        )
        .await
        .map_err(|e| audit::unavailable(&e))?
    }

    /// Everything decided before a call runs or is proposed: scope, arguments, key, policy,
    /// budget.
    fn plan_and_check(
        &self,
        caller: &Caller,
        input: &CallInput,
        trace: TraceParent,
    ) -> Result<Plan, GatewayError> {
        // A tenant the caller holds no role in does not exist for it.
        if !caller.member_of(&input.tenant) {
            return Err((&PlanError::UnknownTenant(input.tenant.clone())).into());
        }
        if !input.arguments.is_object() {
            return Err(GatewayError::new(
                ErrorCode::InvalidArguments,
                "arguments must be a JSON object",
                "send the tool's arguments as one JSON object",
            ));
        }
        if let Some(key) = &input.idempotency_key
            && (key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY)
        {
            return Err(GatewayError::new(
                ErrorCode::InvalidArguments,
                format!("an idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes"),
                "use a shorter key, such as a UUID",
            ));
        }
        let plan = self.plan(caller, input, trace)?;
        if let Some(budget) = &plan.decision.budget
            && let Err(RetryAfter(wait)) =
                self.budgets
                    .check(&plan.call.tenant, &plan.call.tool, budget, now_ms())
        {
            return Err(GatewayError::rate_limited(&plan.call.tool, wait));
        }
        Ok(plan)
    }

    fn plan(
        &self,
        caller: &Caller,
        input: &CallInput,
        trace: TraceParent,
    ) -> Result<Plan, GatewayError> {
        // A call that starts its trace takes the trace id as its id, as calls always did; one
        // that continues a caller's trace draws its own.
        let id = match input.trace_parent {
            None => CallId::from_random(trace.trace_id),
            Some(_) => CallId::from_random(rand::random::<u128>().max(1)),
        };
        let registry = self.cluster.registry.read();
        plan_call_with(
            &registry,
            &CallRequest {
                id,
                at: now_ms(),
                tenant: &input.tenant,
                principal: &caller.name,
                end_user: caller.end_user.as_deref(),
                a2a_peer: input.a2a_peer.as_deref(),
                tool: &input.tool,
                arguments: &input.arguments,
                idempotency_key: input.idempotency_key.as_deref(),
                requested_mode: input.requested_mode,
            },
            &self.validators,
        )
        .map(|mut plan| {
            plan.call.context_id = input.context_id.clone();
            plan.call.trace_parent = Some(trace.to_string());
            plan
        })
        .map_err(|e| GatewayError::from(&e))
    }

    /// Follows a call until it is final or `within` has passed, and answers with its envelope
    /// as it then stands.
    pub async fn wait(
        &self,
        caller: &Caller,
        call_id: &str,
        within: Duration,
    ) -> Result<Envelope, GatewayError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut applied = self.cluster.applied.clone();
        loop {
            let envelope = self.status(caller, call_id).await?;
            if envelope.state.is_finished() || envelope.state == CallState::OutcomeUnknown {
                return Ok(envelope);
            }
            match tokio::time::timeout_at(deadline, applied.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Ok(envelope),
            }
        }
    }

    /// Cancels a pending call of the caller's own chain, and answers with its record as it then
    /// stands. The request is audited durably before it is proposed (or it is not proposed),
    /// and what came of it before the answer. Every front's cancellation comes here: MCP
    /// `tasks/cancel`, A2A `CancelTask` (gRPC `ApprovalService.Cancel` audits the same way).
    pub async fn cancel(
        &self,
        caller: &Caller,
        call_id: &str,
        reason: &str,
    ) -> Result<Envelope, GatewayError> {
        let before = Envelope::of_record(&self.own_call_caught_up(caller, call_id).await?);
        let intent = audit::decision_entry(caller, &before, "cancel", audit::REQUESTED.into());
        let command = Command::Cancel {
            call_id: CallId(call_id.to_owned()),
            principal: caller.name.clone(),
            user: caller.end_user.clone(),
            reason: reason.to_owned(),
        };
        let done = || CallState::Cancelled.as_str().to_owned();
        let written =
            audit::propose_written_ahead(&self.audit, &self.cluster, intent, command, done)
                .await
                .map_err(|e| audit::unavailable(&e))?;
        written.map_err(|e| match e {
            WriteError::Rejected(ApplyError::WrongState { .. }) => GatewayError::new(
                ErrorCode::Conflict,
                format!(
                    "call {call_id} is {} and can no longer be cancelled",
                    before.state
                ),
                "only a call still waiting for approval can be cancelled",
            ),
            other => other.into(),
        })?;
        self.status(caller, call_id).await
    }

    /// Widens what the caller sees by a toolset, for good: the choice is kept in the registry,
    /// since a stateless client has no session to keep it in. Answers whether write tools are
    /// now included.
    pub async fn load_toolset(
        &self,
        caller: &Caller,
        tenant: &str,
        toolset: &str,
        include_write_tools: bool,
    ) -> Result<bool, GatewayError> {
        if !caller.member_of(tenant) {
            return Err((&PlanError::UnknownTenant(tenant.to_owned())).into());
        }
        let intent = audit::toolset_entry(caller, tenant, toolset, include_write_tools);
        let command = Command::LoadToolset {
            tenant: tenant.to_owned(),
            principal: caller.name.clone(),
            user: caller.end_user.clone(),
            toolset: toolset.to_owned(),
            include_write_tools,
        };
        let done = || "loaded".to_owned();
        let written =
            audit::propose_written_ahead(&self.audit, &self.cluster, intent, command, done)
                .await
                .map_err(|e| audit::unavailable(&e))?;
        let (applied, _) = written.map_err(|e| match e {
            WriteError::Rejected(ApplyError::NotFound { what }) => GatewayError::new(
                ErrorCode::NotFound,
                format!("no {what}"),
                "gatehouse.load_toolset's description lists the toolsets you can load",
            ),
            other => other.into(),
        })?;
        match applied {
            Response::ToolsetLoaded {
                include_write_tools,
                ..
            } => Ok(include_write_tools),
            other => Err(GatewayError::unavailable(format!(
                "loading a toolset was answered with {other:?}"
            ))),
        }
    }

    /// Runs a call that needs neither approval nor a record, here and now.
    async fn run_now(&self, call: NewCall) -> Result<Envelope, GatewayError> {
        let handle = self
            .actors
            .tenant(&call.tenant)
            .await
            .map_err(|e| GatewayError::from(&e))?;
        let execution = Execution {
            call_id: call.id.clone(),
            claim_id: None,
            tenant: call.tenant.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            idempotency_key: call.id.to_string(),
            skill_context: handle.skill_context(&call.tool, call.chain.end_user.as_deref()),
            end_user: call.chain.end_user.clone(),
            retry_safe: call.retry_safe,
            trace_parent: call.trace_parent.clone(),
        };
        // Queued, not synced: this path never waits for the disk. A log that takes no entry
        // means no request.
        let trace_id = trace_id(&call.id, call.trace_parent.as_deref());
        self.audit
            .record(audit::execution_entry_in(
                &execution,
                Some(&call),
                trace_id.clone(),
            ))
            .map_err(|e| audit::unavailable(&e))?;
        let result = self.executor.execute(execution).await;
        Ok(Envelope::ran_now_in(&call, result, trace_id))
    }

    /// Proposes a call through Raft and answers with its record as this node now has it: the
    /// new call, or for a repeated idempotency key the earlier one.
    async fn propose(&self, call: NewCall) -> Result<Envelope, GatewayError> {
        let (applied, _) = self
            .cluster
            .propose(Command::Propose {
                call: Box::new(call.clone()),
            })
            .await?;
        let (id, state) = match applied {
            Response::Call { call_id, state } | Response::Existing { call_id, state } => {
                (call_id, state)
            }
            other => {
                return Err(GatewayError::unavailable(format!(
                    "a proposal was answered with {other:?}"
                )));
            }
        };
        let registry = self.cluster.registry.read();
        Ok(match registry.call(&id) {
            Some(record) => Envelope::of_record(record),
            // Committed but not yet applied here: what the proposal answered is all we know.
            None => Envelope::proposed(&call, &id, state),
        })
    }
}
