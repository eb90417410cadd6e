//! What the gateway answers an agent whose call it will not run, whatever the front: a code an
//! agent can branch on, a message, whether trying again can help, and a hint at the remedy.

use gatehouse_actors::ActorsError;
use gatehouse_cluster::cluster::WriteError;
use gatehouse_registry::ApplyError;
use gatehouse_registry::plan::PlanError;
use gatehouse_registry::policy::Refusal;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// No credential, or a wrong one.
    Unauthenticated,
    /// The caller is known but may not do this.
    PermissionDenied,
    /// A tenant or call that does not exist, or that the caller may not see (they read the same).
    NotFound,
    UnknownTool,
    InvalidArguments,
    /// The tenant's policy refuses the tool.
    Denied,
    /// The (tenant, tool) budget is spent for now.
    RateLimited,
    /// A call needs a person's approval first.
    ApprovalPending,
    Rejected,
    Expired,
    Cancelled,
    /// The upstream ran and failed, or could not be reached.
    UpstreamFailed,
    /// The call may or may not have run; an approver resolves it.
    OutcomeUnknown,
    /// The request conflicts with what is recorded (an idempotency key reused with other
    /// arguments, a stale decision).
    Conflict,
    /// The cluster could not take the call now.
    Unavailable,
    /// A broken declaration on the admin's side (a tool schema that does not compile).
    Misconfigured,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::NotFound => "not_found",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::Denied => "denied_by_policy",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::ApprovalPending => "approval_pending",
            ErrorCode::Rejected => "rejected",
            ErrorCode::Expired => "expired",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::UpstreamFailed => "upstream_failed",
            ErrorCode::OutcomeUnknown => "outcome_unknown",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Misconfigured => "misconfigured",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct GatewayError {
    pub code: ErrorCode,
    pub message: String,
    /// Whether the same request, sent again later, can succeed.
    pub retryable: bool,
    /// What the agent (or its operator) can do about it.
    pub hint: String,
    pub retry_after: Option<Duration>,
}

impl GatewayError {
    pub fn new(code: ErrorCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        let retryable = matches!(
            code,
            ErrorCode::RateLimited | ErrorCode::Unavailable | ErrorCode::ApprovalPending
        );
        GatewayError {
            code,
            message: message.into(),
            retryable,
            hint: hint.into(),
            retry_after: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::NotFound,
            message,
            "check the name or id; only your own tenant's tools and your own calls are visible",
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::Unavailable,
            message,
            "try again shortly; the cluster may be electing a leader",
        )
    }

    /// This node is stopping and takes no new call; any other node will.
    pub fn stopping() -> Self {
        GatewayError::new(
            ErrorCode::Unavailable,
            "this node is stopping and takes no new calls",
            "send the call to another node of the cluster",
        )
    }

    pub fn rate_limited(tool: &str, retry_after: Duration) -> Self {
        GatewayError {
            retry_after: Some(retry_after),
            ..GatewayError::new(
                ErrorCode::RateLimited,
                format!("the tenant's budget for {tool} is spent for now"),
                format!("retry after {} ms", retry_after.as_millis().max(1)),
            )
        }
    }

    /// As a gRPC status, for the gRPC front.
    pub fn to_status(&self) -> tonic::Status {
        use tonic::Code;
        let code = match self.code {
            ErrorCode::Unauthenticated => Code::Unauthenticated,
            ErrorCode::PermissionDenied | ErrorCode::Denied => Code::PermissionDenied,
            ErrorCode::NotFound | ErrorCode::UnknownTool => Code::NotFound,
            ErrorCode::InvalidArguments => Code::InvalidArgument,
            ErrorCode::RateLimited => Code::ResourceExhausted,
            ErrorCode::Conflict
            | ErrorCode::Misconfigured
            | ErrorCode::ApprovalPending
            | ErrorCode::Rejected
            | ErrorCode::Expired
            | ErrorCode::Cancelled
            | ErrorCode::OutcomeUnknown => Code::FailedPrecondition,
            ErrorCode::UpstreamFailed | ErrorCode::Unavailable => Code::Unavailable,
        };
        tonic::Status::new(code, self.message.clone())
    }
}

impl From<&PlanError> for GatewayError {
    fn from(e: &PlanError) -> Self {
        let text = e.to_string();
        match e {
            // An unknown tenant reads the same as one the caller holds no role in.
            PlanError::UnknownTenant(tenant) => {
                GatewayError::not_found(format!("tenant {tenant} does not exist"))
            }
            PlanError::UnknownTool(_) => GatewayError::new(
                ErrorCode::UnknownTool,
                text,
                "list the tools you can see (tools/list) or load a toolset",
            ),
            PlanError::NotAnAgent { .. } => GatewayError::new(
                ErrorCode::PermissionDenied,
                text,
                "ask the tenant's admin for the agent role",
            ),
            PlanError::Refused(refusal) => {
                GatewayError::new(ErrorCode::Denied, text, refusal_hint(refusal))
            }
            PlanError::InvalidArguments(_) => GatewayError::new(
                ErrorCode::InvalidArguments,
                text,
                "fix the arguments to match the tool's input schema and constraints",
            ),
            PlanError::BadSchema(_) => GatewayError::new(
                ErrorCode::Misconfigured,
                text,
                "the tool's declaration is broken; tell the tenant's admin",
            ),
        }
    }
}

/// What a refused caller can do about it.
fn refusal_hint(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::Denied { .. } | Refusal::NotAllowed { .. } => {
            "the tenant's policy does not let you call this tool; ask its admin"
        }
        Refusal::AboveIntent { .. } => {
            "your principal declared an intent this call goes beyond; use a principal meant for it"
        }
        Refusal::UnknownUser { .. } | Refusal::UserNotPermitted { .. } => {
            "the end user the call is made for may not call this tool; ask the tenant's admin"
        }
    }
}

impl From<WriteError> for GatewayError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Rejected(ApplyError::IdempotencyConflict { .. }) => GatewayError::new(
                ErrorCode::Conflict,
                e.to_string(),
                "an idempotency key names one request; use a new key for new arguments",
            ),
            WriteError::Rejected(other) => GatewayError::new(
                ErrorCode::Conflict,
                other.to_string(),
                "the call's record refused the change",
            ),
            WriteError::Unavailable(..) | WriteError::Stopped(_) => {
                GatewayError::unavailable(e.to_string())
            }
        }
    }
}

impl From<&ActorsError> for GatewayError {
    fn from(e: &ActorsError) -> Self {
        GatewayError::unavailable(e.to_string())
    }
}
