//! What a tenant's webhooks are told about its calls: the moments of a call that a person may
//! have to act on, read off the call's record alone, so every node (and the node that takes
//! over as home) finds the same notices due.

use crate::call::{Call, CallState, Timestamp};
pub use crate::resource::NotifyEvent;

/// The notices a call's record calls for, each with the time its moment came, in order. A call
/// that never needed approval calls for none. An unknown outcome that was settled before anyone
/// looked leaves no trace in the record, so it is due only while the call is still unknown.
pub fn notices(call: &Call) -> Vec<(NotifyEvent, Timestamp)> {
    let required = call.spec.required_approvals as usize;
    if required == 0 {
        return Vec::new();
    }
    let mut due = vec![(NotifyEvent::Waiting, call.created_at)];
    let decided = match (call.rejections.first(), call.approvals.get(required - 1)) {
        (Some(rejection), _) => Some(rejection.at),
        (None, Some(deciding)) => Some(deciding.at),
        (None, None) => None,
    };
    if let Some(at) = decided {
        due.push((NotifyEvent::Decided, at));
    }
    match call.state {
        CallState::Expired => due.push((NotifyEvent::Expired, call.updated_at)),
        CallState::OutcomeUnknown => due.push((NotifyEvent::OutcomeUnknown, call.updated_at)),
        _ => {}
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{CallId, NewCall, PrincipalChain, Verdict};
    use crate::mode::ApprovalMode;

    fn call(required: u32) -> Call {
        let spec = NewCall {
            id: CallId("call_1".into()),
            tenant: "acme".into(),
            tool: "bank.transfer".into(),
            arguments: "{}".into(),
            args_sha256: "00".into(),
            chain: PrincipalChain {
                end_user: None,
                agent: "bot".into(),
                a2a_peer: None,
                people: vec![],
            },
            requested_mode: None,
            effective_mode: ApprovalMode::Destructive,
            highest_mode: ApprovalMode::Destructive,
            policy_decision_id: "d".into(),
            tool_generation: 1,
            policy_generation: 0,
            idempotency_key: None,
            retry_safe: false,
            required_approvals: required,
            expires_at: 1_000,
            approval_valid_ms: 100,
            context_id: None,
            trace_parent: None,
        };
        Call::new(spec, 10)
    }

    fn verdict(who: &str, at: Timestamp) -> Verdict {
        Verdict {
            principal: who.into(),
            person: None,
            at,
            note: String::new(),
        }
    }

    #[test]
    fn a_call_without_approval_calls_for_nothing() {
        assert!(notices(&call(0)).is_empty());
    }

    #[test]
    fn a_pending_call_is_waiting_from_its_proposal() {
        assert_eq!(notices(&call(1)), vec![(NotifyEvent::Waiting, 10)]);
    }

    #[test]
    fn decided_comes_with_the_approval_that_reached_n() {
        let mut c = call(2);
        c.approvals.push(verdict("ann", 20));
        assert_eq!(notices(&c), vec![(NotifyEvent::Waiting, 10)]);
        c.approvals.push(verdict("bea", 30));
        c.state = CallState::Succeeded;
        assert_eq!(
            notices(&c),
            vec![(NotifyEvent::Waiting, 10), (NotifyEvent::Decided, 30)]
        );
    }

    #[test]
    fn a_rejection_decides_at_once() {
        let mut c = call(2);
        c.rejections.push(verdict("ann", 25));
        c.state = CallState::Rejected;
        assert_eq!(
            notices(&c),
            vec![(NotifyEvent::Waiting, 10), (NotifyEvent::Decided, 25)]
        );
    }

    #[test]
    fn expiry_and_unknown_outcomes_are_due_at_their_change() {
        let mut c = call(1);
        c.state = CallState::Expired;
        c.updated_at = 1_000;
        assert_eq!(
            notices(&c),
            vec![(NotifyEvent::Waiting, 10), (NotifyEvent::Expired, 1_000)]
        );
        let mut c = call(1);
        c.approvals.push(verdict("ann", 20));
        c.state = CallState::OutcomeUnknown;
        c.updated_at = 50;
        assert_eq!(
            notices(&c),
            vec![
                (NotifyEvent::Waiting, 10),
                (NotifyEvent::Decided, 20),
                (NotifyEvent::OutcomeUnknown, 50)
            ]
        );
    }
}
