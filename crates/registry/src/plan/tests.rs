use super::*;
use crate::call::CallState;
use crate::command::{Command, Proposal, Response};
use crate::documents;
use serde_json::json;
use uuid::Uuid;

/// The shipped gateway example, plus a read-only tool and one the policy denies.
fn registry() -> Registry {
    let mut text = String::new();
    for file in [
        include_str!("../../../../examples/gateway/tenants.yaml"),
        include_str!("../../../../examples/gateway/tools.yaml"),
        include_str!("../../../../examples/gateway/policy.yaml"),
        include_str!("../../../../examples/gateway/skills.yaml"),
    ] {
        text.push_str("\n---\n");
        text.push_str(file);
    }
    text.push_str(
        "\n---\napiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {name: billing.get_payment}\n\
         spec: {annotations: {readOnlyHint: true}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {name: billing.delete_customer}\n\
         spec: {approvalMode: destructive, categories: [payments]}\n",
    );
    let parsed = documents::parse("gateway", &text);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    let mut registry = Registry::new();
    let proposal = Proposal {
        request_id: Uuid::from_u128(1),
        at: 0,
        command: Command::Put {
            resources: parsed.into_resources(),
        },
    };
    registry.apply(1, &proposal).unwrap();
    registry
}

fn request<'a>(principal: &'a str, tool: &'a str, args: &'a Value) -> CallRequest<'a> {
    CallRequest {
        id: CallId::from_random(99),
        at: 1_000,
        tenant: "globex",
        principal,
        end_user: Some("john"),
        a2a_peer: None,
        tool,
        arguments: args,
        idempotency_key: None,
        requested_mode: None,
    }
}

#[test]
fn a_small_refund_is_lowered_to_delegated_and_needs_two_approvals() {
    let r = registry();
    let args = json!({"payment_id": "pay_ABCDEFGH", "amount": 250, "currency": "EUR"});
    let plan = plan_call(&r, &request("support-bot", "billing.create_refund", &args)).unwrap();
    assert_eq!(plan.decision.effective, ApprovalMode::Delegated);
    assert_eq!(plan.call.highest_mode, ApprovalMode::Destructive);
    assert_eq!(plan.decision.rule.as_ref().unwrap().rule, "small-refunds");
    assert_eq!(plan.call.required_approvals, 2);
    assert!(plan.replicated);
    assert!(
        plan.call.retry_safe,
        "idempotentHint and an upstream that honours keys"
    );
    assert_eq!(plan.call.expires_at, 1_000 + 3_600_000);
    assert_eq!(
        plan.call.arguments,
        r#"{"amount":250,"currency":"EUR","payment_id":"pay_ABCDEFGH"}"#
    );
}

#[test]
fn a_large_refund_stays_destructive() {
    let r = registry();
    let args = json!({"payment_id": "pay_ABCDEFGH", "amount": 20000});
    let plan = plan_call(&r, &request("support-bot", "billing.create_refund", &args)).unwrap();
    assert_eq!(plan.decision.effective, ApprovalMode::Destructive);
    assert_eq!(plan.decision.rule, None);
}

#[test]
fn arguments_outside_the_constraints_are_refused_by_name() {
    let r = registry();
    let args = json!({"payment_id": "nope", "amount": 60000, "currency": "GBP"});
    let err = plan_call(&r, &request("support-bot", "billing.create_refund", &args)).unwrap_err();
    let PlanError::InvalidArguments(problems) = err else {
        panic!("{err}")
    };
    let named: Vec<&str> = problems.iter().map(|p| p.argument.as_str()).collect();
    assert_eq!(
        named,
        ["/amount", "/currency", "/payment_id"],
        "{problems:?}"
    );
}

#[test]
fn only_agents_of_the_tenant_may_call() {
    let r = registry();
    let args = json!({});
    let err = plan_call(&r, &request("alice", "billing.get_payment", &args)).unwrap_err();
    assert!(matches!(err, PlanError::NotAnAgent { .. }), "{err}");
    let mut other = request("support-bot", "billing.get_payment", &args);
    other.tenant = "acme";
    assert!(matches!(
        plan_call(&r, &other),
        Err(PlanError::UnknownTenant(_))
    ));
}

#[test]
fn unknown_and_denied_tools_are_refused() {
    let r = registry();
    let args = json!({});
    assert!(matches!(
        plan_call(&r, &request("support-bot", "billing.nothing", &args)),
        Err(PlanError::UnknownTool(_))
    ));
    assert!(matches!(
        plan_call(
            &r,
            &request("support-bot", "billing.delete_customer", &args)
        ),
        Err(PlanError::Refused(Refusal::Denied { .. }))
    ));
}

#[test]
fn a_read_only_intent_cannot_act() {
    let r = registry();
    let args = json!({"payment_id": "pay_ABCDEFGH", "amount": 1});
    let err = plan_call(
        &r,
        &request("readonly-auditor", "billing.create_refund", &args),
    )
    .unwrap_err();
    assert!(
        matches!(err, PlanError::Refused(Refusal::AboveIntent { .. })),
        "{err}"
    );
    assert!(
        plan_call(
            &r,
            &request("readonly-auditor", "billing.get_payment", &json!({}))
        )
        .is_ok()
    );
}

#[test]
fn read_only_calls_without_a_key_stay_off_raft() {
    let r = registry();
    let args = json!({"id": "pay_1"});
    let plan = plan_call(&r, &request("support-bot", "billing.get_payment", &args)).unwrap();
    assert_eq!(
        plan.decision.effective,
        ApprovalMode::ReadOnly,
        "trusted annotations"
    );
    assert!(!plan.replicated);
    let mut keyed = request("support-bot", "billing.get_payment", &args);
    keyed.idempotency_key = Some("k");
    assert!(plan_call(&r, &keyed).unwrap().replicated);
}

#[test]
fn a_planned_call_goes_through_approval_to_completion() {
    let mut r = registry();
    let args = json!({"payment_id": "pay_ABCDEFGH", "amount": 250});
    let plan = plan_call(&r, &request("support-bot", "billing.create_refund", &args)).unwrap();
    let id = plan.call.id.clone();
    let hash = plan.call.args_sha256.clone();
    let mut index = 1;
    let mut run = |r: &mut Registry, at: u64, command: Command| {
        command.validate().unwrap();
        index += 1;
        r.apply(
            index,
            &Proposal {
                request_id: Uuid::from_u128(u128::from(index)),
                at,
                command,
            },
        )
    };
    run(
        &mut r,
        1_000,
        Command::Place {
            tenant: "globex".into(),
            home: 1,
            epoch: 1,
        },
    )
    .unwrap();
    let proposed = run(
        &mut r,
        1_000,
        Command::Propose {
            call: Box::new(plan.call),
        },
    )
    .unwrap();
    assert_eq!(
        proposed,
        Response::Call {
            call_id: id.clone(),
            state: CallState::Pending
        }
    );
    for approver in ["alice", "bob"] {
        run(
            &mut r,
            2_000,
            Command::Approve {
                user: None,
                call_id: id.clone(),
                approver: approver.into(),
                args_sha256: hash.clone(),
                note: String::new(),
            },
        )
        .unwrap();
    }
    assert_eq!(r.call(&id).unwrap().state, CallState::Approved);
    run(
        &mut r,
        3_000,
        Command::Claim {
            call_id: id.clone(),
            node: 1,
            epoch: 1,
            claim_id: "c".into(),
            replaces_unsent: None,
        },
    )
    .unwrap();
    assert_eq!(r.call(&id).unwrap().state, CallState::Executing);
}

#[test]
fn a_skill_resolves_to_tools_by_category_minus_policy_denials() {
    let r = registry();
    let tools = r.resolve_skill_tools("globex", "refund-evidence").unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.tool.as_str()).collect();
    assert!(names.contains(&"billing.create_refund"), "{tools:?}");
    // A payments tool by its declared categories, kept out by the deny patterns.
    assert!(!names.contains(&"billing.delete_customer"), "{tools:?}");
    let (categories, _) = crate::classify::tool_categories(
        "billing.delete_customer",
        r.tool("globex", "billing.delete_customer").unwrap().0,
    );
    assert!(categories.contains(&"payments".to_owned()));
    assert!(r.resolve_skill_tools("globex", "no-such-skill").is_none());
}

#[test]
fn cached_validators_decide_as_fresh_ones_and_follow_a_changed_tool() {
    let mut r = registry();
    let validators = Validators::new(100);
    let good = json!({"payment_id": "pay_ABCDEFGH", "amount": 250, "currency": "EUR"});
    let bad = json!({"payment_id": "nope", "amount": 60000, "currency": "GBP"});
    for args in [&good, &bad, &good] {
        let req = request("support-bot", "billing.create_refund", args);
        let fresh = plan_call(&r, &req).map(|p| p.call);
        let cached = plan_call_with(&r, &req, &validators).map(|p| p.call);
        assert_eq!(fresh, cached);
    }
    // A new declaration of the tool is a new generation: its schema, not the cached one, holds.
    let strict = documents::parse(
        "strict",
        "apiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {name: billing.create_refund, tenant: globex}\n\
         spec: {approvalMode: destructive, inputSchema: {type: object, required: [reason]}}\n",
    );
    r.apply(
        2,
        &Proposal {
            request_id: Uuid::from_u128(2),
            at: 0,
            command: Command::Put {
                resources: strict.into_resources(),
            },
        },
    )
    .unwrap();
    let req = request("support-bot", "billing.create_refund", &good);
    assert!(matches!(
        plan_call_with(&r, &req, &validators),
        Err(PlanError::InvalidArguments(_))
    ));
}

fn delegated<'a>(user: &'a str, tool: &'a str, args: &'a Value) -> CallRequest<'a> {
    CallRequest {
        end_user: Some(user),
        a2a_peer: Some("support-bot"),
        ..request("support-bot", tool, args)
    }
}

/// The example registry plus a policy that keeps approvers (alice, bob) off refunds.
fn registry_with_approver_policy() -> Registry {
    let mut r = registry();
    let parsed = documents::parse(
        "approvers",
        "apiVersion: gatehouse.dev/v1\nkind: Policy\nmetadata: {name: approvers, tenant: globex}\n\
         spec: {roles: [approver], deny: [billing.create_refund]}\n",
    );
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    let proposal = Proposal {
        request_id: Uuid::from_u128(2),
        at: 0,
        command: Command::Put {
            resources: parsed.into_resources(),
        },
    };
    r.apply(2, &proposal).unwrap();
    r
}

#[test]
fn a_delegated_call_checks_its_end_user_against_the_policies_of_the_users_roles() {
    let r = registry_with_approver_policy();
    let refund = json!({"payment_id": "pay_ABCDEFGH", "amount": 250});
    // Without the approvers' policy alice (approver, admin) may call what the peer may.
    plan_call(
        &registry(),
        &delegated("alice", "billing.create_refund", &refund),
    )
    .unwrap();
    // With it, the peer may, she may not.
    let err = plan_call(&r, &delegated("alice", "billing.create_refund", &refund)).unwrap_err();
    match err {
        PlanError::Refused(Refusal::UserNotPermitted { ref user, ref why }) => {
            assert_eq!(user, "alice");
            assert!(matches!(**why, Refusal::Denied { .. }), "{why}");
        }
        other => panic!("expected the user to be refused, got {other}"),
    }
    // alice may still read a payment: nothing denies it to her roles.
    let none = json!({});
    plan_call(&r, &delegated("alice", "billing.get_payment", &none)).unwrap();
}

#[test]
fn a_delegated_call_for_a_user_unknown_to_the_tenant_is_refused() {
    let r = registry();
    let none = json!({});
    // john is only the user support-bot's key is bound to: an agent acting for him is not him.
    for user in ["mallory", "john"] {
        let err = plan_call(&r, &delegated(user, "billing.get_payment", &none)).unwrap_err();
        assert!(
            matches!(err, PlanError::Refused(Refusal::UnknownUser { user: ref u, .. }) if u == user),
            "{err}"
        );
    }
    // The same user through the agent's own front (no A2A peer) is not checked: the agent is.
    let direct = CallRequest {
        end_user: Some("mallory"),
        ..request("support-bot", "billing.get_payment", &none)
    };
    plan_call(&r, &direct).unwrap();
}
