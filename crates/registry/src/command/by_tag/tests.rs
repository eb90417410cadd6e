use super::*;
use crate::call::PrincipalChain;
use crate::mode::ApprovalMode;
use crate::resource::{API_VERSION, Metadata, Object, TenantSpec};
use std::collections::BTreeMap;

fn call_id() -> CallId {
    CallId("call-1".into())
}

fn tenant(name: &str) -> Resource {
    Resource::Tenant(Object {
        api_version: API_VERSION.into(),
        metadata: Metadata {
            name: name.into(),
            tenant: None,
            labels: BTreeMap::from([("team".into(), "a \"quoted\" label".into())]),
        },
        spec: TenantSpec {
            display_name: Some("Acme".into()),
            description: "line one\nline two".into(),
        },
    })
}

fn new_call() -> NewCall {
    NewCall {
        id: call_id(),
        tenant: "acme".into(),
        tool: "billing.refund".into(),
        arguments: r#"{"amount":5}"#.into(),
        args_sha256: crate::canonical::sha256_hex(br#"{"amount":5}"#),
        chain: PrincipalChain {
            people: vec!["ann".into()],
            end_user: Some("john".into()),
            agent: "bot".into(),
            a2a_peer: None,
        },
        requested_mode: None,
        effective_mode: ApprovalMode::Destructive,
        highest_mode: ApprovalMode::Destructive,
        policy_decision_id: "pd_1".into(),
        tool_generation: 3,
        policy_generation: 2,
        idempotency_key: Some("key-1".into()),
        retry_safe: false,
        required_approvals: 2,
        expires_at: 60_000,
        approval_valid_ms: 30_000,
        context_id: None,
        trace_parent: None,
    }
}

fn succeeded() -> Outcome {
    Outcome::Succeeded {
        output_sha256: "ab".repeat(32),
        output_len: 12,
        result: Some("done".into()),
    }
}

/// One command of every variant, optional fields both present and absent where a variant has
/// them.
fn every_command() -> Vec<Command> {
    let proposal = |command| Proposal {
        request_id: uuid::Uuid::from_u128(7),
        at: 1_000,
        command,
    };
    let commands = vec![
        Command::Put {
            resources: vec![tenant("acme"), tenant("globex")],
        },
        Command::Delete {
            keys: vec![tenant("acme").key()],
        },
        Command::Propose {
            call: Box::new(new_call()),
        },
        Command::Approve {
            call_id: call_id(),
            approver: "ann".into(),
            user: Some("ann@example.com".into()),
            args_sha256: "00".repeat(32),
            note: "ok".into(),
        },
        Command::Approve {
            call_id: call_id(),
            approver: "ann".into(),
            user: None,
            args_sha256: "00".repeat(32),
            note: String::new(),
        },
        Command::Reject {
            call_id: call_id(),
            approver: "bob".into(),
            user: None,
            reason: "no".into(),
        },
        Command::Cancel {
            call_id: call_id(),
            principal: "bot".into(),
            user: Some("john".into()),
            reason: "changed my mind".into(),
        },
        Command::Expire {
            call_id: call_id(),
            node: 2,
            epoch: 4,
        },
        Command::Claim {
            call_id: call_id(),
            node: 1,
            epoch: 4,
            claim_id: "claim-1".into(),
            replaces_unsent: Some("claim-0".into()),
        },
        Command::Claim {
            call_id: call_id(),
            node: 1,
            epoch: 4,
            claim_id: "claim-1".into(),
            replaces_unsent: None,
        },
        Command::Complete {
            call_id: call_id(),
            claim_id: "claim-1".into(),
            outcome: succeeded(),
        },
        Command::MarkUnknown {
            call_id: call_id(),
            node: 3,
            epoch: 5,
        },
        Command::Resolve {
            call_id: call_id(),
            approver: "ann".into(),
            user: None,
            outcome: Outcome::Failed {
                error: "upstream said no".into(),
            },
            note: "checked by hand".into(),
        },
        Command::Place {
            tenant: "acme".into(),
            home: 2,
            epoch: 1,
        },
        Command::StartMove {
            tenant: "acme".into(),
            epoch: 1,
            to: 3,
        },
        Command::Purge { before: 500 },
        Command::AdmitNode {
            node: 4,
            addr: "127.0.0.4:7000".into(),
        },
        Command::LoadToolset {
            tenant: "acme".into(),
            principal: "bot".into(),
            user: Some("john".into()),
            toolset: "billing".into(),
            include_write_tools: true,
        },
        Command::Notified {
            tenant: "acme".into(),
            webhook: "ops".into(),
            notices: vec![(call_id(), NotifyEvent::ALL[0])],
        },
        Command::Batch {
            proposals: vec![
                proposal(Command::Put {
                    resources: vec![tenant("initech")],
                }),
                proposal(Command::Place {
                    tenant: "initech".into(),
                    home: 1,
                    epoch: 1,
                }),
            ],
        },
    ];
    for command in &commands {
        // A new variant fails to compile here: give it a sample above and a twin in `ByTag`.
        match command {
            Command::Put { .. }
            | Command::Delete { .. }
            | Command::Propose { .. }
            | Command::Approve { .. }
            | Command::Reject { .. }
            | Command::Cancel { .. }
            | Command::Expire { .. }
            | Command::Claim { .. }
            | Command::Complete { .. }
            | Command::MarkUnknown { .. }
            | Command::Resolve { .. }
            | Command::Place { .. }
            | Command::StartMove { .. }
            | Command::Purge { .. }
            | Command::AdmitNode { .. }
            | Command::LoadToolset { .. }
            | Command::Notified { .. }
            | Command::Batch { .. } => {}
        }
    }
    commands
}

/// The command's JSON with its `type` moved from first to last.
fn type_last(command: &Command) -> String {
    let written = serde_json::to_string(command).unwrap();
    let tag = serde_json::to_string(
        &serde_json::from_str::<serde_json::Value>(&written).unwrap()["type"],
    )
    .unwrap();
    let head = format!("{{\"type\":{tag}");
    let rest = written
        .strip_prefix(&head)
        .expect("the type is written first");
    match rest.strip_prefix(',') {
        Some(fields) => format!("{{{},\"type\":{tag}}}", fields.strip_suffix('}').unwrap()),
        None => format!("{{\"type\":{tag}}}"),
    }
}

#[test]
fn every_command_reads_back_as_it_was_written() {
    for command in every_command() {
        let written = serde_json::to_vec(&command).unwrap();
        let read: Command = serde_json::from_slice(&written).unwrap();
        assert_eq!(read, command, "{}", String::from_utf8_lossy(&written));
    }
}

#[test]
fn a_command_whose_type_comes_last_reads_the_same() {
    for command in every_command() {
        let written = type_last(&command);
        assert!(!written.starts_with("{\"type\""), "{written}");
        let read: Command = serde_json::from_str(&written).unwrap();
        assert_eq!(read, command, "{written}");
    }
}

#[test]
fn commands_inside_a_proposal_read_back_from_a_value_too() {
    // A `Value` hands its keys over sorted, not as written: `type` is rarely first.
    for command in every_command() {
        let value = serde_json::to_value(Proposal {
            request_id: uuid::Uuid::from_u128(1),
            at: 5,
            command: command.clone(),
        })
        .unwrap();
        let read: Proposal = serde_json::from_value(value).unwrap();
        assert_eq!(read.command, command);
    }
}

/// Why `text` is refused as a command.
fn refusal(text: &str) -> String {
    serde_json::from_str::<Command>(text)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_command_without_a_known_type_is_refused_by_name() {
    let unknown = refusal(r#"{"type":"drop_everything","tenant":"acme"}"#);
    assert!(
        unknown.contains("unknown variant `drop_everything`"),
        "{unknown}"
    );
    let unknown_last = refusal(r#"{"tenant":"acme","type":"drop"}"#);
    assert!(
        unknown_last.contains("unknown variant `drop`"),
        "{unknown_last}"
    );
    let missing = refusal(r#"{"tenant":"acme"}"#);
    assert!(missing.contains("missing field `type`"), "{missing}");
    let not_a_map = refusal(r#"["place"]"#);
    assert!(not_a_map.contains("invalid type"), "{not_a_map}");
}

#[test]
fn a_command_missing_a_field_or_carrying_a_wrong_one_is_refused() {
    let missing = refusal(r#"{"type":"place","tenant":"acme","home":2}"#);
    assert!(missing.contains("missing field `epoch`"), "{missing}");
    let wrong = refusal(r#"{"type":"purge","before":"yesterday"}"#);
    assert!(wrong.contains("invalid type"), "{wrong}");
    let twice = refusal(r#"{"type":"purge","before":1,"before":2}"#);
    assert!(twice.contains("duplicate field `before`"), "{twice}");
}

#[test]
fn a_command_naming_its_type_twice_is_refused_either_way() {
    // A reader that keeps the last of two tags would see a `place` here; neither is applied.
    for text in [
        r#"{"type":"purge","before":1,"type":"place"}"#,
        r#"{"before":1,"type":"purge","type":"place"}"#,
    ] {
        let refused = refusal(text);
        assert!(
            refused.contains("duplicate field `type`"),
            "{text}: {refused}"
        );
    }
    let twice_later = refusal(r#"{"before":1,"type":"purge","before":2}"#);
    assert!(
        twice_later.contains("duplicate field `before`"),
        "{twice_later}"
    );
}
