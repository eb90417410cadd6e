//! Gateway errors as gRPC statuses: the one map from a [`GatewayError`] to a status code. Every
//! gRPC service answers its errors through it, and so does the A2A gRPC binding's edge; each
//! code is a deliberate choice, and a new code does not compile until it has one.
//!
//! Two statuses pass through as they are: one a forwarded request's leader answered, and the
//! TLS layer's refusal of a peer RPC that came without a client certificate
//! (`gatehouse_cluster::tls`).

use gatehouse_gateway::pipeline::{ErrorCode, GatewayError};
use tonic::{Code, Response, Status};

/// The status a gRPC caller gets for `error`, with its message as it is.
pub fn to_status(error: GatewayError) -> Status {
    let code = match error.code {
        ErrorCode::Unauthenticated => Code::Unauthenticated,
        ErrorCode::PermissionDenied | ErrorCode::Denied => Code::PermissionDenied,
        ErrorCode::NotFound | ErrorCode::UnknownTool => Code::NotFound,
        ErrorCode::InvalidArguments | ErrorCode::InvalidRequest => Code::InvalidArgument,
        ErrorCode::AlreadyExists => Code::AlreadyExists,
        ErrorCode::RateLimited => Code::ResourceExhausted,
        // The request does not fit the state of what it names; a call waiting or ended is
        // such a state too.
        ErrorCode::Conflict
        | ErrorCode::Misconfigured
        | ErrorCode::ApprovalPending
        | ErrorCode::Rejected
        | ErrorCode::Expired
        | ErrorCode::Cancelled
        | ErrorCode::OutcomeUnknown => Code::FailedPrecondition,
        ErrorCode::UpstreamFailed | ErrorCode::Unavailable => Code::Unavailable,
        ErrorCode::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorCode::Internal => Code::Internal,
    };
    Status::new(code, error.message)
}

/// A service method's answer: its message, or its error through [`to_status`].
pub fn answer<T>(result: Result<T, GatewayError>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(to_status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_status() {
        let expected = [
            (ErrorCode::Unauthenticated, Code::Unauthenticated),
            (ErrorCode::PermissionDenied, Code::PermissionDenied),
            (ErrorCode::NotFound, Code::NotFound),
            (ErrorCode::UnknownTool, Code::NotFound),
            (ErrorCode::InvalidArguments, Code::InvalidArgument),
            (ErrorCode::Denied, Code::PermissionDenied),
            (ErrorCode::RateLimited, Code::ResourceExhausted),
            (ErrorCode::ApprovalPending, Code::FailedPrecondition),
            (ErrorCode::Rejected, Code::FailedPrecondition),
            (ErrorCode::Expired, Code::FailedPrecondition),
            (ErrorCode::Cancelled, Code::FailedPrecondition),
            (ErrorCode::UpstreamFailed, Code::Unavailable),
            (ErrorCode::OutcomeUnknown, Code::FailedPrecondition),
            (ErrorCode::Conflict, Code::FailedPrecondition),
            (ErrorCode::Unavailable, Code::Unavailable),
            (ErrorCode::Misconfigured, Code::FailedPrecondition),
            (ErrorCode::InvalidRequest, Code::InvalidArgument),
            (ErrorCode::AlreadyExists, Code::AlreadyExists),
            (ErrorCode::DeadlineExceeded, Code::DeadlineExceeded),
            (ErrorCode::Internal, Code::Internal),
        ];
        assert_eq!(expected.len(), ErrorCode::ALL.len());
        for (code, status) in expected {
            let refused = to_status(GatewayError::new(code, "the words", "a hint"));
            assert_eq!(refused.code(), status, "{code:?}");
            assert_eq!(
                refused.message(),
                "the words",
                "the message as it is, no hint"
            );
        }
    }

    /// An approver deciding on a call of a tenant it does not approve for is denied, not told
    /// the call is in the wrong state.
    #[test]
    fn an_approver_of_another_tenant_is_permission_denied() {
        let refused = gatehouse_registry::ApplyError::NotApprover {
            principal: "dave".into(),
            tenant: "acme".into(),
        };
        let written = gatehouse_cluster::cluster::WriteError::Rejected(refused);
        let status = to_status(written.into());
        assert_eq!(status.code(), Code::PermissionDenied);
        assert_eq!(status.message(), "dave is not an approver of tenant acme");
    }
}
