//! What the gateway answers an agent whose call it will not run, whatever the front: a code an
//! agent can branch on, a message, whether trying again can help, and a hint at the remedy.
//!
//! Every error of the layers below reaches a front as a [`GatewayError`], through the
//! conversions here (`ApplyError`, `WriteError`, `PlanError`, `ActorsError`, `AuthError`,
//! `TenantChoice`); each front then has one map of its own from it to its wire (gRPC status
//! codes, JSON-RPC errors, MCP error results).

use gatehouse_actors::ActorsError;
use gatehouse_cluster::cluster::WriteError;
use gatehouse_registry::ApplyError;
use gatehouse_registry::plan::PlanError;
use gatehouse_registry::policy::Refusal;
use std::time::Duration;

/// An error as one sentence: it and its causes joined by ": ", each said once. Libraries often
/// end their own message with their source's ("tcp connect error: tcp connect error"); a cause
/// whose words are already there adds nothing.
pub fn sentence(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut cause = Some(error);
    while let Some(e) = cause {
        let said = e.to_string();
        let said = said.trim();
        if !said.is_empty() && !text.contains(said) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(said);
        }
        cause = e.source();
    }
    text
}

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
    /// The request does not fit the state it would change: an idempotency key reused with other
    /// arguments, a stale decision, a call that has moved on, a membership change the cluster
    /// cannot take now.
    Conflict,
    /// The cluster could not take the call now.
    Unavailable,
    /// A broken declaration on the admin's side (a tool schema that does not compile).
    Misconfigured,
    /// A field of the request that cannot be taken as it is (missing, malformed, an unknown
    /// value, a resource that fails validation).
    InvalidRequest,
    /// What the request would create is there already; what it would decide is decided.
    AlreadyExists,
    /// The change was not done within its deadline; it may still complete.
    DeadlineExceeded,
    /// The node failed at its own work (a poisoned lock, an answer of the wrong kind).
    Internal,
}

impl ErrorCode {
    /// Every code, so that each front's map can be checked against all of them.
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::NotFound,
        ErrorCode::UnknownTool,
        ErrorCode::InvalidArguments,
        ErrorCode::Denied,
        ErrorCode::RateLimited,
        ErrorCode::ApprovalPending,
        ErrorCode::Rejected,
        ErrorCode::Expired,
        ErrorCode::Cancelled,
        ErrorCode::UpstreamFailed,
        ErrorCode::OutcomeUnknown,
        ErrorCode::Conflict,
        ErrorCode::Unavailable,
        ErrorCode::Misconfigured,
        ErrorCode::InvalidRequest,
        ErrorCode::AlreadyExists,
        ErrorCode::DeadlineExceeded,
        ErrorCode::Internal,
    ];

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
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
            ErrorCode::Internal => "internal",
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

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::Unauthenticated,
            message,
            "send Authorization: Bearer <API key or JWT>",
        )
    }

    pub fn permission_denied(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::PermissionDenied,
            message,
            "ask an admin for the role this needs",
        )
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::InvalidRequest,
            message,
            "fix the request: the message names what is wrong with it",
        )
    }

    pub fn already_exists(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::AlreadyExists,
            message,
            "nothing to do: it is there already",
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        GatewayError::new(
            ErrorCode::Internal,
            message,
            "a fault of this node; try another node and tell its operator",
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

/// A command the registry refused. Who may not do it is `PermissionDenied`: an approver who is
/// not an approver of the call's tenant, or a principal on the wrong side of the call's chain.
impl From<ApplyError> for GatewayError {
    fn from(e: ApplyError) -> Self {
        let text = e.to_string();
        match e {
            ApplyError::Invalid { .. } => GatewayError::invalid_request(text),
            ApplyError::NotFound { .. } => GatewayError::not_found(text),
            ApplyError::AlreadyExists { .. } => GatewayError::already_exists(text),
            ApplyError::AlreadyDecided { .. } => GatewayError::new(
                ErrorCode::AlreadyExists,
                text,
                "each approver decides on a call once",
            ),
            ApplyError::NotApprover { .. } => GatewayError::new(
                ErrorCode::PermissionDenied,
                text,
                "only the tenant's approvers decide on its calls; ask its admin for the role",
            ),
            ApplyError::InChain { .. } => GatewayError::new(
                ErrorCode::PermissionDenied,
                text,
                "a call is approved by someone outside its own principal chain",
            ),
            ApplyError::NotInChain { .. } => GatewayError::new(
                ErrorCode::PermissionDenied,
                text,
                "only the call's own agent or peer may do this",
            ),
            ApplyError::IdempotencyConflict { .. } => GatewayError::new(
                ErrorCode::Conflict,
                text,
                "an idempotency key names one request; use a new key for new arguments",
            ),
            ApplyError::ArgsMismatch { .. } => GatewayError::new(
                ErrorCode::Conflict,
                text,
                "review the call's arguments again and name the digest you reviewed",
            ),
            ApplyError::InUse { .. }
            | ApplyError::WrongState { .. }
            | ApplyError::NotExpired { .. }
            | ApplyError::DeadlinePassed { .. }
            | ApplyError::StaleEpoch { .. }
            | ApplyError::ClaimMismatch { .. }
            | ApplyError::Refused { .. } => GatewayError::new(
                ErrorCode::Conflict,
                text,
                "the registry refused the change as things stand; read them again",
            ),
        }
    }
}

impl From<WriteError> for GatewayError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Rejected(refused) => refused.into(),
            WriteError::Unavailable(..) | WriteError::Stopped(_) => {
                GatewayError::unavailable(e.to_string())
            }
        }
    }
}

impl From<&ActorsError> for GatewayError {
    fn from(e: &ActorsError) -> Self {
        match e {
            ActorsError::Spawn(_) | ActorsError::Tenant(_) => {
                GatewayError::unavailable(e.to_string())
            }
        }
    }
}

/// Every kind of failed authentication is the same refusal to a caller; the kind decides only
/// an HTTP front's challenge.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{AuthError, AuthErrorKind, TenantChoice};
    use gatehouse_registry::{CallId, CallState, Kind, ResourceKey};

    #[test]
    fn every_code_has_a_name_of_its_own() {
        let names: std::collections::BTreeSet<&str> =
            ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), ErrorCode::ALL.len());
    }

    /// One of every refusal the registry makes, with the code it reaches a caller as.
    fn apply_errors() -> Vec<(ApplyError, ErrorCode)> {
        let call = || CallId("call_1".into());
        let who = || "carol".to_owned();
        vec![
            (
                ApplyError::Invalid {
                    key: ResourceKey {
                        kind: Kind::Tool,
                        tenant: Some("acme".into()),
                        name: "up.t".into(),
                    },
                    problems: Vec::new(),
                },
                ErrorCode::InvalidRequest,
            ),
            (
                ApplyError::NotFound {
                    what: "tenant acme".into(),
                },
                ErrorCode::NotFound,
            ),
            (
                ApplyError::InUse {
                    what: "upstream up".into(),
                    by: "tool up.t".into(),
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::WrongState {
                    call: call(),
                    state: CallState::Succeeded,
                    action: "cancelled".into(),
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::NotApprover {
                    principal: who(),
                    tenant: "acme".into(),
                },
                ErrorCode::PermissionDenied,
            ),
            (
                ApplyError::InChain {
                    principal: who(),
                    call: call(),
                },
                ErrorCode::PermissionDenied,
            ),
            (
                ApplyError::NotInChain {
                    principal: who(),
                    call: call(),
                },
                ErrorCode::PermissionDenied,
            ),
            (
                ApplyError::AlreadyDecided {
                    principal: who(),
                    call: call(),
                },
                ErrorCode::AlreadyExists,
            ),
            (
                ApplyError::ArgsMismatch {
                    call: call(),
                    given: "ab".into(),
                    actual: "cd".into(),
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::StaleEpoch {
                    tenant: "acme".into(),
                    node: 2,
                    epoch: 1,
                    home: Some(3),
                    current: 2,
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::ClaimMismatch {
                    call: call(),
                    given: "claim_1".into(),
                },
                ErrorCode::Conflict,
            ),
            (ApplyError::NotExpired { call: call() }, ErrorCode::Conflict),
            (
                ApplyError::DeadlinePassed {
                    call: call(),
                    deadline: 5,
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::IdempotencyConflict {
                    key: "k".into(),
                    call: call(),
                },
                ErrorCode::Conflict,
            ),
            (
                ApplyError::AlreadyExists {
                    what: "call call_1".into(),
                },
                ErrorCode::AlreadyExists,
            ),
            (
                ApplyError::Refused {
                    reason: "nothing to put".into(),
                },
                ErrorCode::Conflict,
            ),
        ]
    }

    #[test]
    fn every_refusal_of_the_registry_has_its_code_and_keeps_its_words() {
        for (refused, code) in apply_errors() {
            let text = refused.to_string();
            let error = GatewayError::from(refused.clone());
            assert_eq!(error.code, code, "{refused:?}");
            assert_eq!(error.message, text);
            assert!(!error.hint.is_empty(), "{refused:?}");
            // Through a write, the same.
            let written = GatewayError::from(WriteError::Rejected(refused));
            assert_eq!((written.code, written.message), (code, text));
        }
    }

    /// The one decision by meaning: an approver that is not an approver of the call's tenant
    /// may not decide, whichever way its refusal reaches the caller.
    #[test]
    fn an_approver_of_another_tenant_is_denied_permission() {
        let refused = ApplyError::NotApprover {
            principal: "dave".into(),
            tenant: "acme".into(),
        };
        assert_eq!(
            GatewayError::from(WriteError::Rejected(refused)).code,
            ErrorCode::PermissionDenied
        );
    }

    #[test]
    fn a_write_no_leader_took_is_unavailable_and_retryable() {
        for e in [
            WriteError::Unavailable(Duration::from_secs(1), "no leader".into()),
            WriteError::Stopped("shut down".into()),
        ] {
            let text = e.to_string();
            let error = GatewayError::from(e);
            assert_eq!((error.code, error.message), (ErrorCode::Unavailable, text));
            assert!(error.retryable);
        }
    }

    #[test]
    fn authentication_and_tenant_choice_refuse_the_request() {
        for kind in [
            AuthErrorKind::Missing,
            AuthErrorKind::Invalid,
            AuthErrorKind::Expired,
            AuthErrorKind::UnknownPrincipal,
        ] {
            let error = GatewayError::from(AuthError {
                kind,
                message: "unknown API key".into(),
            });
            assert_eq!(error.code, ErrorCode::Unauthenticated);
            assert_eq!(error.message, "unknown API key");
        }
        let principal = || "bot".to_owned();
        for choice in [
            TenantChoice::NoAgentRole {
                principal: principal(),
            },
            TenantChoice::Ambiguous {
                principal: principal(),
                tenants: vec!["a".into(), "b".into()],
            },
            TenantChoice::NotAgentOf {
                principal: principal(),
                requested: "c".into(),
                tenants: vec!["a".into()],
            },
        ] {
            let text = choice.to_string();
            let error = GatewayError::from(choice);
            assert_eq!(
                (error.code, error.message),
                (ErrorCode::PermissionDenied, text)
            );
        }
    }

    #[test]
    fn plan_refusals_have_their_codes() {
        let cases = [
            (PlanError::UnknownTenant("acme".into()), ErrorCode::NotFound),
            (
                PlanError::NotAnAgent {
                    principal: "carol".into(),
                    tenant: "acme".into(),
                },
                ErrorCode::PermissionDenied,
            ),
            (
                PlanError::UnknownTool("up.t".into()),
                ErrorCode::UnknownTool,
            ),
            (
                PlanError::Refused(Refusal::NotAllowed {
                    tool: "up.t".into(),
                }),
                ErrorCode::Denied,
            ),
            (PlanError::BadSchema("no".into()), ErrorCode::Misconfigured),
            (
                PlanError::InvalidArguments(Vec::new()),
                ErrorCode::InvalidArguments,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(GatewayError::from(&e).code, code, "{e:?}");
        }
        let error = GatewayError::from(&PlanError::UnknownTenant("acme".into()));
        assert_eq!(error.message, "tenant acme does not exist");
    }
}
