//! `GatewayService`: the gRPC entry to the call pipeline. A call is authenticated, scoped to a
//! tenant the caller belongs to, and planned by the registry (tool, arguments, policy); then it
//! either runs at once on this node, never touching Raft, or becomes a replicated record that
//! the tenant's home claims and executes once approved. Agents read their own records back.

use super::convert::{approval_mode_to, call_record_to, call_state_to};
use super::status::{actors_error, plan_error, write_error};
use crate::auth::{Caller, authenticate};
use crate::cluster::{Cluster, now_ms};
use gatehouse_actors::{Actors, ExecError, Execution, Executor, ToolOutput};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::gateway_service_server::GatewayService;
use gatehouse_registry::plan::{CallRequest, Plan, PlanError, plan_call};
use gatehouse_registry::{Call, CallId, CallState, Command, NewCall, Outcome};
use gatehouse_registry::{Response as Applied, call::Verdict};
use serde_json::Value;
use std::sync::{Arc, PoisonError};
use tonic::{Request, Response, Status};
use tracing::Instrument;

/// Longest idempotency key a caller may give.
const MAX_IDEMPOTENCY_KEY: usize = 256;

#[derive(Clone)]
pub struct Gateway {
    cluster: Cluster,
    actors: Actors,
    executor: Arc<dyn Executor>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    pub fn new(cluster: Cluster, actors: Actors, executor: Arc<dyn Executor>) -> Self {
        Gateway {
            cluster,
            actors,
            executor,
        }
    }

    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, Status> {
        let registry = self
            .cluster
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        authenticate(&registry, request.metadata())
    }

    /// Runs a call that needs neither approval nor a record, here and now.
    async fn run_now(&self, call: NewCall) -> Result<pb::CallEnvelope, Status> {
        let handle = self
            .actors
            .tenant(&call.tenant)
            .await
            .map_err(|e| actors_error(&e))?;
        let execution = Execution {
            call_id: call.id.clone(),
            tenant: call.tenant.clone(),
            tool: call.tool.clone(),
            arguments: call.arguments.clone(),
            idempotency_key: call.id.to_string(),
            skill_context: handle.skill_context(&call.tool, call.chain.end_user.as_deref()),
            end_user: call.chain.end_user.clone(),
            retry_safe: call.retry_safe,
        };
        let result = self.executor.execute(execution).await;
        Ok(ran_now(&call, result))
    }

    /// Proposes a call through Raft and answers with its record as this node now has it: the
    /// new call, or for a repeated idempotency key the earlier one.
    async fn propose(&self, call: NewCall) -> Result<pb::CallEnvelope, Status> {
        let (applied, _) = self
            .cluster
            .propose(Command::Propose {
                call: Box::new(call.clone()),
            })
            .await
            .map_err(write_error)?;
        let (id, state) = match applied {
            Applied::Call { call_id, state } | Applied::Existing { call_id, state } => {
                (call_id, state)
            }
            other => {
                return Err(Status::internal(format!(
                    "a proposal was answered with {other:?}"
                )));
            }
        };
        let registry = self
            .cluster
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(match registry.call(&id) {
            Some(record) => envelope_of(record),
            // Committed but not yet applied here: what the proposal answered is all we know.
            None if id == call.id => pb::CallEnvelope {
                state: call_state_to(state) as i32,
                expires_at_unix_ms: (state == CallState::Pending).then_some(call.expires_at as i64),
                ..envelope_base(&call)
            },
            None => pb::CallEnvelope {
                call_id: id.0.clone(),
                trace_id: trace_id(&id),
                state: call_state_to(state) as i32,
                ..Default::default()
            },
        })
    }
}

#[tonic::async_trait]
impl GatewayService for Gateway {
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let caller = self.caller(&request)?;
        let req = request.into_inner();
        // A tenant the caller holds no role in does not exist for it.
        if !caller.member_of(&req.tenant) {
            return Err(plan_error(&PlanError::UnknownTenant(req.tenant)));
        }
        let arguments = parse_arguments(&req.arguments_json)?;
        let key = match req.idempotency_key.as_deref() {
            Some(k) if k.is_empty() || k.len() > MAX_IDEMPOTENCY_KEY => {
                return Err(Status::invalid_argument(format!(
                    "idempotency_key must be 1 to {MAX_IDEMPOTENCY_KEY} bytes"
                )));
            }
            key => key,
        };
        let plan: Plan = {
            let registry = self
                .cluster
                .registry
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            plan_call(
                &registry,
                &CallRequest {
                    id: CallId::from_random(rand::random()),
                    at: now_ms(),
                    tenant: &req.tenant,
                    principal: &caller.name,
                    end_user: caller.spec.user.as_deref(),
                    a2a_peer: None,
                    tool: &req.tool,
                    arguments: &arguments,
                    idempotency_key: key,
                    requested_mode: None,
                },
            )
            .map_err(|e| plan_error(&e))?
        };
        let span = tracing::info_span!(
            "call",
            tenant = %plan.call.tenant,
            tool = %plan.call.tool,
            call = %plan.call.id,
            mode = ?plan.decision.effective,
            replicated = plan.replicated,
        );
        let envelope = if plan.replicated {
            self.propose(plan.call).instrument(span).await?
        } else {
            self.run_now(plan.call).instrument(span).await?
        };
        Ok(Response::new(pb::CallToolResponse {
            envelope: Some(envelope),
        }))
    }

    async fn get_call(
        &self,
        request: Request<pb::GetCallRequest>,
    ) -> Result<Response<pb::GetCallResponse>, Status> {
        let caller = self.caller(&request)?;
        let id = request.into_inner().call_id;
        let registry = self
            .cluster
            .registry
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        // Someone else's call, and no call at all, read the same.
        let call = registry
            .call(&CallId(id.clone()))
            .filter(|c| {
                c.spec.chain.agent == caller.name
                    || c.spec.chain.a2a_peer.as_deref() == Some(caller.name.as_str())
            })
            .ok_or_else(|| Status::not_found(format!("call {id} not found")))?;
        Ok(Response::new(pb::GetCallResponse {
            envelope: Some(envelope_of(call)),
            call: Some(call_record_to(call)),
        }))
    }
}

fn parse_arguments(text: &str) -> Result<Value, Status> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(Status::invalid_argument(
            "arguments_json must be a JSON object",
        )),
        Err(e) => Err(Status::invalid_argument(format!(
            "arguments_json is not JSON: {e}"
        ))),
    }
}

/// What every envelope of a call carries, whatever its state.
fn envelope_base(call: &NewCall) -> pb::CallEnvelope {
    pb::CallEnvelope {
        call_id: call.id.0.clone(),
        effective_mode: approval_mode_to(call.effective_mode) as i32,
        policy_decision_id: call.policy_decision_id.clone(),
        trace_id: trace_id(&call.id),
        ..Default::default()
    }
}

/// The envelope of a call that ran at once.
fn ran_now(call: &NewCall, result: Result<ToolOutput, ExecError>) -> pb::CallEnvelope {
    let base = envelope_base(call);
    match result {
        Ok(out) if !out.is_error => pb::CallEnvelope {
            state: pb::CallState::Succeeded as i32,
            result_json: Some(out.result_json),
            ..base
        },
        Ok(out) => pb::CallEnvelope {
            state: pb::CallState::Failed as i32,
            result_json: Some(out.result_json),
            is_error: true,
            error: Some("the tool reported an error".into()),
            ..base
        },
        Err(e) => pb::CallEnvelope {
            state: pb::CallState::Failed as i32,
            is_error: true,
            error: Some(e.message),
            ..base
        },
    }
}

/// The envelope of a call with a record, as the record stands.
fn envelope_of(call: &Call) -> pb::CallEnvelope {
    let base = envelope_base(&call.spec);
    let failed = |error: String| (None, true, Some(error));
    let (result_json, is_error, error) = match (&call.outcome, call.state) {
        (Some(Outcome::Succeeded { result, .. }), _) => (result.clone(), false, None),
        (Some(Outcome::Failed { error }), _) => failed(error.clone()),
        (None, CallState::Failed) => failed(
            call.note
                .clone()
                .unwrap_or_else(|| "the call failed".into()),
        ),
        (None, CallState::Rejected) => failed(match call.rejections.first() {
            Some(Verdict {
                principal, note, ..
            }) => format!("rejected by {principal}: {note}"),
            None => "rejected".into(),
        }),
        (None, CallState::Cancelled) => {
            failed(call.note.clone().unwrap_or_else(|| "cancelled".into()))
        }
        (None, CallState::Expired) => {
            failed("expired: nobody acted on it before its deadline".into())
        }
        (
            None,
            CallState::Pending
            | CallState::Approved
            | CallState::Executing
            | CallState::Succeeded
            | CallState::OutcomeUnknown,
        ) => (None, false, None),
    };
    let expires_at = match call.state {
        CallState::Pending => Some(call.spec.expires_at),
        CallState::Approved => Some(call.approval_valid_until.unwrap_or(call.spec.expires_at)),
        _ => None,
    };
    pb::CallEnvelope {
        state: call_state_to(call.state) as i32,
        result_json,
        is_error,
        error,
        expires_at_unix_ms: expires_at.map(|t| t as i64),
        ..base
    }
}

/// The call's W3C trace id. For now the call id's own 128 random bits, so every answer about one
/// call names the same trace; ids of another shape get a fresh random one.
fn trace_id(id: &CallId) -> String {
    match id.0.strip_prefix("call_") {
        Some(hex)
            if hex.len() == 32
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                && hex.bytes().any(|b| b != b'0') =>
        {
            hex.to_owned()
        }
        _ => format!("{:032x}", rand::random::<u128>().max(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_registry::call::PrincipalChain;
    use gatehouse_registry::{ApprovalMode, Outcome};

    fn new_call() -> NewCall {
        NewCall {
            id: CallId::from_random(0xabc),
            tenant: "acme".into(),
            tool: "dev.echo".into(),
            arguments: "{}".into(),
            args_sha256: String::new(),
            chain: PrincipalChain {
                end_user: None,
                agent: "bot".into(),
                a2a_peer: None,
            },
            requested_mode: None,
            effective_mode: ApprovalMode::Network,
            highest_mode: ApprovalMode::Destructive,
            policy_decision_id: "pd_1".into(),
            tool_generation: 1,
            policy_generation: 0,
            idempotency_key: None,
            retry_safe: false,
            required_approvals: 1,
            expires_at: 5_000,
            approval_valid_ms: 1_000,
        }
    }

    #[test]
    fn a_pending_call_carries_its_ids_and_expiry() {
        let call = Call::new(new_call(), 1_000);
        let envelope = envelope_of(&call);
        assert_eq!(envelope.call_id, call.spec.id.0);
        assert_eq!(envelope.trace_id, format!("{:032x}", 0xabc));
        assert_eq!(envelope.policy_decision_id, "pd_1");
        assert_eq!(envelope.effective_mode, pb::ApprovalMode::Network as i32);
        assert_eq!(envelope.state, pb::CallState::Pending as i32);
        assert_eq!(envelope.expires_at_unix_ms, Some(5_000));
        assert!(!envelope.is_error);
    }

    #[test]
    fn finished_calls_say_how_they_ended() {
        let mut call = Call::new(new_call(), 1_000);
        call.state = CallState::Succeeded;
        call.outcome = Some(Outcome::Succeeded {
            output_sha256: String::new(),
            output_len: 2,
            result: Some("{}".into()),
        });
        let envelope = envelope_of(&call);
        assert_eq!(envelope.result_json.as_deref(), Some("{}"));
        assert_eq!(envelope.expires_at_unix_ms, None);

        call.state = CallState::Rejected;
        call.outcome = None;
        call.rejections.push(Verdict {
            principal: "alice".into(),
            at: 2_000,
            note: "not today".into(),
        });
        let envelope = envelope_of(&call);
        assert!(envelope.is_error);
        assert_eq!(
            envelope.error.as_deref(),
            Some("rejected by alice: not today")
        );
    }

    #[test]
    fn a_call_run_at_once_reports_tool_errors_and_exec_errors() {
        let call = new_call();
        let tool_error = ran_now(
            &call,
            Ok(ToolOutput {
                result_json: "{\"isError\":true}".into(),
                is_error: true,
            }),
        );
        assert_eq!(tool_error.state, pb::CallState::Failed as i32);
        assert!(tool_error.is_error && tool_error.result_json.is_some());
        let unreachable = ran_now(
            &call,
            Err(ExecError {
                message: "down".into(),
            }),
        );
        assert_eq!(unreachable.error.as_deref(), Some("down"));
        assert_eq!(unreachable.result_json, None);
    }

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(parse_arguments("").unwrap(), serde_json::json!({}));
        assert_eq!(
            parse_arguments("[1]").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            parse_arguments("{").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
