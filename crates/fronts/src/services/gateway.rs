//! `GatewayService`: the gRPC front of the call pipeline. It authenticates, parses, and hands
//! the call to [`Pipeline`]; the envelope comes back as the pipeline made it.

use super::convert::{approval_mode_to, call_record_to, call_state_to};
use super::status::answer;
use gatehouse_gateway::auth::Caller;
use gatehouse_gateway::pipeline::{CallInput, Envelope, ErrorCode, GatewayError, Pipeline};
use gatehouse_gateway::telemetry;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::gateway_service_server::GatewayService;
use serde_json::Value;
use tonic::{Request, Response, Status};

#[derive(Debug, Clone)]
pub struct Gateway {
    pipeline: Pipeline,
}

impl Gateway {
    pub fn new(pipeline: Pipeline) -> Self {
        Gateway { pipeline }
    }

    async fn caller<T>(&self, request: &Request<T>) -> Result<Caller, GatewayError> {
        Ok(self.pipeline.authenticate_grpc(request.metadata()).await?)
    }
}

/// The wire side of the service: each method's error goes through the one map to a status.
#[tonic::async_trait]
impl GatewayService for Gateway {
    async fn call_tool(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        answer(self.call(request).await)
    }

    async fn get_call(
        &self,
        request: Request<pb::GetCallRequest>,
    ) -> Result<Response<pb::GetCallResponse>, Status> {
        answer(self.read_call(request).await)
    }
}

impl Gateway {
    async fn call(
        &self,
        request: Request<pb::CallToolRequest>,
    ) -> Result<pb::CallToolResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let trace_parent = telemetry::incoming(
            request
                .metadata()
                .get(telemetry::TRACEPARENT)
                .map(|v| v.as_bytes()),
        );
        let req = request.into_inner();
        let input = CallInput {
            arguments: parse_arguments(&req.arguments_json)?,
            tenant: req.tenant,
            tool: req.tool,
            idempotency_key: req.idempotency_key,
            a2a_peer: None,
            context_id: None,
            requested_mode: None,
            trace_parent,
        };
        let envelope = self.pipeline.call(&caller, input).await?;
        Ok(pb::CallToolResponse {
            envelope: Some(envelope_to(&envelope)),
        })
    }

    async fn read_call(
        &self,
        request: Request<pb::GetCallRequest>,
    ) -> Result<pb::GetCallResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let id = request.into_inner().call_id;
        let call = self.pipeline.own_call_caught_up(&caller, &id).await?;
        Ok(pb::GetCallResponse {
            envelope: Some(envelope_to(&Envelope::of_record(&call))),
            call: Some(call_record_to(&call)),
        })
    }
}

fn parse_arguments(text: &str) -> Result<Value, GatewayError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let invalid = |message: String| {
        GatewayError::new(
            ErrorCode::InvalidArguments,
            message,
            "send the tool's arguments as one JSON object",
        )
    };
    match serde_json::from_str(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(invalid("arguments_json must be a JSON object".to_owned())),
        Err(e) => Err(invalid(format!("arguments_json is not JSON: {e}"))),
    }
}

pub(crate) fn envelope_to(e: &Envelope) -> pb::CallEnvelope {
    pb::CallEnvelope {
        call_id: e.call_id.clone(),
        effective_mode: approval_mode_to(e.effective_mode) as i32,
        policy_decision_id: e.policy_decision_id.clone(),
        trace_id: e.trace_id.clone(),
        state: call_state_to(e.state) as i32,
        result_json: e.result_json.clone(),
        is_error: e.is_error,
        error: e.error.clone(),
        expires_at_unix_ms: e.expires_at_ms.map(|t| t as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_actors::{ExecError, ToolOutput};
    use gatehouse_registry::call::PrincipalChain;
    use gatehouse_registry::call::Verdict;
    use gatehouse_registry::{ApprovalMode, Outcome};
    use gatehouse_registry::{Call, CallId, CallState, NewCall};

    fn new_call() -> NewCall {
        NewCall {
            id: CallId::from_random(0xabc),
            tenant: "acme".into(),
            tool: "dev.echo".into(),
            arguments: "{}".into(),
            args_sha256: String::new(),
            chain: PrincipalChain {
                people: Vec::new(),
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
            context_id: None,
            trace_parent: None,
        }
    }

    #[test]
    fn a_pending_call_carries_its_ids_and_expiry() {
        let call = Call::new(new_call(), 1_000);
        let envelope = envelope_to(&Envelope::of_record(&call));
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
        let envelope = envelope_to(&Envelope::of_record(&call));
        assert_eq!(envelope.result_json.as_deref(), Some("{}"));
        assert_eq!(envelope.expires_at_unix_ms, None);

        call.state = CallState::Rejected;
        call.outcome = None;
        call.rejections.push(Verdict {
            person: None,
            principal: "alice".into(),
            at: 2_000,
            note: "not today".into(),
        });
        let envelope = envelope_to(&Envelope::of_record(&call));
        assert!(envelope.is_error);
        assert_eq!(
            envelope.error.as_deref(),
            Some("rejected by alice: not today")
        );
    }

    #[test]
    fn a_call_run_at_once_reports_tool_errors_and_exec_errors() {
        let call = new_call();
        let tool_error = envelope_to(&Envelope::ran_now(
            &call,
            Ok(ToolOutput {
                result_json: "{\"isError\":true}".into(),
                is_error: true,
            }),
        ));
        assert_eq!(tool_error.state, pb::CallState::Failed as i32);
        assert!(tool_error.is_error && tool_error.result_json.is_some());
        let unreachable = envelope_to(&Envelope::ran_now(
            &call,
            Err(ExecError {
                message: "down".into(),
            }),
        ));
        assert_eq!(unreachable.error.as_deref(), Some("down"));
        assert_eq!(unreachable.result_json, None);
    }

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(parse_arguments("").unwrap(), serde_json::json!({}));
        assert_eq!(
            parse_arguments("[1]").unwrap_err().code,
            ErrorCode::InvalidArguments
        );
        assert_eq!(
            parse_arguments("{").unwrap_err().code,
            ErrorCode::InvalidArguments
        );
    }
}
