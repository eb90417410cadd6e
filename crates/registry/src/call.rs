//! The approval record: one call that went through the registry, and the states it moves
//! through (DESIGN's propose, approve, execute table). The guards that need the rest of the
//! registry (roles, placement, generations) live in `registry::calls`.

use crate::identity::Owner;
use crate::mode::ApprovalMode;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Milliseconds since the Unix epoch, always carried by the command: apply reads no clock.
pub type Timestamp = u64;

/// A node of the cluster, as Raft numbers it.
pub type NodeId = u64;

/// A stored result is at most this many bytes of JSON; larger outputs keep only their digest.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub String);

impl CallId {
    /// A fresh id from 128 random bits the caller supplies (the pure crate draws none).
    pub fn from_random(bits: u128) -> Self {
        let mut id = *b"call_00000000000000000000000000000000";
        hex::encode_to_slice(bits.to_be_bytes(), &mut id[5..]).expect("two hex digits per byte");
        CallId(String::from_utf8(id.to_vec()).expect("hex digits are ASCII"))
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallState {
    Pending,
    Approved,
    Rejected,
    Cancelled,
    Expired,
    Executing,
    Succeeded,
    Failed,
    OutcomeUnknown,
}

impl CallState {
    /// No command moves a call out of a finished state.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            CallState::Rejected
                | CallState::Cancelled
                | CallState::Expired
                | CallState::Succeeded
                | CallState::Failed
        )
    }
}

impl CallState {
    /// The state's name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Pending => "pending",
            CallState::Approved => "approved",
            CallState::Rejected => "rejected",
            CallState::Cancelled => "cancelled",
            CallState::Expired => "expired",
            CallState::Executing => "executing",
            CallState::Succeeded => "succeeded",
            CallState::Failed => "failed",
            CallState::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// Where a call stands, as the rest of a sentence that starts with the call
    /// ("call X has already succeeded").
    pub fn standing(self) -> &'static str {
        match self {
            CallState::Pending => "is still pending",
            CallState::Approved => "is already approved",
            CallState::Rejected => "was rejected",
            CallState::Cancelled => "was cancelled",
            CallState::Expired => "has expired",
            CallState::Executing => "is executing",
            CallState::Succeeded => "has already succeeded",
            CallState::Failed => "has already failed",
            CallState::OutcomeUnknown => "has an unknown outcome",
        }
    }
}

impl fmt::Display for CallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a call acts for: the end user, the agent principal that made it, and the A2A peer that
/// delegated it, if any. None of them may approve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrincipalChain {
    pub end_user: Option<String>,
    pub agent: String,
    pub a2a_peer: Option<String>,
    /// Every person of the chain (`identity::person` of the end user, the agent and the peer),
    /// sorted, as they were when the call was proposed. Empty in records written before people
    /// were kept, whose names alone then stand for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub people: Vec<String>,
}

impl PrincipalChain {
    /// The person the call acts for: its end user, else the agent itself.
    pub fn person(&self) -> &str {
        self.end_user.as_deref().unwrap_or(&self.agent)
    }

    /// Whether the principal `principal`, who is the person `person`, is part of the chain.
    /// Names and people share one namespace (see `identity`), so each is compared with both.
    pub fn includes(&self, principal: &str, person: &str) -> bool {
        let mut members = [
            Some(self.agent.as_str()),
            self.a2a_peer.as_deref(),
            self.end_user.as_deref(),
        ]
        .into_iter()
        .flatten()
        .chain(self.people.iter().map(String::as_str));
        members.any(|m| m == principal || m == person)
    }

    /// Whether the call belongs to `owner`: made by (or delegated through) that principal, for
    /// that end user. Per-user data is read and acted on only by its owner.
    pub fn owned_by(&self, owner: Owner<'_>) -> bool {
        (self.agent == owner.principal || self.a2a_peer.as_deref() == Some(owner.principal))
            && self.end_user.as_deref() == owner.end_user
    }
}

/// An approval or a rejection: who, when, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub principal: String,
    /// The person who decided (`identity::person`); absent in verdicts written before people
    /// were kept, where the principal stands for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    pub at: Timestamp,
    pub note: String,
}

impl Verdict {
    /// The person who decided.
    pub fn person(&self) -> &str {
        self.person.as_deref().unwrap_or(&self.principal)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub claim_id: String,
    pub node: NodeId,
    pub epoch: u64,
    pub at: Timestamp,
}

/// How an execution ended. Bodies are kept only up to `MAX_RESULT_BYTES`; the digest and
/// length always describe the whole output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    Succeeded {
        output_sha256: String,
        output_len: u64,
        result: Option<String>,
    },
    Failed {
        error: String,
    },
}

impl Outcome {
    pub fn state(&self) -> CallState {
        match self {
            Outcome::Succeeded { .. } => CallState::Succeeded,
            Outcome::Failed { .. } => CallState::Failed,
        }
    }

    pub(crate) fn size_problem(&self) -> Option<String> {
        match self {
            Outcome::Succeeded {
                result: Some(r), ..
            } if r.len() > MAX_RESULT_BYTES => Some(format!(
                "stored result is {} bytes, at most {MAX_RESULT_BYTES}",
                r.len()
            )),
            Outcome::Failed { error } if error.len() > MAX_RESULT_BYTES => {
                Some(format!("error text is over {MAX_RESULT_BYTES} bytes"))
            }
            _ => None,
        }
    }
}

/// Everything a proposal fixes about a call, evaluated before it is proposed: apply stores it
/// as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewCall {
    pub id: CallId,
    pub tenant: String,
    pub tool: String,
    /// Canonical JSON of the arguments, and its SHA-256.
    pub arguments: String,
    pub args_sha256: String,
    pub chain: PrincipalChain,
    pub requested_mode: Option<ApprovalMode>,
    pub effective_mode: ApprovalMode,
    pub highest_mode: ApprovalMode,
    pub policy_decision_id: String,
    pub tool_generation: u64,
    pub policy_generation: u64,
    pub idempotency_key: Option<String>,
    /// The call may be re-claimed by a new home (the tool is idempotent, or its upstream dedupes
    /// by the idempotency key).
    pub retry_safe: bool,
    /// 0 when the effective mode needs no approval: the call starts approved.
    pub required_approvals: u32,
    pub expires_at: Timestamp,
    pub approval_valid_ms: u64,
    /// The A2A context of a delegated task, as its peer named it (or as it was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The W3C `traceparent` of the span that took the call: the node that executes it
    /// continues that trace, whichever node it is. Absent in records written before traces
    /// were kept (their trace id is derived from the call id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Call {
    #[serde(flatten)]
    pub spec: NewCall,
    pub state: CallState,
    pub created_at: Timestamp,
    pub approvals: Vec<Verdict>,
    pub rejections: Vec<Verdict>,
    pub approval_valid_until: Option<Timestamp>,
    pub claim: Option<Claim>,
    pub outcome: Option<Outcome>,
    /// What an approver said when resolving an unknown outcome, or why the call failed before
    /// it ran.
    pub note: Option<String>,
    pub updated_at: Timestamp,
}

impl Call {
    pub fn new(spec: NewCall, at: Timestamp) -> Self {
        let state = if spec.required_approvals == 0 {
            CallState::Approved
        } else {
            CallState::Pending
        };
        let approval_valid_until =
            (state == CallState::Approved).then(|| at + spec.approval_valid_ms);
        Call {
            spec,
            state,
            created_at: at,
            approvals: vec![],
            rejections: vec![],
            approval_valid_until,
            claim: None,
            outcome: None,
            note: None,
            updated_at: at,
        }
    }

    pub fn id(&self) -> &CallId {
        &self.spec.id
    }
}

#[cfg(test)]
mod tests {
    use super::{CallId, CallState};

    #[test]
    fn a_call_id_is_its_bits_as_32_hex_digits_leading_zeros_kept() {
        for bits in [
            0,
            1,
            0xabc,
            1 << 127,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            assert_eq!(CallId::from_random(bits).0, format!("call_{bits:032x}"));
        }
    }

    #[test]
    fn state_names_are_their_serialised_form() {
        for state in [
            CallState::Pending,
            CallState::Approved,
            CallState::Rejected,
            CallState::Cancelled,
            CallState::Expired,
            CallState::Executing,
            CallState::Succeeded,
            CallState::Failed,
            CallState::OutcomeUnknown,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
            assert_eq!(state.to_string(), state.as_str());
        }
    }
}
