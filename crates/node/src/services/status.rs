//! Errors to gRPC status codes, in one place: every error variant gets a deliberate code.

use crate::cluster::WriteError;
use gatehouse_registry::ApplyError;
use tonic::Status;

pub fn apply_error(e: &ApplyError) -> Status {
    let text = e.to_string();
    match e {
        ApplyError::Invalid { .. } => Status::invalid_argument(text),
        ApplyError::NotFound { .. } => Status::not_found(text),
        ApplyError::AlreadyExists { .. } => Status::already_exists(text),
        ApplyError::InUse { .. }
        | ApplyError::WrongState { .. }
        | ApplyError::ArgsMismatch { .. }
        | ApplyError::NotExpired { .. }
        | ApplyError::DeadlinePassed { .. }
        | ApplyError::IdempotencyConflict { .. }
        | ApplyError::StaleEpoch { .. }
        | ApplyError::ClaimMismatch { .. }
        | ApplyError::Refused { .. } => Status::failed_precondition(text),
        ApplyError::NotApprover { .. }
        | ApplyError::InChain { .. }
        | ApplyError::NotInChain { .. } => Status::permission_denied(text),
        ApplyError::AlreadyDecided { .. } => Status::already_exists(text),
    }
}

pub fn write_error(e: WriteError) -> Status {
    match e {
        WriteError::Rejected(e) => apply_error(&e),
        WriteError::Unavailable(..) => Status::unavailable(e.to_string()),
        WriteError::Stopped(_) => Status::unavailable(e.to_string()),
    }
}
