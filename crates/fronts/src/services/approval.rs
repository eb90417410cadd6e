//! `ApprovalService`: approvers list, watch and decide their tenant's calls. Decisions are Raft
//! commands proposed from any node; the registry's guards decide whether they hold. Reads and
//! watches answer from this node's copy and its call feed.
//!
//! A call of a tenant the caller holds no role in does not exist for it: NOT_FOUND, worded as
//! for a missing id.

use super::convert::{self, call_record_to};
use super::status::{answer, to_status};
use futures::{Stream, StreamExt};
use gatehouse_audit::{AuditLog, Entry};
use gatehouse_cluster::cluster::Cluster;
use gatehouse_cluster::feed::{CallFeed, ChangeKind, WatchEvent};
use gatehouse_gateway::auth::{Authenticator, Caller, authenticate_current};
use gatehouse_gateway::pipeline::{GatewayError, audit};
use gatehouse_gateway::telemetry;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_server::ApprovalService;
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::resource::Role;
use gatehouse_registry::{ApplyError, Call, CallId, Command, Outcome};
use std::pin::Pin;
use tonic::{Request, Response, Status};
use tracing::Instrument;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1_000;

#[derive(Debug, Clone)]
pub struct Approvals {
    cluster: Cluster,
    auth: Authenticator,
    feed: CallFeed,
    audit: AuditLog,
}

impl Approvals {
    pub fn new(cluster: Cluster, auth: Authenticator, feed: CallFeed, audit: AuditLog) -> Self {
        Approvals {
            cluster,
            auth,
            feed,
            audit,
        }
    }

    /// Who the request's token is, and each tenant it may review with whether it may also
    /// decide there (a cluster admin reviews every tenant; only approvers decide).
    pub async fn me(&self, metadata: &tonic::metadata::MetadataMap) -> Result<Me, Status> {
        let caller = authenticate_current(&self.cluster, |registry| {
            self.auth.authenticate_grpc(registry, metadata)
        })
        .await
        .map_err(|e| to_status(e.into()))?;
        let registry = self.cluster.registry.read();
        let tenants = registry
            .tenants()
            .filter(|tenant| require_reviewer(&caller, tenant).is_ok())
            .map(|tenant| {
                let decides = caller.spec.has_role(tenant, Role::Approver);
                (tenant.to_owned(), decides)
            })
            .collect();
        Ok(Me {
            principal: caller.name.clone(),
            person: caller.person(),
            tenants,
        })
    }

    /// A tool's description and input schema as the registry has them now, for showing a
    /// call's arguments against.
    pub fn tool(&self, tenant: &str, tool: &str) -> Option<(String, serde_json::Value)> {
        let registry = self.cluster.registry.read();
        registry
            .tool(tenant, tool)
            .map(|(spec, _)| (spec.description.clone(), spec.input_schema.clone()))
    }

    async fn caller<T>(&self, request: &Request<T>) -> Result<Caller, GatewayError> {
        let metadata = request.metadata();
        let caller = authenticate_current(&self.cluster, |registry| {
            self.auth.authenticate_grpc(registry, metadata)
        });
        Ok(caller.await?)
    }

    /// The call, if it exists and its tenant is one the caller holds a role in. A call this
    /// node does not hold may be one it has not applied yet: the node catches up with the
    /// leader before it answers NOT_FOUND, and answers UNAVAILABLE (retry) if it cannot. A call
    /// of another tenant takes the same path, so the answer's timing tells nothing either.
    async fn visible_call(&self, caller: &Caller, id: &str) -> Result<Call, GatewayError> {
        if id.is_empty() {
            return Err(GatewayError::invalid_request("call_id is required"));
        }
        let call_id = CallId(id.to_owned());
        let visible = || {
            let registry = self.cluster.registry.read();
            registry
                .call(&call_id)
                .filter(|call| caller.member_of(&call.spec.tenant))
                .cloned()
        };
        if let Some(call) = visible() {
            return Ok(call);
        }
        gatehouse_gateway::pipeline::caught_up(&self.cluster, id).await?;
        visible().ok_or_else(|| no_call(id))
    }

    /// A tenant the caller may review: it exists, and the caller is its approver or a cluster
    /// admin.
    fn reviewable_tenant(&self, caller: &Caller, tenant: &str) -> Result<(), GatewayError> {
        if tenant.is_empty() {
            return Err(GatewayError::invalid_request("tenant is required"));
        }
        let exists = self.cluster.registry.read().tenant_exists(tenant);
        if !exists || !caller.member_of(tenant) {
            return Err(GatewayError::not_found(format!(
                "tenant {tenant} does not exist"
            )));
        }
        require_reviewer(caller, tenant)
    }

    /// Audits a decision refused before it was proposed (the caller is no approver here). The
    /// refusal stands; a log that cannot take it makes the answer `UNAVAILABLE` instead.
    async fn refused(
        &self,
        decision: &str,
        caller: &Caller,
        call: &Call,
        error: GatewayError,
    ) -> GatewayError {
        let mut entry = audit::call_decision(call, approver(caller), decision);
        entry.outcome = refusal(&error);
        match self.audit.record_durable(entry).await {
            Ok(_) => error,
            Err(e) => audit::unavailable(&e),
        }
    }

    /// Proposes a decision on a call; the call's record right after it, and the log index.
    /// The decision is audited durably before it is proposed (or it is not proposed), and what
    /// came of it, taken or refused, before the answer. `chain` is who decides: the approver,
    /// or for a cancellation the caller's own chain. It runs in a `decide` span in the call's
    /// trace.
    async fn decide(
        &self,
        command: Command,
        call: &Call,
        chain: Vec<String>,
    ) -> Result<(pb::CallRecord, u64), GatewayError> {
        let (decision, principal) = match &command {
            Command::Approve { approver, .. } => ("approve", approver.clone()),
            Command::Reject { approver, .. } => ("reject", approver.clone()),
            Command::Cancel { principal, .. } => ("cancel", principal.clone()),
            Command::Resolve { approver, .. } => ("resolve", approver.clone()),
            _ => ("decide", String::new()),
        };
        let id = call.spec.id.to_string();
        let span = tracing::info_span!(
            "decide",
            call = %id,
            decision,
            principal = %principal,
            outcome = tracing::field::Empty,
        );
        let parent = telemetry::execution_parent(&call.spec.id, call.spec.trace_parent.as_deref());
        telemetry::continue_trace(&span, parent);
        let intent = audit::call_decision(call, chain, decision);
        self.decide_in_span(command, &id, intent)
            .instrument(span)
            .await
    }

    async fn decide_in_span(
        &self,
        command: Command,
        id: &str,
        intent: Entry,
    ) -> Result<(pb::CallRecord, u64), GatewayError> {
        let call_id = CallId(id.to_owned());
        // The record as the decision left it, taken as soon as it is applied here: by the time
        // its outcome is on disk the call may have run on, and the answer is about the decision.
        let mut decided = None;
        let done = || {
            let registry = self.cluster.registry.read();
            let call = registry.call(&call_id);
            decided = call.map(|c| (c.state.to_string(), call_record_to(c)));
            decided
                .as_ref()
                .map_or("gone", |(state, _)| state)
                .to_owned()
        };
        let written =
            audit::propose_written_ahead(&self.audit, &self.cluster, intent, command, done)
                .await
                .map_err(|e| audit::unavailable(&e))?
                .map_err(GatewayError::from);
        let outcome = match (&written, &decided) {
            (Ok(_), Some((state, _))) => state.clone(),
            (Ok(_), None) => "gone".to_owned(),
            (Err(e), _) => refusal(e),
        };
        tracing::Span::current().record("outcome", outcome.as_str());
        let (_, log_index) = written?;
        match decided {
            Some((_, call)) => Ok((call, log_index)),
            None => Err(GatewayError::internal(format!(
                "call {id} is gone after the decision"
            ))),
        }
    }
}

/// A signed-in reviewer: its principal, the person it is, and the tenants it may review, each
/// with whether it may decide there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub principal: String,
    pub person: String,
    pub tenants: Vec<(String, bool)>,
}

/// An approver deciding, as an audit chain: the principal, and the person when it has another
/// name (a JWT's subject, a bound user), so an issuer-wide approver's decisions say who made them.
fn approver(caller: &Caller) -> Vec<String> {
    let mut chain = vec![format!("approver:{}", caller.name)];
    let person = caller.person();
    if person != caller.name {
        chain.push(format!("person:{person}"));
    }
    chain
}

/// A refused decision's audit outcome: `refused:` and the gRPC code the caller is answered with.
fn refusal(error: &GatewayError) -> String {
    format!("refused:{:?}", to_status(error.clone()).code())
}

/// A call that does not exist for the caller, worded as one that does not exist at all.
fn no_call(id: &str) -> GatewayError {
    ApplyError::NotFound {
        what: format!("call {id}"),
    }
    .into()
}

/// Approvers of the tenant and cluster admins may read and watch its calls.
fn require_reviewer(caller: &Caller, tenant: &str) -> Result<(), GatewayError> {
    if caller.cluster(Role::Admin) || caller.spec.has_role(tenant, Role::Approver) {
        Ok(())
    } else {
        Err(not_approver(caller, tenant))
    }
}

/// Whether the principal, as the registry has it now, may still watch the tenant's calls.
fn still_reviewer(registry: &SharedRegistry, name: &str, tenant: &str) -> bool {
    let registry = registry.read();
    registry
        .principal(name)
        .is_some_and(|p| p.has_cluster_role(Role::Admin) || p.has_role(tenant, Role::Approver))
}

/// Only the tenant's approvers decide; the registry checks it again when the command applies.
fn require_approver(caller: &Caller, tenant: &str) -> Result<(), GatewayError> {
    if caller.spec.has_role(tenant, Role::Approver) {
        Ok(())
    } else {
        Err(not_approver(caller, tenant))
    }
}

fn not_approver(caller: &Caller, tenant: &str) -> GatewayError {
    ApplyError::NotApprover {
        principal: caller.name.clone(),
        tenant: tenant.to_owned(),
    }
    .into()
}

fn page_size(requested: u32) -> usize {
    match requested as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

fn required(value: &str, what: &str) -> Result<(), GatewayError> {
    if value.trim().is_empty() {
        Err(GatewayError::invalid_request(what))
    } else {
        Ok(())
    }
}

fn event_to(event: WatchEvent) -> pb::ApprovalEvent {
    use pb::approval_event::Event;
    match event {
        WatchEvent::Change { index, change } => {
            let kind = match change.kind {
                ChangeKind::Added => pb::ChangeKind::Added,
                ChangeKind::Changed => pb::ChangeKind::Changed,
                ChangeKind::Removed => pb::ChangeKind::Removed,
            };
            pb::ApprovalEvent {
                index,
                event: Some(Event::Change(Box::new(pb::CallChange {
                    kind: kind as i32,
                    call: Some(call_record_to(&change.call)),
                }))),
            }
        }
        WatchEvent::Resync { index, calls } => pb::ApprovalEvent {
            index,
            event: Some(Event::Resync(pb::Resync { calls })),
        },
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<pb::ApprovalEvent, Status>> + Send>>;

/// The wire side of the service: each method's error goes through the one map to a status.
#[tonic::async_trait]
impl ApprovalService for Approvals {
    async fn list_pending(
        &self,
        request: Request<pb::ListCallsRequest>,
    ) -> Result<Response<pb::ListCallsResponse>, Status> {
        answer(self.list_calls(request).await)
    }

    type WatchPendingStream = Events;

    async fn watch_pending(
        &self,
        request: Request<pb::WatchCallsRequest>,
    ) -> Result<Response<Self::WatchPendingStream>, Status> {
        answer(self.watch_calls(request).await)
    }

    async fn get(
        &self,
        request: Request<pb::GetCallRecordRequest>,
    ) -> Result<Response<pb::GetCallRecordResponse>, Status> {
        answer(self.get_call(request).await)
    }

    async fn approve(
        &self,
        request: Request<pb::ApproveCallRequest>,
    ) -> Result<Response<pb::ApproveCallResponse>, Status> {
        answer(self.approve_call(request).await)
    }

    async fn reject(
        &self,
        request: Request<pb::RejectCallRequest>,
    ) -> Result<Response<pb::RejectCallResponse>, Status> {
        answer(self.reject_call(request).await)
    }

    async fn cancel(
        &self,
        request: Request<pb::CancelCallRequest>,
    ) -> Result<Response<pb::CancelCallResponse>, Status> {
        answer(self.cancel_call(request).await)
    }

    async fn resolve(
        &self,
        request: Request<pb::ResolveCallRequest>,
    ) -> Result<Response<pb::ResolveCallResponse>, Status> {
        answer(self.resolve_call(request).await)
    }
}

impl Approvals {
    async fn list_calls(
        &self,
        request: Request<pb::ListCallsRequest>,
    ) -> Result<pb::ListCallsResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        self.reviewable_tenant(&caller, &request.tenant)?;
        let state = convert::call_state_from(request.state)?;
        let mode = convert::approval_mode_from(request.mode)?;
        let size = page_size(request.page_size);
        let registry = self.cluster.registry.read();
        let mut matching = registry
            .calls_of(&request.tenant)
            .skip_while(|c| c.spec.id.0 <= request.page_token)
            .filter(|c| state.map_or(!c.state.is_finished(), |s| c.state == s))
            .filter(|c| request.tool.is_empty() || c.spec.tool == request.tool)
            .filter(|c| mode.is_none_or(|m| c.spec.effective_mode == m));
        let calls: Vec<pb::CallRecord> = matching.by_ref().take(size).map(call_record_to).collect();
        let next_page_token = match calls.last() {
            Some(last) if matching.next().is_some() => last.call_id.clone(),
            _ => String::new(),
        };
        Ok(pb::ListCallsResponse {
            calls,
            next_page_token,
        })
    }

    async fn watch_calls(
        &self,
        request: Request<pb::WatchCallsRequest>,
    ) -> Result<Events, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        self.reviewable_tenant(&caller, &request.tenant)?;
        let registry = self.cluster.registry.clone();
        let tenant = request.tenant.clone();
        let events = self
            .feed
            .watch(&request.tenant, request.from_index)
            .map(|event| Ok(event_to(event)))
            // The feed ends only when the node stops.
            .chain(futures::stream::once(async {
                Err(GatewayError::unavailable(
                    "this node is stopping: resume from the last index on another node",
                ))
            }))
            // A watcher whose role (or key) is taken away gets nothing more: the stream ends
            // with PERMISSION_DENIED at the next event.
            .scan(false, move |ended, event| {
                let next = if *ended {
                    None
                } else if event.is_ok() && !still_reviewer(&registry, &caller.name, &tenant) {
                    *ended = true;
                    Some(Err(GatewayError::permission_denied(format!(
                        "{} may no longer review tenant {tenant}'s calls",
                        caller.name
                    ))))
                } else {
                    Some(event)
                };
                futures::future::ready(next)
            });
        Ok(Box::pin(events.map(|event| event.map_err(to_status))))
    }

    async fn get_call(
        &self,
        request: Request<pb::GetCallRecordRequest>,
    ) -> Result<pb::GetCallRecordResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let call = self
            .visible_call(&caller, &request.get_ref().call_id)
            .await?;
        require_reviewer(&caller, &call.spec.tenant)?;
        Ok(pb::GetCallRecordResponse {
            call: Some(call_record_to(&call)),
        })
    }

    async fn approve_call(
        &self,
        request: Request<pb::ApproveCallRequest>,
    ) -> Result<pb::ApproveCallResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        required(&request.args_sha256, "name the args_sha256 you reviewed")?;
        let call = self.visible_call(&caller, &request.call_id).await?;
        if let Err(error) = require_approver(&caller, &call.spec.tenant) {
            return Err(self.refused("approve", &caller, &call, error).await);
        }
        let command = Command::Approve {
            call_id: call.spec.id.clone(),
            user: caller.token_subject().map(str::to_owned),
            approver: caller.name.clone(),
            args_sha256: request.args_sha256,
            note: request.reason,
        };
        let (call, log_index) = self.decide(command, &call, approver(&caller)).await?;
        Ok(pb::ApproveCallResponse {
            call: Some(call),
            log_index,
        })
    }

    async fn reject_call(
        &self,
        request: Request<pb::RejectCallRequest>,
    ) -> Result<pb::RejectCallResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        required(&request.reason, "a rejection needs a reason")?;
        let call = self.visible_call(&caller, &request.call_id).await?;
        if let Err(error) = require_approver(&caller, &call.spec.tenant) {
            return Err(self.refused("reject", &caller, &call, error).await);
        }
        let command = Command::Reject {
            call_id: call.spec.id.clone(),
            user: caller.token_subject().map(str::to_owned),
            approver: caller.name.clone(),
            reason: request.reason,
        };
        let (call, log_index) = self.decide(command, &call, approver(&caller)).await?;
        Ok(pb::RejectCallResponse {
            call: Some(call),
            log_index,
        })
    }

    async fn cancel_call(
        &self,
        request: Request<pb::CancelCallRequest>,
    ) -> Result<pb::CancelCallResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        let call = self.visible_call(&caller, &request.call_id).await?;
        // A call is its own user's: another user behind the same principal does not see it.
        // Whether an approver is of the call's chain is the registry's guard to check.
        if !call.spec.chain.owned_by(caller.owner())
            && require_reviewer(&caller, &call.spec.tenant).is_err()
        {
            return Err(no_call(&request.call_id));
        }
        let command = Command::Cancel {
            call_id: call.spec.id.clone(),
            principal: caller.name.clone(),
            user: caller.end_user.clone(),
            reason: request.reason,
        };
        let chain = audit::chain(&caller, None);
        let (call, log_index) = self.decide(command, &call, chain).await?;
        Ok(pb::CancelCallResponse {
            call: Some(call),
            log_index,
        })
    }

    async fn resolve_call(
        &self,
        request: Request<pb::ResolveCallRequest>,
    ) -> Result<pb::ResolveCallResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        required(&request.reason, "say what really happened in the reason")?;
        let outcome = match pb::ResolveOutcome::try_from(request.outcome) {
            Ok(pb::ResolveOutcome::Succeeded) => Outcome::Succeeded {
                output_sha256: String::new(),
                output_len: 0,
                result: None,
            },
            Ok(pb::ResolveOutcome::Failed) => Outcome::Failed {
                error: request.reason.clone(),
            },
            Ok(pb::ResolveOutcome::Unspecified) | Err(_) => {
                return Err(GatewayError::invalid_request(
                    "outcome must be RESOLVE_OUTCOME_SUCCEEDED or RESOLVE_OUTCOME_FAILED",
                ));
            }
        };
        let call = self.visible_call(&caller, &request.call_id).await?;
        if let Err(error) = require_approver(&caller, &call.spec.tenant) {
            return Err(self.refused("resolve", &caller, &call, error).await);
        }
        let command = Command::Resolve {
            call_id: call.spec.id.clone(),
            user: caller.token_subject().map(str::to_owned),
            approver: caller.name.clone(),
            outcome,
            note: request.reason,
        };
        let (call, log_index) = self.decide(command, &call, approver(&caller)).await?;
        Ok(pb::ResolveCallResponse {
            call: Some(call),
            log_index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_registry::call::PrincipalChain;
    use gatehouse_registry::{ApprovalMode, CallState, NewCall};

    fn call(state: CallState, outcome: Option<Outcome>, note: Option<&str>) -> Call {
        let mut call = Call::new(
            NewCall {
                id: CallId::from_random(7),
                tenant: "acme".into(),
                tool: "billing.refund".into(),
                arguments: "{}".into(),
                args_sha256: "44136fa3".into(),
                chain: PrincipalChain {
                    people: Vec::new(),
                    end_user: Some("john".into()),
                    agent: "bot".into(),
                    a2a_peer: None,
                },
                requested_mode: None,
                effective_mode: ApprovalMode::Network,
                highest_mode: ApprovalMode::Destructive,
                policy_decision_id: "pd".into(),
                tool_generation: 3,
                policy_generation: 1,
                idempotency_key: None,
                retry_safe: false,
                required_approvals: 1,
                expires_at: 2_000,
                approval_valid_ms: 500,
                context_id: None,
                trace_parent: None,
            },
            1_000,
        );
        call.state = state;
        call.outcome = outcome;
        call.note = note.map(str::to_owned);
        call.updated_at = 1_500;
        call
    }

    #[test]
    fn records_say_who_cancelled_or_resolved_and_how_it_ended() {
        let pending = call_record_to(&call(CallState::Pending, None, None));
        assert_eq!(pending.requested_mode, pb::ApprovalMode::Destructive as i32);
        assert_eq!(pending.effective_mode, pb::ApprovalMode::Network as i32);
        assert_eq!(
            (pending.proposed_at_unix_ms, pending.expires_at_unix_ms),
            (1_000, 2_000)
        );
        assert_eq!(pending.args_json, "{}");
        assert!(pending.cancellation.is_none() && pending.resolution.is_none());

        let note = Some("cancelled by bot: wrong account: try 12");
        let cancelled = call_record_to(&call(CallState::Cancelled, None, note));
        let by = cancelled.cancellation.expect("a cancellation");
        assert_eq!(
            (by.principal.as_str(), by.reason.as_str()),
            ("bot", "wrong account: try 12")
        );
        assert_eq!(by.at_unix_ms, 1_500);

        let failed = Outcome::Failed {
            error: "no such refund".into(),
        };
        let note = Some("resolved by alice: no such refund");
        let resolved = call_record_to(&call(CallState::Failed, Some(failed), note));
        assert_eq!(
            resolved.resolution.expect("a resolution").principal,
            "alice"
        );
        assert_eq!(resolved.error.as_deref(), Some("no such refund"));
        assert_eq!(resolved.state, pb::CallState::Failed as i32);

        let changed =
            Some("policy changed: the tool or the tenant's policy changed after approval");
        let refused = call_record_to(&call(CallState::Failed, None, changed));
        assert_eq!(refused.error.as_deref(), changed);
        assert!(refused.resolution.is_none());

        let done = Outcome::Succeeded {
            output_sha256: "ab".into(),
            output_len: 2,
            result: Some("{}".into()),
        };
        let succeeded = call_record_to(&call(CallState::Succeeded, Some(done), None));
        assert_eq!(succeeded.result_json.as_deref(), Some("{}"));
        assert!(succeeded.error.is_none());
    }
}
