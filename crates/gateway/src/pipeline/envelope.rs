//! The envelope every answer about a call carries: its ids, its effective mode, the policy
//! decision, the trace, and how it stands or ended.

use crate::error::{ErrorCode, GatewayError};
use gatehouse_actors::{ExecError, ToolOutput};
use gatehouse_registry::call::Verdict;
use gatehouse_registry::{ApprovalMode, Call, CallId, CallState, NewCall, Outcome};

#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub call_id: String,
    pub tenant: String,
    pub tool: String,
    pub effective_mode: ApprovalMode,
    pub policy_decision_id: String,
    pub trace_id: String,
    pub state: CallState,
    /// The upstream's result as JSON text, once there is one (also for a tool's own error).
    pub result_json: Option<String>,
    /// `result_json` is a `CallToolResult` an executor of this node made for this answer
    /// (`ToolOutput`'s promise), not a result read back from a call record, which an earlier
    /// version may have stored in another shape.
    pub fresh_result: bool,
    pub is_error: bool,
    pub error: Option<String>,
    /// While pending: until when approvers may act. Once approved: until when it must start.
    pub expires_at_ms: Option<u64>,
    pub args_sha256: String,
    /// The A2A context of a delegated task.
    pub context_id: Option<String>,
    /// When the record last changed; `None` for a call that ran at once and has none.
    pub updated_at_ms: Option<u64>,
}

impl Envelope {
    fn base(call: &NewCall, state: CallState) -> Envelope {
        Envelope::base_in(
            call,
            state,
            trace_id(&call.id, call.trace_parent.as_deref()),
        )
    }

    /// [`Envelope::base`] with the call's trace id (see [`trace_id`]) already in hand.
    fn base_in(call: &NewCall, state: CallState, trace_id: String) -> Envelope {
        Envelope {
            call_id: call.id.0.clone(),
            tenant: call.tenant.clone(),
            tool: call.tool.clone(),
            effective_mode: call.effective_mode,
            policy_decision_id: call.policy_decision_id.clone(),
            trace_id,
            state,
            result_json: None,
            fresh_result: false,
            is_error: false,
            error: None,
            expires_at_ms: None,
            args_sha256: call.args_sha256.clone(),
            context_id: call.context_id.clone(),
            updated_at_ms: None,
        }
    }

    /// The envelope of a call that ran at once.
    pub fn ran_now(call: &NewCall, result: Result<ToolOutput, ExecError>) -> Envelope {
        let trace_id = trace_id(&call.id, call.trace_parent.as_deref());
        Envelope::ran_now_in(call, result, trace_id)
    }

    /// [`Envelope::ran_now`] with the call's trace id (see [`trace_id`]) already in hand: the
    /// pipeline reads it once for the execution's audit entry and the envelope.
    pub fn ran_now_in(
        call: &NewCall,
        result: Result<ToolOutput, ExecError>,
        trace_id: String,
    ) -> Envelope {
        match result {
            Ok(out) if !out.is_error => Envelope {
                result_json: Some(out.result_json),
                fresh_result: true,
                ..Envelope::base_in(call, CallState::Succeeded, trace_id)
            },
            Ok(out) => Envelope {
                result_json: Some(out.result_json),
                fresh_result: true,
                is_error: true,
                error: Some("the tool reported an error".into()),
                ..Envelope::base_in(call, CallState::Failed, trace_id)
            },
            Err(e) => Envelope {
                is_error: true,
                error: Some(e.message),
                ..Envelope::base_in(call, CallState::Failed, trace_id)
            },
        }
    }

    /// A call committed but not yet applied on this node: what the proposal answered.
    pub fn proposed(call: &NewCall, id: &CallId, state: CallState) -> Envelope {
        if *id == call.id {
            Envelope {
                expires_at_ms: (state == CallState::Pending).then_some(call.expires_at),
                ..Envelope::base(call, state)
            }
        } else {
            // An earlier call under the same idempotency key, not applied here yet.
            Envelope {
                call_id: id.0.clone(),
                trace_id: trace_id(id, None),
                ..Envelope::base(call, state)
            }
        }
    }

    /// The envelope of a call with a record, as the record stands.
    pub fn of_record(call: &Call) -> Envelope {
        let failed = |error: String| (None, true, Some(error));
        let (result_json, is_error, error) = match (&call.outcome, call.state) {
            (Some(Outcome::Succeeded { result, .. }), CallState::Failed) => (
                result.clone(),
                true,
                Some("the tool reported an error".into()),
            ),
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
            (None, CallState::OutcomeUnknown) => failed(
                "the call's outcome is unknown: its executor was lost mid-call; an approver \
                 resolves it"
                    .into(),
            ),
            (
                None,
                CallState::Pending
                | CallState::Approved
                | CallState::Executing
                | CallState::Succeeded,
            ) => (None, false, None),
        };
        let expires_at_ms = match call.state {
            CallState::Pending => Some(call.spec.expires_at),
            CallState::Approved => Some(call.approval_valid_until.unwrap_or(call.spec.expires_at)),
            _ => None,
        };
        Envelope {
            result_json,
            is_error,
            error,
            expires_at_ms,
            updated_at_ms: Some(call.updated_at),
            ..Envelope::base(&call.spec, call.state)
        }
    }

    /// Why a call that is not (yet) a success cannot give its result now, as a structured
    /// error; `None` for a call that succeeded.
    pub fn as_error(&self) -> Option<GatewayError> {
        let detail = self.error.clone().unwrap_or_default();
        let (code, message, hint) = match self.state {
            CallState::Succeeded => return None,
            CallState::Pending => (
                ErrorCode::ApprovalPending,
                format!("call {} waits for approval", self.call_id),
                format!(
                    "poll gatehouse.call_status with call_id {} until it is final",
                    self.call_id
                ),
            ),
            CallState::Approved | CallState::Executing => (
                ErrorCode::ApprovalPending,
                format!("call {} is approved and running", self.call_id),
                format!(
                    "poll gatehouse.call_status with call_id {} for its result",
                    self.call_id
                ),
            ),
            CallState::Rejected => (
                ErrorCode::Rejected,
                detail,
                "an approver refused this call; do not retry it unchanged".to_owned(),
            ),
            CallState::Expired => (
                ErrorCode::Expired,
                detail,
                "nobody approved it in time; call again if it is still wanted".to_owned(),
            ),
            CallState::Cancelled => (
                ErrorCode::Cancelled,
                detail,
                "the call was cancelled before it ran".to_owned(),
            ),
            CallState::Failed => (
                ErrorCode::UpstreamFailed,
                detail,
                "the tool failed; read its result, fix the cause, then call again".to_owned(),
            ),
            CallState::OutcomeUnknown => (
                ErrorCode::OutcomeUnknown,
                detail,
                "do not repeat it blindly: ask an approver to resolve the call".to_owned(),
            ),
        };
        let mut error = GatewayError::new(code, message, hint);
        error.retryable = matches!(
            self.state,
            CallState::Pending | CallState::Approved | CallState::Executing
        );
        Some(error)
    }
}

/// The call's W3C trace id as 32 hex digits: the trace its record carries (the caller's, or the
/// one the call started), else the call id's own 128 random bits, so every answer about one
/// call names the same trace; ids of another shape get a fresh random one.
pub fn trace_id(id: &CallId, trace_parent: Option<&str>) -> String {
    let trace = crate::telemetry::call_trace_id(id, trace_parent)
        .unwrap_or_else(|| rand::random::<u128>().max(1));
    gatehouse_registry::canonical::hex_lower(&trace.to_be_bytes())
}
