//! Errors to gRPC status codes, in one place: every error variant gets a deliberate code.

use gatehouse_actors::ActorsError;
use gatehouse_cluster::cluster::WriteError;
use gatehouse_registry::ApplyError;
use gatehouse_registry::plan::PlanError;
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

/// Why a call was refused before anything was proposed or run. An unknown tenant reads the same
/// as one the caller holds no role in (the gateway answers that one with this too).
pub fn plan_error(e: &PlanError) -> Status {
    match e {
        PlanError::UnknownTenant(tenant) => {
            Status::not_found(format!("tenant {tenant} does not exist"))
        }
        PlanError::UnknownTool(_) => Status::not_found(e.to_string()),
        PlanError::NotAnAgent { .. } | PlanError::Refused(_) => {
            Status::permission_denied(e.to_string())
        }
        PlanError::InvalidArguments(_) => Status::invalid_argument(e.to_string()),
        // The admin's declaration is broken, not the caller's request.
        PlanError::BadSchema(_) => Status::failed_precondition(e.to_string()),
    }
}

pub fn actors_error(e: &ActorsError) -> Status {
    match e {
        ActorsError::Spawn(_) | ActorsError::Tenant(_) => Status::unavailable(e.to_string()),
    }
}
