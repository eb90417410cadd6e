use super::*;
use crate::mode::CapabilityClass;
use crate::resource::{ApprovalRequirement, ModeRule, ToolAnnotations};
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

fn tool(mode: Option<ApprovalMode>, class: Option<CapabilityClass>) -> ToolSpec {
    ToolSpec {
        idempotent: None,
        description: String::new(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        approval_mode: mode,
        capability_class: class,
        categories: vec![],
        toolset: None,
        constraints: BTreeMap::new(),
        http: None,
    }
}

fn rule(name: &str, tools: &str, when: Vec<Condition>, mode: ApprovalMode) -> ModeRule {
    ModeRule {
        name: name.into(),
        tools: tools.into(),
        when,
        mode,
    }
}

fn amount(op: CompareOp, v: i64) -> Condition {
    Condition {
        arg: "amount".into(),
        op,
        value: json!(v),
    }
}

struct Case {
    tool: ToolSpec,
    policies: Vec<(String, PolicySpec)>,
    roles: Vec<Role>,
    intent: Option<ApprovalMode>,
    trusted: bool,
}

impl Case {
    fn new(tool: ToolSpec) -> Self {
        Case {
            tool,
            policies: vec![],
            roles: vec![Role::Agent],
            intent: None,
            trusted: false,
        }
    }

    fn policy(mut self, name: &str, spec: PolicySpec) -> Self {
        self.policies.push((name.into(), spec));
        self
    }

    fn decide(&self, args: Value) -> Result<Decision, Refusal> {
        let policies: Vec<(&str, &PolicySpec)> =
            self.policies.iter().map(|(n, p)| (n.as_str(), p)).collect();
        let hash = crate::canonical::args_sha256(&args);
        decide(&PolicyInput {
            tenant: "acme",
            tool_name: "api.create",
            tool: &self.tool,
            tool_generation: 3,
            upstream_trusted: self.trusted,
            roles: &self.roles,
            intent: self.intent,
            args: &args,
            args_sha256: &hash,
            policies: &policies,
            policy_generation: 7,
        })
    }
}

fn lowering_policy() -> PolicySpec {
    PolicySpec {
        rules: vec![rule(
            "small-payments",
            "api.*",
            vec![amount(CompareOp::Le, 10_000)],
            ApprovalMode::Delegated,
        )],
        ..Default::default()
    }
}

#[test]
fn a_rule_lowers_destructive_to_delegated_under_its_condition() {
    let case = Case::new(tool(Some(ApprovalMode::Destructive), None))
        .policy("payments", lowering_policy());
    let small = case.decide(json!({"amount": 10_000})).unwrap();
    assert_eq!(small.effective, ApprovalMode::Delegated);
    assert_eq!(
        small.rule,
        Some(RuleRef {
            policy: "payments".into(),
            rule: "small-payments".into()
        })
    );
    let large = case.decide(json!({"amount": 10_001})).unwrap();
    assert_eq!(large.effective, ApprovalMode::Destructive);
    assert_eq!(large.rule, None);
    let missing = case.decide(json!({})).unwrap();
    assert_eq!(
        missing.effective,
        ApprovalMode::Destructive,
        "a missing argument keeps the mode high"
    );
}

#[test]
fn a_rule_never_raises_above_the_declared_maximum() {
    let raise = PolicySpec {
        rules: vec![rule("raise", "*", vec![], ApprovalMode::Destructive)],
        ..Default::default()
    };
    let d = Case::new(tool(Some(ApprovalMode::LocalWrite), None))
        .policy("p", raise)
        .decide(json!({}))
        .unwrap();
    assert_eq!(d.effective, ApprovalMode::LocalWrite);
    assert_eq!(d.rule, None);
    assert!(!d.needs_approval());
}

#[test]
fn the_lowest_matching_rule_wins() {
    let two = PolicySpec {
        rules: vec![
            rule("to-network", "*", vec![], ApprovalMode::Network),
            rule(
                "to-read",
                "api.create",
                vec![amount(CompareOp::Lt, 5)],
                ApprovalMode::ReadOnly,
            ),
        ],
        ..Default::default()
    };
    let case = Case::new(tool(Some(ApprovalMode::Destructive), None)).policy("p", two);
    assert_eq!(
        case.decide(json!({"amount": 1})).unwrap().effective,
        ApprovalMode::ReadOnly
    );
    assert_eq!(
        case.decide(json!({"amount": 9})).unwrap().effective,
        ApprovalMode::Network
    );
}

#[test]
fn untrusted_tools_without_a_declaration_are_destructive() {
    let mut t = tool(None, None);
    t.annotations = Some(ToolAnnotations {
        read_only_hint: Some(true),
        ..Default::default()
    });
    let mut case = Case::new(t);
    assert_eq!(
        case.decide(json!({})).unwrap().effective,
        ApprovalMode::Destructive
    );
    case.trusted = true;
    assert_eq!(
        case.decide(json!({})).unwrap().effective,
        ApprovalMode::ReadOnly
    );
}

#[test]
fn deny_beats_allow_and_allow_lists_restrict() {
    let deny = PolicySpec {
        allow: vec!["api.*".into()],
        deny: vec!["create".into()],
        ..Default::default()
    };
    let err = Case::new(tool(Some(ApprovalMode::ReadOnly), None))
        .policy("p", deny)
        .decide(json!({}))
        .unwrap_err();
    assert!(
        matches!(err, Refusal::Denied { ref pattern, .. } if pattern == "create"),
        "{err}"
    );
    let other = PolicySpec {
        allow: vec!["db.*".into()],
        ..Default::default()
    };
    let err = Case::new(tool(Some(ApprovalMode::ReadOnly), None))
        .policy("p", other)
        .decide(json!({}))
        .unwrap_err();
    assert_eq!(
        err,
        Refusal::NotAllowed {
            tool: "api.create".into()
        }
    );
}

#[test]
fn policies_for_other_roles_do_not_apply() {
    let approvers_only = PolicySpec {
        roles: vec![Role::Approver],
        deny: vec!["*".into()],
        ..Default::default()
    };
    let d = Case::new(tool(Some(ApprovalMode::ReadOnly), None))
        .policy("p", approvers_only)
        .decide(json!({}));
    assert!(d.is_ok());
}

#[test]
fn read_only_intent_refuses_every_call_above_read_only_whatever_its_class() {
    let classes = [
        None,
        Some(CapabilityClass::Observe),
        Some(CapabilityClass::Recall),
        Some(CapabilityClass::ThinkSupport),
        Some(CapabilityClass::Act),
        Some(CapabilityClass::Verify),
    ];
    for class in classes {
        for mode in ApprovalMode::ALL {
            let mut case = Case::new(tool(Some(mode), class));
            case.intent = Some(ApprovalMode::ReadOnly);
            let decided = case.decide(json!({}));
            if mode == ApprovalMode::ReadOnly {
                assert!(decided.is_ok(), "{class:?} {mode:?}: {decided:?}");
            } else {
                assert_eq!(
                    decided,
                    Err(Refusal::AboveIntent {
                        tool: "api.create".into(),
                        effective: mode,
                        intent: ApprovalMode::ReadOnly,
                    }),
                    "{class:?} {mode:?}"
                );
            }
        }
    }
}

#[test]
fn a_destructive_verify_tool_is_refused_under_read_only_intent() {
    // The finding: class `verify` was let through to a proposal.
    let mut case = Case::new(tool(
        Some(ApprovalMode::Destructive),
        Some(CapabilityClass::Verify),
    ));
    case.intent = Some(ApprovalMode::ReadOnly);
    let refusal = case.decide(json!({})).unwrap_err();
    assert!(
        refusal.to_string().contains("read_only intent")
            && refusal.to_string().contains("destructive"),
        "{refusal}"
    );
}

#[test]
fn a_rule_that_lowers_the_call_to_read_only_lets_it_through_the_intent() {
    let lowered = PolicySpec {
        rules: vec![rule(
            "small",
            "api.*",
            vec![amount(CompareOp::Le, 10)],
            ApprovalMode::ReadOnly,
        )],
        ..Default::default()
    };
    let mut case = Case::new(tool(
        Some(ApprovalMode::Destructive),
        Some(CapabilityClass::Act),
    ))
    .policy("p", lowered);
    case.intent = Some(ApprovalMode::ReadOnly);
    let d = case.decide(json!({"amount": 5})).unwrap();
    assert_eq!(d.effective, ApprovalMode::ReadOnly);
    assert!(matches!(
        case.decide(json!({"amount": 50})),
        Err(Refusal::AboveIntent { .. })
    ));
}

#[test]
fn an_intent_is_a_ceiling_at_any_level() {
    let mut case = Case::new(tool(Some(ApprovalMode::Network), None));
    case.intent = Some(ApprovalMode::LocalWrite);
    assert!(matches!(
        case.decide(json!({})),
        Err(Refusal::AboveIntent { .. })
    ));
    case.intent = Some(ApprovalMode::Network);
    assert!(case.decide(json!({})).is_ok());
}

#[test]
fn approvals_take_the_strictest_requirement() {
    let a = PolicySpec {
        approvals: Some(ApprovalRequirement {
            required: 2,
            ttl_seconds: Some(600),
            valid_seconds: None,
        }),
        ..Default::default()
    };
    let b = PolicySpec {
        approvals: Some(ApprovalRequirement {
            required: 1,
            ttl_seconds: Some(60),
            valid_seconds: Some(30),
        }),
        ..Default::default()
    };
    let d = Case::new(tool(Some(ApprovalMode::Destructive), None))
        .policy("a", a)
        .policy("b", b)
        .decide(json!({}))
        .unwrap();
    assert_eq!(
        (
            d.required_approvals,
            d.approval_ttl_seconds,
            d.approval_valid_seconds
        ),
        (2, 60, 30)
    );
}

#[test]
fn decision_ids_are_stable_and_follow_the_arguments() {
    let case = Case::new(tool(Some(ApprovalMode::Destructive), None));
    let a = case.decide(json!({"x": 1, "y": 2})).unwrap();
    let b = case.decide(json!({"y": 2, "x": 1.0})).unwrap();
    let c = case.decide(json!({"x": 2})).unwrap();
    assert_eq!(a.id, b.id);
    assert_ne!(a.id, c.id);
    assert!(a.id.starts_with("pd_"));
}

fn arb_mode() -> impl Strategy<Value = ApprovalMode> {
    prop::sample::select(ApprovalMode::ALL.to_vec())
}

fn arb_class() -> impl Strategy<Value = CapabilityClass> {
    prop::sample::select(vec![
        CapabilityClass::Observe,
        CapabilityClass::Recall,
        CapabilityClass::ThinkSupport,
        CapabilityClass::Act,
        CapabilityClass::Verify,
    ])
}

fn arb_rule() -> impl Strategy<Value = ModeRule> {
    (
        arb_mode(),
        prop::sample::select(vec!["*", "api.*", "create", "db.*"]),
        prop::option::of((
            prop::sample::select(vec![CompareOp::Le, CompareOp::Gt, CompareOp::Eq]),
            -5i64..5,
        )),
    )
        .prop_map(|(mode, tools, cond)| {
            rule(
                "r",
                tools,
                cond.map(|(op, v)| amount(op, v)).into_iter().collect(),
                mode,
            )
        })
}

/// A case whose one policy holds `rules`, named apart.
fn ruled(tool: ToolSpec, mut rules: Vec<ModeRule>, trusted: bool) -> Case {
    for (i, r) in rules.iter_mut().enumerate() {
        r.name = format!("r{i}");
    }
    let mut case = Case::new(tool).policy(
        "p",
        PolicySpec {
            rules,
            ..Default::default()
        },
    );
    case.trusted = trusted;
    case
}

proptest! {
    #[test]
    fn effective_mode_never_exceeds_the_declared_maximum(
        declared in prop::option::of(arb_mode()),
        rules in prop::collection::vec(arb_rule(), 0..6),
        amount_arg in -6i64..6,
        trusted in any::<bool>(),
    ) {
        let case = ruled(tool(declared, None), rules, trusted);
        let d = case.decide(json!({"amount": amount_arg})).unwrap();
        prop_assert!(d.effective <= d.declared);
        prop_assert!(ApprovalMode::ALL.contains(&d.effective));
        if let Some(mode) = declared {
            prop_assert_eq!(d.declared, mode);
        }
    }

    #[test]
    fn an_intent_refuses_exactly_the_calls_whose_effective_mode_is_above_it(
        declared in prop::option::of(arb_mode()),
        class in prop::option::of(arb_class()),
        intent in arb_mode(),
        rules in prop::collection::vec(arb_rule(), 0..6),
        amount_arg in -6i64..6,
        trusted in any::<bool>(),
    ) {
        let mut case = ruled(tool(declared, class), rules, trusted);
        let args = json!({"amount": amount_arg});
        let free = case.decide(args.clone()).unwrap();
        case.intent = Some(intent);
        match case.decide(args) {
            Ok(d) => {
                prop_assert!(d.effective <= intent);
                prop_assert_eq!(d, free);
            }
            Err(Refusal::AboveIntent { effective, .. }) => {
                prop_assert!(effective > intent);
                prop_assert_eq!(effective, free.effective);
            }
            Err(other) => prop_assert!(false, "unexpected refusal {other}"),
        }
    }
}

/// The id as it was first defined: the hash of the `Value` the inputs make, as text.
fn id_from_a_value(input: &DecisionIdInput<'_>) -> String {
    let value = json!({
        "tenant": input.tenant,
        "tool": input.tool,
        "toolGeneration": input.tool_generation,
        "policyGeneration": input.policy_generation,
        "args": input.args,
        "roles": input.roles,
        "effective": input.effective,
        "rule": input.rule,
    });
    format!(
        "pd_{}",
        &crate::canonical::sha256_hex(value.to_string().as_bytes())[..24]
    )
}

proptest! {
    #[test]
    fn a_decision_id_is_the_same_hash_a_value_of_its_inputs_gives(
        tenant in "[a-z\"\\\\é-]{0,12}",
        tool in "[a-z.\u{1F600}]{0,12}",
        args in "[0-9a-f]{64}",
        tool_generation in any::<u64>(),
        policy_generation in any::<u64>(),
        roles in proptest::sample::subsequence(vec![Role::Agent, Role::Approver, Role::Admin, Role::Operator], 0..4),
        effective in proptest::sample::select(ApprovalMode::ALL.to_vec()),
        rule in proptest::option::of(("[a-z-]{1,8}", "[a-z \"]{1,8}")),
    ) {
        let rule = rule.map(|(policy, rule)| RuleRef { policy, rule });
        let input = DecisionIdInput {
            args: &args,
            effective,
            policy_generation,
            roles: &roles,
            rule: &rule,
            tenant: &tenant,
            tool: &tool,
            tool_generation,
        };
        prop_assert_eq!(decision_id(&input), id_from_a_value(&input));
    }
}
