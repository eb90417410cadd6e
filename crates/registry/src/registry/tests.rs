use super::*;
use crate::call::{CallState, NewCall, Outcome, PrincipalChain};
use crate::command::{Change, ResourceChange};
use crate::documents;
use crate::mode::ApprovalMode;
use crate::resource::{
    API_VERSION, Level, Metadata, Object, PrincipalSpec, Role, SkillScope, TenantSpec,
    ToolOverrides,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

const FIXTURE: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: bot}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000001"
  roles: {acme: [agent]}
  user: john
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: alice}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000002"
  roles: {acme: [approver]}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: bob}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000003"
  roles: {acme: [approver]}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: john-approver}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000004"
  roles: {acme: [approver]}
  user: john
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {name: billing}
spec: {type: http, url: "http://127.0.0.1:9/"}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: billing.refund, tenant: acme}
spec:
  approvalMode: destructive
  inputSchema: {type: object}
"#;

struct Harness {
    registry: Registry,
    index: u64,
    clock: u64,
    next_request: u128,
}

impl Harness {
    fn new() -> Self {
        let mut h = Harness {
            registry: Registry::new(),
            index: 0,
            clock: 1_000_000,
            next_request: 1,
        };
        let resources = documents::parse("fixture.yaml", FIXTURE).into_resources();
        h.ok(Command::Put { resources });
        h.ok(Command::Place {
            tenant: "acme".into(),
            home: 1,
            epoch: 1,
        });
        h
    }

    fn proposal(&mut self, command: Command) -> Proposal {
        self.next_request += 1;
        self.clock += 10;
        Proposal {
            request_id: Uuid::from_u128(self.next_request),
            at: self.clock,
            command,
        }
    }

    /// As a proposer does: validate, then propose and apply.
    fn run(&mut self, command: Command) -> Result<Response, ApplyError> {
        command.validate()?;
        let p = self.proposal(command);
        self.index += 1;
        self.registry.apply(self.index, &p)
    }

    fn ok(&mut self, command: Command) -> Response {
        self.run(command).expect("command applies")
    }

    /// Runs a command that must be refused, and checks it changed nothing.
    fn refused(&mut self, command: Command) -> ApplyError {
        let before = self.registry.state.clone();
        let err = self.run(command).expect_err("command is refused");
        assert_eq!(
            self.registry.state, before,
            "a refused command changed the state"
        );
        err
    }

    fn propose(&mut self, key: Option<&str>, args: &str, required: u32) -> CallId {
        self.propose_with(key, args, required, |_| {})
    }

    /// Proposes the harness's call as `edit` changes it.
    fn propose_with(
        &mut self,
        key: Option<&str>,
        args: &str,
        required: u32,
        edit: impl FnOnce(&mut NewCall),
    ) -> CallId {
        let id = CallId::from_random(self.next_request + 1000);
        let mut call = NewCall {
            id: id.clone(),
            tenant: "acme".into(),
            tool: "billing.refund".into(),
            arguments: args.into(),
            args_sha256: crate::canonical::sha256_hex(args.as_bytes()),
            chain: PrincipalChain {
                people: Vec::new(),
                end_user: Some("john".into()),
                agent: "bot".into(),
                a2a_peer: None,
            },
            requested_mode: None,
            effective_mode: if required == 0 {
                ApprovalMode::LocalWrite
            } else {
                ApprovalMode::Destructive
            },
            highest_mode: ApprovalMode::Destructive,
            policy_decision_id: "pd_test".into(),
            tool_generation: 1,
            policy_generation: 0,
            idempotency_key: key.map(str::to_owned),
            retry_safe: false,
            required_approvals: required,
            expires_at: self.clock + 60_000,
            approval_valid_ms: 30_000,
            context_id: None,
            trace_parent: None,
        };
        edit(&mut call);
        match self.ok(Command::Propose {
            call: Box::new(call),
        }) {
            Response::Call { call_id, .. } | Response::Existing { call_id, .. } => call_id,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn approve(&mut self, id: &CallId, who: &str) -> Result<Response, ApplyError> {
        self.approve_as(id, who, None)
    }

    /// Approves as `who` signed in with a token about `user`.
    fn approve_as(
        &mut self,
        id: &CallId,
        who: &str,
        user: Option<&str>,
    ) -> Result<Response, ApplyError> {
        let hash = self.registry.call(id).unwrap().spec.args_sha256.clone();
        self.run(Command::Approve {
            user: user.map(str::to_owned),
            call_id: id.clone(),
            approver: who.into(),
            args_sha256: hash,
            note: "ok".into(),
        })
    }

    fn state_of(&self, id: &CallId) -> CallState {
        self.registry.call(id).unwrap().state
    }

    fn claim(
        &mut self,
        id: &CallId,
        node: u64,
        epoch: u64,
        claim: &str,
    ) -> Result<Response, ApplyError> {
        self.run(Command::Claim {
            call_id: id.clone(),
            node,
            epoch,
            claim_id: claim.into(),
            replaces_unsent: None,
        })
    }
}

fn done() -> Outcome {
    Outcome::Succeeded {
        output_sha256: "ab".repeat(32),
        output_len: 2,
        result: Some("{}".into()),
    }
}

fn tenant(name: &str, display: &str) -> Resource {
    Resource::Tenant(Object {
        api_version: API_VERSION.into(),
        metadata: Metadata {
            name: name.into(),
            tenant: None,
            labels: BTreeMap::new(),
        },
        spec: TenantSpec {
            display_name: Some(display.into()),
            description: String::new(),
        },
    })
}

#[test]
fn generations_grow_on_change_only() {
    let mut h = Harness::new();
    let first = h.ok(Command::Put {
        resources: vec![tenant("globex", "Globex")],
    });
    let again = h.ok(Command::Put {
        resources: vec![tenant("globex", "Globex")],
    });
    let changed = h.ok(Command::Put {
        resources: vec![tenant("globex", "Globex Corp")],
    });
    let summary = |r: Response| match r {
        Response::Resources { changes } => changes
            .into_iter()
            .map(|c| (c.change, c.generation))
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(summary(first), [(Change::Created, 1)]);
    assert_eq!(summary(again), [(Change::Unchanged, 1)]);
    assert_eq!(summary(changed), [(Change::Updated, 2)]);
}

#[test]
fn a_recreated_resource_never_reuses_a_generation() {
    let mut h = Harness::new();
    h.ok(Command::Put {
        resources: vec![tenant("globex", "G")],
    });
    h.ok(Command::Delete {
        keys: vec![tenant("globex", "G").key()],
    });
    let again = h.ok(Command::Put {
        resources: vec![tenant("globex", "G")],
    });
    assert!(
        matches!(again, Response::Resources { changes } if changes[0] == ResourceChange {
        key: tenant("globex", "G").key(), change: Change::Created, generation: 2 })
    );
}

#[test]
fn a_batch_with_one_bad_resource_changes_nothing() {
    let mut h = Harness::new();
    let text = FIXTURE.replace(
        "billing.refund, tenant: acme",
        "billing.refund, tenant: nobody",
    );
    let orphan = documents::parse("t.yaml", &text)
        .into_resources()
        .pop()
        .unwrap();
    let err = h.refused(Command::Put {
        resources: vec![tenant("globex", "G"), orphan],
    });
    assert!(matches!(err, ApplyError::NotFound { .. }), "{err}");
    assert!(h.registry.get(&tenant("globex", "G").key()).is_none());
}

/// Apply refuses a batch naming one resource twice even when it reaches the log unchecked (a
/// proposer of another version, a hand-made entry), and the first copy is not kept either.
#[test]
fn a_batch_naming_one_resource_twice_is_refused_whole_at_apply() {
    let mut h = Harness::new();
    let before = h.registry.state.clone();
    let twice = h.proposal(Command::Put {
        resources: vec![
            tenant("globex", "G"),
            tenant("initech", "I"),
            tenant("globex", "G2"),
        ],
    });
    let err = h
        .registry
        .apply(100, &twice)
        .expect_err("a repeated key is refused");
    assert!(
        matches!(&err, ApplyError::Refused { reason } if reason.contains("Tenant/globex")),
        "{err}"
    );
    assert_eq!(
        h.registry.state, before,
        "a refused batch changed the state"
    );
}

#[test]
fn invalid_resources_are_refused_before_proposal() {
    let mut bad = tenant("x", "x");
    if let Resource::Tenant(t) = &mut bad {
        t.metadata.name = "Not A Name".into();
    }
    let err = Command::Put {
        resources: vec![tenant("globex", "G"), bad],
    }
    .validate()
    .unwrap_err();
    assert!(
        matches!(err, ApplyError::Invalid { ref problems, .. } if problems[0].field == "metadata.name"),
        "{err}"
    );
}

#[test]
fn apply_does_not_rerun_validation_on_committed_entries() {
    // A committed entry is applied as it is, even where this version's checks would now refuse
    // it: every node must reach the same state from the same log.
    let mut h = Harness::new();
    let mut renamed = tenant("x", "x");
    if let Resource::Tenant(t) = &mut renamed {
        t.metadata.name = "Legacy Name".into();
    }
    let p = h.proposal(Command::Put {
        resources: vec![renamed],
    });
    assert!(h.registry.apply(1_000, &p).is_ok());
}

#[test]
fn resources_of_a_missing_tenant_are_refused() {
    let mut h = Harness::new();
    let text = FIXTURE.replace(
        "billing.refund, tenant: acme",
        "billing.refund, tenant: nobody",
    );
    let tool = documents::parse("t.yaml", &text)
        .into_resources()
        .pop()
        .unwrap();
    let err = h.refused(Command::Put {
        resources: vec![tool],
    });
    assert!(err.to_string().contains("tenant nobody"), "{err}");
}

#[test]
fn a_tenant_in_use_cannot_be_deleted() {
    let mut h = Harness::new();
    let err = h.refused(Command::Delete {
        keys: vec![tenant("acme", "").key()],
    });
    assert!(matches!(err, ApplyError::InUse { .. }), "{err}");

    // Its resources of every kind count; deleted in the same batch, they are out of the way.
    let skill = documents::parse(
        "skill.yaml",
        "apiVersion: gatehouse.dev/v1\nkind: Skill\nmetadata: {name: tone, tenant: acme}\n\
         spec:\n  scope: {type: tenant, tenant: acme}\n  instructions: Be brief.\n",
    )
    .into_resources();
    h.ok(Command::Put { resources: skill });
    let mut keys: Vec<ResourceKey> = Kind::ALL
        .into_iter()
        .flat_map(|kind| h.registry.list(kind, Some(Some("acme")), None))
        .map(|stored| stored.resource.key())
        .collect();
    let kinds: BTreeSet<Kind> = keys.iter().map(|k| k.kind).collect();
    assert!(
        kinds.len() > 1,
        "the fixture gives acme resources of several kinds"
    );
    let last = keys.pop().unwrap();
    keys.push(tenant("acme", "").key());
    let err = h.refused(Command::Delete { keys: keys.clone() });
    assert!(matches!(err, ApplyError::InUse { .. }), "{err}");
    keys.push(last);
    h.ok(Command::Delete { keys });
    assert!(!h.registry.tenant_exists("acme"));
}

#[test]
fn n_of_m_approvals_then_claim_and_complete() {
    let mut h = Harness::new();
    let id = h.propose(None, r#"{"amount":5}"#, 2);
    assert_eq!(h.state_of(&id), CallState::Pending);
    h.approve(&id, "alice").unwrap();
    assert_eq!(h.state_of(&id), CallState::Pending, "one of two approvals");
    // Nothing is claimed before the approvals are in.
    assert!(matches!(
        h.claim(&id, 1, 1, "c1"),
        Err(ApplyError::WrongState { .. })
    ));
    h.approve(&id, "bob").unwrap();
    assert_eq!(h.state_of(&id), CallState::Approved);
    h.claim(&id, 1, 1, "c1").unwrap();
    assert_eq!(h.state_of(&id), CallState::Executing);
    let err = h.refused(Command::Claim {
        call_id: id.clone(),
        node: 1,
        epoch: 1,
        claim_id: "c2".into(),
        replaces_unsent: None,
    });
    assert!(
        matches!(err, ApplyError::WrongState { .. }),
        "at most one live claim: {err}"
    );
    let err = h.refused(Command::Complete {
        call_id: id.clone(),
        claim_id: "c2".into(),
        outcome: done(),
    });
    assert!(matches!(err, ApplyError::ClaimMismatch { .. }));
    h.ok(Command::Complete {
        call_id: id.clone(),
        claim_id: "c1".into(),
        outcome: done(),
    });
    assert_eq!(h.state_of(&id), CallState::Succeeded);
}

#[test]
fn a_claim_its_claimant_never_sent_may_be_replaced_by_that_claimant_only() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    h.approve(&id, "alice").unwrap();
    h.claim(&id, 1, 1, "c1").unwrap();
    let reclaim = |node, claim: &str, unsent: &str| Command::Claim {
        call_id: id.clone(),
        node,
        epoch: node,
        claim_id: claim.into(),
        replaces_unsent: Some(unsent.into()),
    };
    // Naming a claim that is not the live one proves nothing.
    let err = h.refused(reclaim(1, "c2", "c0"));
    assert!(matches!(err, ApplyError::WrongState { .. }), "{err}");
    // Another node cannot know what node 1 sent, even as the new home.
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    let err = h.refused(reclaim(2, "c2", "c1"));
    assert!(matches!(err, ApplyError::WrongState { .. }), "{err}");
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 1,
        epoch: 3,
    });
    h.ok(Command::Claim {
        call_id: id.clone(),
        node: 1,
        epoch: 3,
        claim_id: "c2".into(),
        replaces_unsent: Some("c1".into()),
    });
    assert_eq!(
        h.registry
            .call(&id)
            .unwrap()
            .claim
            .as_ref()
            .unwrap()
            .claim_id,
        "c2"
    );
    // The replaced claim is gone: it cannot report, the new one can.
    let err = h.refused(Command::Complete {
        call_id: id.clone(),
        claim_id: "c1".into(),
        outcome: done(),
    });
    assert!(matches!(err, ApplyError::ClaimMismatch { .. }), "{err}");
    h.ok(Command::Complete {
        call_id: id.clone(),
        claim_id: "c2".into(),
        outcome: done(),
    });
    assert_eq!(h.state_of(&id), CallState::Succeeded);
}

#[test]
fn nobody_in_the_chain_and_no_non_approver_may_approve() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    let hash = h.registry.call(&id).unwrap().spec.args_sha256.clone();
    let approve = |who: &str| Command::Approve {
        user: None,
        call_id: id.clone(),
        approver: who.into(),
        args_sha256: hash.clone(),
        note: String::new(),
    };
    assert!(matches!(
        h.refused(approve("bot")),
        ApplyError::NotApprover { .. }
    ));
    assert!(
        matches!(
            h.refused(approve("john-approver")),
            ApplyError::InChain { .. }
        ),
        "bound to the end user"
    );
    assert!(matches!(
        h.refused(approve("mallory")),
        ApplyError::NotApprover { .. }
    ));
    h.ok(approve("alice"));
    assert_eq!(h.state_of(&id), CallState::Approved);
}

#[test]
fn an_approval_is_bound_to_the_argument_hash() {
    let mut h = Harness::new();
    let id = h.propose(None, r#"{"amount":5}"#, 1);
    let err = h.refused(Command::Approve {
        user: None,
        call_id: id.clone(),
        approver: "alice".into(),
        args_sha256: crate::canonical::sha256_hex(br#"{"amount":50000}"#),
        note: String::new(),
    });
    assert!(matches!(err, ApplyError::ArgsMismatch { .. }));
}

#[test]
fn one_rejection_vetoes_and_a_replayed_approval_is_refused() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 2);
    h.approve(&id, "alice").unwrap();
    assert!(matches!(
        h.approve(&id, "alice"),
        Err(ApplyError::AlreadyDecided { .. })
    ));
    h.ok(Command::Reject {
        user: None,
        call_id: id.clone(),
        approver: "bob".into(),
        reason: "no".into(),
    });
    assert_eq!(h.state_of(&id), CallState::Rejected);
    assert!(matches!(
        h.approve(&id, "bob"),
        Err(ApplyError::WrongState { .. })
    ));
}

#[test]
fn only_the_chain_may_cancel() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    let cancel = |who: &str| Command::Cancel {
        user: None,
        call_id: id.clone(),
        principal: who.into(),
        reason: "r".into(),
    };
    assert!(matches!(
        h.refused(cancel("alice")),
        ApplyError::NotInChain { .. }
    ));
    h.ok(cancel("bot"));
    assert_eq!(h.state_of(&id), CallState::Cancelled);
}

#[test]
fn expiry_needs_the_deadline_and_the_homes_epoch() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    let expire = |node, epoch| Command::Expire {
        call_id: id.clone(),
        node,
        epoch,
    };
    assert!(matches!(
        h.refused(expire(1, 1)),
        ApplyError::NotExpired { .. }
    ));
    h.clock += 120_000;
    assert!(matches!(
        h.refused(expire(2, 1)),
        ApplyError::StaleEpoch { .. }
    ));
    assert!(matches!(
        h.refused(expire(1, 0)),
        ApplyError::StaleEpoch { .. }
    ));
    h.ok(expire(1, 1));
    assert_eq!(h.state_of(&id), CallState::Expired);
}

#[test]
fn a_claim_after_a_policy_change_fails_the_call() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    h.approve(&id, "alice").unwrap();
    let policy = documents::parse(
        "p.yaml",
        "apiVersion: gatehouse.dev/v1\nkind: Policy\nmetadata: {name: p, tenant: acme}\nspec: {deny: [\"x.*\"]}\n",
    )
    .into_resources();
    h.ok(Command::Put { resources: policy });
    h.claim(&id, 1, 1, "c1").unwrap();
    let call = h.registry.call(&id).unwrap();
    assert_eq!(call.state, CallState::Failed);
    assert!(call.note.as_deref().unwrap().contains("policy changed"));
    assert!(call.claim.is_none(), "nothing was claimed, so nothing runs");
}

#[test]
fn a_lost_home_leaves_a_non_idempotent_call_unknown_until_resolved() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 0);
    h.claim(&id, 1, 1, "old").unwrap();
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    // The new home may not run it again.
    assert!(matches!(
        h.claim(&id, 2, 2, "new"),
        Err(ApplyError::WrongState { .. })
    ));
    h.ok(Command::MarkUnknown {
        call_id: id.clone(),
        node: 2,
        epoch: 2,
    });
    assert_eq!(h.state_of(&id), CallState::OutcomeUnknown);
    let err = h.refused(Command::Resolve {
        user: None,
        call_id: id.clone(),
        approver: "alice".into(),
        outcome: done(),
        note: " ".into(),
    });
    assert!(matches!(err, ApplyError::Refused { .. }));
    h.ok(Command::Resolve {
        user: None,
        call_id: id.clone(),
        approver: "alice".into(),
        outcome: done(),
        note: "ran, checked the ledger".into(),
    });
    assert_eq!(h.state_of(&id), CallState::Succeeded);
}

#[test]
fn the_old_claimant_may_still_report_late() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 0);
    h.claim(&id, 1, 1, "old").unwrap();
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    h.ok(Command::MarkUnknown {
        call_id: id.clone(),
        node: 2,
        epoch: 2,
    });
    h.ok(Command::Complete {
        call_id: id.clone(),
        claim_id: "old".into(),
        outcome: Outcome::Failed {
            error: "timeout".into(),
        },
    });
    assert_eq!(h.state_of(&id), CallState::Failed);
}

#[test]
fn a_retry_safe_call_may_be_reclaimed_by_a_new_home() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 0);
    h.registry.state.calls.get_mut(&id).unwrap().spec.retry_safe = true;
    h.claim(&id, 1, 1, "old").unwrap();
    assert!(
        h.claim(&id, 2, 1, "again").is_err(),
        "not by a node that is not home"
    );
    h.ok(Command::Place {
        tenant: "acme".into(),
        home: 2,
        epoch: 2,
    });
    h.claim(&id, 2, 2, "new").unwrap();
    assert_eq!(
        h.registry
            .call(&id)
            .unwrap()
            .claim
            .as_ref()
            .unwrap()
            .claim_id,
        "new"
    );
}

#[test]
fn a_home_that_restarted_may_declare_its_own_claim_lost() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 0);
    h.claim(&id, 1, 1, "before-restart").unwrap();
    h.ok(Command::MarkUnknown {
        call_id: id.clone(),
        node: 1,
        epoch: 1,
    });
    assert_eq!(h.state_of(&id), CallState::OutcomeUnknown);

    let safe = h.propose(None, r#"{"n":2}"#, 0);
    h.registry
        .state
        .calls
        .get_mut(&safe)
        .unwrap()
        .spec
        .retry_safe = true;
    h.claim(&safe, 1, 1, "before-restart-2").unwrap();
    h.claim(&safe, 1, 1, "after-restart").unwrap();
    assert_eq!(
        h.registry
            .call(&safe)
            .unwrap()
            .claim
            .as_ref()
            .unwrap()
            .claim_id,
        "after-restart"
    );
}

#[test]
fn idempotency_keys_return_the_first_call_or_refuse_other_arguments() {
    let mut h = Harness::new();
    let first = h.propose(Some("k1"), r#"{"a":1}"#, 1);
    let again = h.propose(Some("k1"), r#"{"a":1}"#, 1);
    assert_eq!(first, again);
    assert_eq!(h.registry.calls_of("acme").count(), 1);
    let id = CallId::from_random(42);
    let mut other = h.registry.call(&first).unwrap().spec.clone();
    other.id = id;
    other.arguments = r#"{"a":2}"#.into();
    other.args_sha256 = crate::canonical::sha256_hex(other.arguments.as_bytes());
    let err = h.refused(Command::Propose {
        call: Box::new(other),
    });
    assert!(matches!(err, ApplyError::IdempotencyConflict { .. }));
}

#[test]
fn a_retried_request_id_is_applied_once() {
    let mut h = Harness::new();
    let p = h.proposal(Command::Put {
        resources: vec![tenant("globex", "G")],
    });
    let first = h.registry.apply(100, &p).unwrap();
    let update = h.proposal(Command::Put {
        resources: vec![tenant("globex", "G2")],
    });
    h.registry.apply(101, &update).unwrap();
    let retried = h.registry.apply(102, &p).unwrap();
    assert_eq!(first, retried);
    let key = tenant("globex", "").key();
    assert_eq!(
        h.registry.get(&key).unwrap().generation,
        2,
        "the retry did not apply again"
    );
}

#[test]
fn purge_forgets_finished_calls_and_their_keys() {
    let mut h = Harness::new();
    let id = h.propose(Some("k"), "{}", 1);
    h.ok(Command::Cancel {
        user: None,
        call_id: id.clone(),
        principal: "bot".into(),
        reason: String::new(),
    });
    let open = h.propose(None, r#"{"b":1}"#, 1);
    let cut = h.clock + 1;
    let Response::Purged { calls, .. } = h.ok(Command::Purge { before: cut }) else {
        panic!()
    };
    assert_eq!(calls, 1);
    assert!(h.registry.call(&id).is_none());
    assert!(
        h.registry.call(&open).is_some(),
        "unfinished calls are kept"
    );
    let fresh = h.propose(Some("k"), r#"{"other":true}"#, 1);
    assert_ne!(fresh, id, "the key is free again");
}

#[test]
fn effective_mode_above_the_maximum_is_refused() {
    let mut h = Harness::new();
    let id = CallId::from_random(7);
    let mut call = {
        let first = h.propose(None, "{}", 1);
        h.registry.call(&first).unwrap().spec.clone()
    };
    call.id = id;
    call.highest_mode = ApprovalMode::Network;
    assert!(matches!(
        h.refused(Command::Propose {
            call: Box::new(call)
        }),
        ApplyError::Refused { .. }
    ));
}

#[test]
fn cascade_change_marks_follow_skill_writes() {
    let mut h = Harness::new();
    let before = h.registry.cascade_changed_at("acme");
    let skill = Resource::Skill(Object {
        api_version: API_VERSION.into(),
        metadata: Metadata {
            name: "s".into(),
            tenant: None,
            labels: BTreeMap::new(),
        },
        spec: crate::resource::SkillSpec {
            scope: SkillScope {
                level: Level::Tenant,
                tenant: Some("acme".into()),
                tool_pattern: None,
                user: None,
            },
            priority: 0,
            key: None,
            instructions: "Be brief.".into(),
            required_capabilities: vec![],
            tool_overrides: ToolOverrides::default(),
            enabled: true,
        },
    });
    h.ok(Command::Put {
        resources: vec![skill],
    });
    assert!(h.registry.cascade_changed_at("acme") > before);
    assert_eq!(h.registry.cascade_changed_at("other"), 0);
    let r = h.registry.resolve_skills(&crate::cascade::Query {
        tenant: "acme".into(),
        tool: "a.b".into(),
        user: None,
    });
    assert_eq!(r.resolved_context, "Be brief.");
}

#[test]
fn snapshot_bytes_round_trip_to_the_same_digest() {
    let mut h = Harness::new();
    h.propose(Some("k"), "{}", 1);
    let copy = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
    assert_eq!(copy.digest(), h.registry.digest());
    assert_eq!(copy, h.registry);
}

/// Applied request ids, placements and generations live in hash maps, whose order differs from map to map:
/// two nodes that applied the same proposals must still write the same bytes, each map in key
/// order as the ordered maps before them wrote it (so older snapshots read back to the same
/// bytes).
#[test]
fn two_nodes_write_the_same_bytes_with_hashed_maps_in_key_order() {
    let names: Vec<String> = (0..64).map(|i| format!("t{i:02}")).collect();
    let proposals: Vec<Proposal> = names
        .iter()
        .enumerate()
        .flat_map(|(i, name)| {
            let put = Command::Put {
                resources: vec![tenant(name, "T")],
            };
            let place = Command::Place {
                tenant: name.clone(),
                home: 1 + i as u64 % 3,
                epoch: 1,
            };
            [put, place].map(|command| Proposal {
                request_id: Uuid::new_v4(),
                at: 1_000 + i as u64,
                command,
            })
        })
        .collect();
    let mut one = Registry::new();
    let mut two = Registry::new();
    for (i, p) in proposals.iter().enumerate() {
        one.apply(i as u64 + 1, p).unwrap();
    }
    // Another node's maps: filled in another order (each tenant still put before it is
    // placed), and hashed with other keys.
    for (i, pair) in proposals.chunks(2).enumerate().rev() {
        for p in pair {
            two.apply(i as u64 + 1, p).unwrap();
        }
    }
    // A retried proposal changes nothing but the applied index, which then matches `one`'s.
    two.apply(proposals.len() as u64, &proposals[0]).unwrap();
    let bytes = one.to_bytes();
    assert_eq!(bytes, two.to_bytes());
    let text = String::from_utf8(bytes.clone()).unwrap();
    let mut ids: Vec<String> = proposals.iter().map(|p| p.request_id.to_string()).collect();
    ids.sort();
    for (what, keys) in [("request ids", &ids), ("placements", &names)] {
        let at: Vec<usize> = keys
            .iter()
            .map(|k| {
                text.rfind(&format!("\"{k}\":"))
                    .expect("every key is written")
            })
            .collect();
        assert!(at.is_sorted(), "{what} are written in key order");
    }
    let (_, state): (u64, serde_json::Value) = serde_json::from_slice(&bytes).unwrap();
    let generations: Vec<ResourceKey> = state["generations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| serde_json::from_value(pair[0].clone()).unwrap())
        .collect();
    assert_eq!(generations.len(), names.len());
    assert!(
        generations.is_sorted(),
        "generations are written in key order"
    );
    assert_eq!(Registry::from_bytes(&bytes).unwrap().to_bytes(), bytes);
}

/// A snapshot copies the registry between two applies and serialises the copy later: what
/// applies after the copy must not show in it.
#[test]
fn a_copy_keeps_the_state_it_was_taken_at() {
    let mut h = Harness::new();
    h.ok(Command::Put {
        resources: vec![tenant("globex", "Globex")],
    });
    let copy = h.registry.clone();
    let then = copy.to_bytes();
    h.ok(Command::Put {
        resources: vec![
            tenant("globex", "Globex Corp"),
            tenant("initech", "Initech"),
        ],
    });
    h.ok(Command::Place {
        tenant: "initech".into(),
        home: 2,
        epoch: 1,
    });
    h.ok(Command::Delete {
        keys: vec![tenant("globex", "").key()],
    });
    h.ok(Command::Purge { before: u64::MAX });
    assert_eq!(copy.to_bytes(), then);
    assert_ne!(h.registry.to_bytes(), then);
    assert!(copy.tenant_exists("globex") && !copy.tenant_exists("initech"));
}

fn principal(name: &str, role: Role) -> Resource {
    Resource::Principal(Object {
        api_version: API_VERSION.into(),
        metadata: Metadata {
            name: name.into(),
            tenant: None,
            labels: BTreeMap::new(),
        },
        spec: PrincipalSpec {
            api_key_sha256: Some("0".repeat(64)),
            roles: BTreeMap::from([("acme".to_owned(), vec![role])]),
            ..Default::default()
        },
    })
}

/// A small command language for the determinism property: each step is one of a handful of
/// commands, some of which will be refused depending on what came before.
fn arb_step() -> impl Strategy<Value = (u8, u8)> {
    (0u8..9, 0u8..4)
}

/// The tenant a placement step names: mostly the harness's own, sometimes one the steps put.
fn placed(arg: u8) -> String {
    if arg < 2 {
        "acme".into()
    } else {
        format!("t{arg}")
    }
}

fn step_command(h: &Harness, kind: u8, arg: u8) -> Command {
    let call_ids: Vec<CallId> = h.registry.state.calls.keys().cloned().collect();
    let pick = |n: u8| {
        call_ids
            .get(n as usize % call_ids.len().max(1))
            .cloned()
            .unwrap_or(CallId("none".into()))
    };
    match kind {
        0 => Command::Put {
            resources: vec![tenant(&format!("t{arg}"), &format!("T{arg}"))],
        },
        1 => Command::Put {
            resources: vec![principal(&format!("p{arg}"), Role::Approver)],
        },
        2 => Command::Delete {
            keys: vec![tenant(&format!("t{arg}"), "").key()],
        },
        3 => Command::Approve {
            user: None,
            call_id: pick(arg),
            approver: format!("p{}", arg % 2),
            args_sha256: h
                .registry
                .state
                .calls
                .get(&pick(arg))
                .map(|c| c.spec.args_sha256.clone())
                .unwrap_or_default(),
            note: String::new(),
        },
        4 => Command::Reject {
            user: None,
            call_id: pick(arg),
            approver: "alice".into(),
            reason: String::new(),
        },
        5 => Command::Claim {
            call_id: pick(arg),
            node: 1,
            epoch: 1,
            claim_id: format!("c{arg}"),
            replaces_unsent: None,
        },
        6 => Command::Complete {
            call_id: pick(arg),
            claim_id: format!("c{arg}"),
            outcome: done(),
        },
        7 => Command::Place {
            tenant: placed(arg),
            home: u64::from(arg),
            epoch: u64::from(arg) + 1,
        },
        _ => Command::StartMove {
            tenant: placed(arg),
            epoch: u64::from(arg),
            to: u64::from(arg) + 1,
        },
    }
}

proptest! {
    #[test]
    fn apply_is_deterministic(steps in prop::collection::vec(arb_step(), 1..40), calls in 0u8..4) {
        let run = || {
            let mut h = Harness::new();
            for i in 0..calls {
                h.propose(None, &format!("{{\"n\":{i}}}"), u32::from(i % 2));
            }
            let mut outcomes = Vec::new();
            for &(kind, arg) in &steps {
                let command = step_command(&h, kind, arg);
                outcomes.push(h.run(command).map_err(|e| e.to_string()));
            }
            // What apply keeps in step (key, call and placement indexes) is what a reload
            // of the same state derives from scratch.
            let reloaded = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
            assert_eq!(reloaded, h.registry, "derived indexes drifted from the state");
            (h.registry.to_bytes(), h.registry.digest(), outcomes)
        };
        let (bytes_a, digest_a, out_a) = run();
        let (bytes_b, digest_b, out_b) = run();
        prop_assert_eq!(&out_a, &out_b);
        prop_assert_eq!(digest_a, digest_b);
        prop_assert!(bytes_a == bytes_b, "state bytes differ");
        // And a snapshot of the state carries exactly that digest.
        let restored = Registry::from_bytes(&bytes_a).unwrap();
        prop_assert_eq!(restored.to_bytes(), bytes_a);
    }
}

#[test]
fn principals_are_found_by_key_digest_and_forgotten_on_delete() {
    let mut h = Harness::new();
    let digest = format!("{:064x}", 2);
    assert_eq!(
        h.registry.principal_by_key(&digest).map(|(n, _)| n),
        Some("alice")
    );
    let restored = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
    assert_eq!(
        restored.principal_by_key(&digest).map(|(n, _)| n),
        Some("alice"),
        "rebuilt on load"
    );
    let key = ResourceKey {
        kind: Kind::Principal,
        tenant: None,
        name: "alice".into(),
    };
    h.ok(Command::Delete { keys: vec![key] });
    assert!(h.registry.principal_by_key(&digest).is_none());
}

#[test]
fn a_node_id_is_admitted_once() {
    let mut h = Harness::new();
    h.ok(Command::AdmitNode {
        node: 4,
        addr: "127.0.0.1:7004".into(),
    });
    assert!(h.registry.node_admitted(4));
    let err = h.refused(Command::AdmitNode {
        node: 4,
        addr: "127.0.0.1:7104".into(),
    });
    assert!(matches!(err, ApplyError::AlreadyExists { .. }), "{err}");
}

#[test]
fn a_batch_answers_each_proposal_on_its_own() {
    let mut h = Harness::new();
    let good = h.proposal(Command::Put {
        resources: vec![tenant("globex", "G")],
    });
    let bad = h.proposal(Command::Delete {
        keys: vec![tenant("nobody", "").key()],
    });
    let batch = Command::Batch {
        proposals: vec![good.clone(), bad],
    };
    let Response::Batch { results } = h.ok(batch) else {
        panic!("not a batch answer")
    };
    assert!(matches!(results[0], Ok(Response::Resources { .. })));
    assert!(matches!(results[1], Err(ApplyError::NotFound { .. })));
    assert!(h.registry.get(&tenant("globex", "").key()).is_some());
    // Its proposals keep their own request ids: replayed alone, the good one applies once.
    let again = h.registry.apply(10_000, &good).unwrap();
    assert_eq!(Ok(again), results[0].clone());
    let nested = Command::Batch {
        proposals: vec![h.proposal(Command::Batch {
            proposals: vec![good],
        })],
    };
    assert!(nested.validate().is_err());
}

/// A batch retried under its own request id (its answer was lost, or its leader changed) applies
/// none of its proposals twice, answers each as the first time, and leaves only its proposals'
/// ids behind: keeping the batch's whole answer as well would double what it leaves.
#[test]
fn a_retried_batch_answers_from_its_proposals_and_keeps_no_answer_of_its_own() {
    let mut h = Harness::new();
    let puts: Vec<Proposal> = ["globex", "initech"]
        .iter()
        .map(|name| {
            h.proposal(Command::Put {
                resources: vec![tenant(name, "T")],
            })
        })
        .collect();
    let batch = h.proposal(Command::Batch {
        proposals: puts.clone(),
    });
    let first = h.registry.apply(20_000, &batch).unwrap();
    let generations: Vec<u64> = ["globex", "initech"]
        .iter()
        .map(|name| h.registry.get(&tenant(name, "").key()).unwrap().generation)
        .collect();

    let again = h.registry.apply(20_001, &batch).unwrap();
    assert_eq!(again, first, "the retry answers as the first time");
    let after: Vec<u64> = ["globex", "initech"]
        .iter()
        .map(|name| h.registry.get(&tenant(name, "").key()).unwrap().generation)
        .collect();
    assert_eq!(after, generations, "nothing was applied twice");
    assert!(
        !h.registry.state.requests.contains_key(&batch.request_id),
        "the batch's own id is not kept"
    );
    for put in &puts {
        assert!(h.registry.state.requests.contains_key(&put.request_id));
    }
}

/// A batch with a refusal keeps its answer: retried after the state changed so that the refused
/// proposal would now be taken, it still answers as the first time and applies nothing, as a
/// node that kept every batch's answer (an earlier version, in a rolling upgrade) does.
#[test]
fn a_retried_batch_with_a_refusal_answers_as_the_first_time_though_the_state_changed() {
    let mut h = Harness::new();
    let doomed = h.proposal(Command::Delete {
        keys: vec![tenant("globex", "").key()],
    });
    let put = h.proposal(Command::Put {
        resources: vec![tenant("initech", "T")],
    });
    let batch = h.proposal(Command::Batch {
        proposals: vec![doomed, put],
    });
    let first = h.registry.apply(30_000, &batch).unwrap();
    let Response::Batch { results } = &first else {
        panic!("not a batch answer")
    };
    assert!(matches!(results[0], Err(ApplyError::NotFound { .. })));
    assert!(h.registry.state.requests.contains_key(&batch.request_id));

    h.ok(Command::Put {
        resources: vec![tenant("globex", "G")],
    });
    let again = h.registry.apply(30_002, &batch).unwrap();
    assert_eq!(again, first, "the retry answers as the first time");
    assert!(
        h.registry.get(&tenant("globex", "").key()).is_some(),
        "the refused delete was not taken on the retry"
    );
}

#[test]
fn listing_resumes_right_after_the_last_key_served() {
    let mut h = Harness::new();
    h.ok(Command::Put {
        resources: (0..5).map(|i| tenant(&format!("t{i}"), "T")).collect(),
    });
    let all: Vec<String> = h
        .registry
        .list(Kind::Tenant, None, None)
        .map(|s| s.resource.name().to_owned())
        .collect();
    assert_eq!(all, ["acme", "t0", "t1", "t2", "t3", "t4"]);
    let after = tenant("t1", "").key();
    let rest: Vec<&str> = h
        .registry
        .list(Kind::Tenant, None, Some(&after))
        .map(|s| s.resource.name())
        .collect();
    assert_eq!(rest, ["t2", "t3", "t4"]);
    // A key of another kind or tenant bounds the range correctly on either side.
    let earlier = ResourceKey {
        kind: Kind::Tenant,
        tenant: None,
        name: String::new(),
    };
    assert_eq!(
        h.registry
            .list(Kind::Tool, Some(Some("acme")), Some(&earlier))
            .count(),
        1
    );
    let later = ResourceKey {
        kind: Kind::Skill,
        tenant: None,
        name: String::new(),
    };
    assert_eq!(
        h.registry
            .list(Kind::Tool, Some(Some("acme")), Some(&later))
            .count(),
        0
    );
}

#[test]
fn a_tenants_calls_are_indexed_through_propose_purge_and_reload() {
    let mut h = Harness::new();
    let kept = h.propose(None, r#"{"n":1}"#, 1);
    let done = h.propose(None, r#"{"n":2}"#, 1);
    h.ok(Command::Reject {
        user: None,
        call_id: done.clone(),
        approver: "alice".into(),
        reason: "no".into(),
    });
    let ids = |r: &Registry| {
        r.calls_of("acme")
            .map(|c| c.id().clone())
            .collect::<Vec<_>>()
    };
    let mut both = vec![kept.clone(), done.clone()];
    both.sort();
    assert_eq!(ids(&h.registry), both);
    assert_eq!(h.registry.calls_of("nobody").count(), 0);
    let open: Vec<CallId> = h
        .registry
        .unfinished_calls()
        .map(|c| c.id().clone())
        .collect();
    assert_eq!(open, std::slice::from_ref(&kept));
    h.ok(Command::Purge { before: u64::MAX });
    assert_eq!(ids(&h.registry), [kept]);
    let restored = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
    assert_eq!(restored, h.registry, "the index is rebuilt on load");
}

#[test]
fn jwt_principals_are_found_by_exact_subject_then_issuer_wide() {
    let mut h = Harness::new();
    let resources = documents::parse(
        "jwt.yaml",
        r#"
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: idp-anyone}
spec:
  jwt: {issuer: "https://idp.example", subject: "*"}
  roles: {acme: [agent]}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: idp-carol}
spec:
  jwt: {issuer: "https://idp.example", subject: carol}
  roles: {acme: [approver]}
"#,
    )
    .into_resources();
    h.ok(Command::Put { resources });
    let name = |r: &Registry, iss: &str, sub: &str| {
        r.principal_by_jwt(iss, sub).map(|(n, _)| n.to_owned())
    };
    assert_eq!(
        name(&h.registry, "https://idp.example", "carol").as_deref(),
        Some("idp-carol")
    );
    assert_eq!(
        name(&h.registry, "https://idp.example", "dave").as_deref(),
        Some("idp-anyone"),
        "an unknown subject falls back to the issuer-wide principal"
    );
    assert_eq!(name(&h.registry, "https://other.example", "carol"), None);
    let restored = Registry::from_bytes(&h.registry.to_bytes()).unwrap();
    assert_eq!(
        name(&restored, "https://idp.example", "carol").as_deref(),
        Some("idp-carol"),
        "rebuilt on load"
    );
    h.ok(Command::Delete {
        keys: vec![ResourceKey {
            kind: Kind::Principal,
            tenant: None,
            name: "idp-anyone".into(),
        }],
    });
    assert_eq!(name(&h.registry, "https://idp.example", "dave"), None);
    assert_eq!(
        name(&h.registry, "https://idp.example", "carol").as_deref(),
        Some("idp-carol")
    );
}

#[test]
fn a_registry_for_a_new_cluster_forgets_old_nodes_and_rehomes_tenants() {
    let mut h = Harness::new();
    h.ok(Command::AdmitNode {
        node: 1,
        addr: "127.0.0.1:7001".into(),
    });
    h.ok(Command::StartMove {
        tenant: "acme".into(),
        epoch: 1,
        to: 2,
    });
    let pending = h.propose(None, r#"{"amount":5}"#, 1);
    let before = h.registry.clone();
    let mut restored = Registry::from_bytes(&before.to_bytes()).unwrap();
    restored.for_new_cluster(7);

    assert_eq!(restored.admitted_nodes().count(), 0);
    assert!(!restored.node_admitted(1));
    assert_eq!(
        restored.placement("acme"),
        Some(Placement {
            home: 7,
            epoch: 2,
            moving_to: None
        })
    );
    // Everything else is as it was: resources, keys, calls, the applied index.
    assert_eq!(restored.applied_index(), before.applied_index());
    assert_eq!(
        restored
            .list(Kind::Principal, None, None)
            .collect::<Vec<_>>(),
        before.list(Kind::Principal, None, None).collect::<Vec<_>>()
    );
    let alice = "0000000000000000000000000000000000000000000000000000000000000002";
    assert_eq!(restored.principal_by_key(alice).map(|p| p.0), Some("alice"));
    assert_eq!(restored.call(&pending), before.call(&pending));
    assert_eq!(restored.unfinished_calls().count(), 1);

    // The restored node may admit itself, and approve the pending call as before.
    let mut h = Harness {
        registry: restored,
        index: h.index,
        clock: h.clock,
        next_request: h.next_request,
    };
    h.ok(Command::AdmitNode {
        node: 7,
        addr: "127.0.0.1:7007".into(),
    });
    h.approve(&pending, "alice").unwrap();
    assert_eq!(h.state_of(&pending), CallState::Approved);
}

mod identity;
mod placement;
mod webhooks;
