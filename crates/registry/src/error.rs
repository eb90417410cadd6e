use crate::call::{CallId, CallState};
use crate::resource::{Problem, ResourceKey};

/// Why a command was refused. A refused command leaves the registry exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum ApplyError {
    #[error("invalid {key}: {}", join(problems))]
    Invalid {
        key: ResourceKey,
        problems: Vec<Problem>,
    },
    #[error("{what} does not exist")]
    NotFound { what: String },
    #[error("{what} is still in use: {by}")]
    InUse { what: String, by: String },
    #[error("call {call} {}, so it cannot be {action}", state.standing())]
    WrongState {
        call: CallId,
        state: CallState,
        action: String,
    },
    #[error("{principal} is not an approver of tenant {tenant}")]
    NotApprover { principal: String, tenant: String },
    #[error("{principal} is part of call {call}'s principal chain and cannot approve it")]
    InChain { principal: String, call: CallId },
    #[error("{principal} is not part of call {call}'s principal chain")]
    NotInChain { principal: String, call: CallId },
    #[error("{principal} has already decided on call {call}")]
    AlreadyDecided { principal: String, call: CallId },
    #[error("the approval names arguments {given}, but call {call} has {actual}")]
    ArgsMismatch {
        call: CallId,
        given: String,
        actual: String,
    },
    #[error(
        "node {node} with epoch {epoch} is not the home of tenant {tenant} (home {home:?}, epoch {current})"
    )]
    StaleEpoch {
        tenant: String,
        node: u64,
        epoch: u64,
        home: Option<u64>,
        current: u64,
    },
    #[error("claim {given} does not hold call {call}")]
    ClaimMismatch { call: CallId, given: String },
    #[error("call {call} has not reached its expiry")]
    NotExpired { call: CallId },
    #[error("call {call} passed its deadline at {deadline}")]
    DeadlinePassed { call: CallId, deadline: u64 },
    #[error("idempotency key {key:?} was used by call {call} with other arguments")]
    IdempotencyConflict { key: String, call: CallId },
    #[error("{what} already exists")]
    AlreadyExists { what: String },
    #[error("{reason}")]
    Refused { reason: String },
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
