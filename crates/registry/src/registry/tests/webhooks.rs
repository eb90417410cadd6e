//! Webhooks in the registry: when each was created, and the marks of notices given.

use super::*;
use crate::notify::NotifyEvent;
use crate::registry::MAX_WEBHOOKS_PER_TENANT;

const HOOK: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Webhook
metadata: {name: ops, tenant: acme}
spec: {url: "https://hooks.example/acme", credential: acme-hook, format: slack}
"#;

fn hook() -> Vec<Resource> {
    documents::parse("hook.yaml", HOOK).into_resources()
}

fn notified(id: &CallId, event: NotifyEvent) -> Command {
    Command::Notified {
        tenant: "acme".into(),
        webhook: "ops".into(),
        notices: vec![(id.clone(), event)],
    }
}

#[test]
fn a_webhook_remembers_when_it_was_created_until_deleted() {
    let mut h = Harness::new();
    h.ok(Command::Put { resources: hook() });
    let created = h.clock;
    let since = |h: &Harness| h.registry.webhooks().map(|w| w.since).collect::<Vec<_>>();
    assert_eq!(since(&h), [created]);

    // A change keeps the time; a delete and a new one starts again.
    let mut changed = hook();
    if let Resource::Webhook(w) = &mut changed[0] {
        w.spec.url = "https://hooks.example/other".into();
    }
    h.ok(Command::Put { resources: changed });
    assert_eq!(since(&h), [created]);
    h.ok(Command::Delete {
        keys: vec![hook()[0].key()],
    });
    assert!(since(&h).is_empty());
    h.ok(Command::Put { resources: hook() });
    assert_eq!(since(&h), [h.clock]);
}

#[test]
fn a_webhook_needs_a_tenant_that_exists() {
    let orphan = HOOK.replace("tenant: acme", "tenant: nobody");
    let resources = documents::parse("hook.yaml", &orphan).into_resources();
    assert!(matches!(
        h_refused(Command::Put { resources }),
        ApplyError::NotFound { .. }
    ));
    let shared = HOOK.replace(", tenant: acme", "");
    assert!(
        !documents::parse("hook.yaml", &shared).problems.is_empty(),
        "a webhook of no tenant is refused before it is proposed"
    );
}

fn h_refused(command: Command) -> ApplyError {
    Harness::new().refused(command)
}

#[test]
fn marks_are_kept_per_webhook_and_event_and_forgotten_with_the_call() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    assert!(!h.registry.notified(&id, "ops", NotifyEvent::Waiting));
    assert_eq!(
        h.ok(notified(&id, NotifyEvent::Waiting)),
        Response::Notified { marked: 1 }
    );
    assert_eq!(
        h.ok(notified(&id, NotifyEvent::Waiting)),
        Response::Notified { marked: 0 },
        "a second home's mark of the same notice changes nothing"
    );
    assert!(h.registry.notified(&id, "ops", NotifyEvent::Waiting));
    assert!(!h.registry.notified(&id, "ops", NotifyEvent::Decided));
    assert!(!h.registry.notified(&id, "other", NotifyEvent::Waiting));

    h.ok(Command::Cancel {
        user: None,
        call_id: id.clone(),
        principal: "bot".into(),
        reason: String::new(),
    });
    let cut = h.clock + 1;
    h.ok(Command::Purge { before: cut });
    assert!(!h.registry.notified(&id, "ops", NotifyEvent::Waiting));
}

#[test]
fn a_mark_never_lands_on_another_tenants_call_or_a_missing_one() {
    let mut h = Harness::new();
    let id = h.propose(None, "{}", 1);
    let before = h.registry.state.clone();
    let across = Command::Notified {
        tenant: "globex".into(),
        webhook: "ops".into(),
        notices: vec![
            (id.clone(), NotifyEvent::Waiting),
            (CallId("call_missing".into()), NotifyEvent::Waiting),
        ],
    };
    assert_eq!(h.ok(across), Response::Notified { marked: 0 });
    assert_eq!(h.registry.state.notified, before.notified);
}

#[test]
fn an_empty_or_oversized_mark_is_refused_before_proposal() {
    let empty = Command::Notified {
        tenant: "acme".into(),
        webhook: "ops".into(),
        notices: vec![],
    };
    assert!(empty.validate().is_err());
    let id = CallId("call_1".into());
    let huge = Command::Notified {
        tenant: "acme".into(),
        webhook: "ops".into(),
        notices: vec![(id, NotifyEvent::Waiting); crate::command::MAX_NOTICES + 1],
    };
    assert!(huge.validate().is_err());
}

#[test]
fn marks_survive_a_snapshot() {
    let mut h = Harness::new();
    h.ok(Command::Put { resources: hook() });
    let id = h.propose(None, "{}", 1);
    h.ok(notified(&id, NotifyEvent::Waiting));
    let bytes = h.registry.to_bytes();
    let restored = Registry::from_bytes(&bytes).unwrap();
    assert!(restored.notified(&id, "ops", NotifyEvent::Waiting));
    assert_eq!(
        restored.webhooks().map(|w| w.since).collect::<Vec<_>>(),
        h.registry.webhooks().map(|w| w.since).collect::<Vec<_>>()
    );
}

#[test]
fn a_tenant_has_at_most_sixteen_webhooks() {
    let mut h = Harness::new();
    let named = |n: usize| {
        documents::parse(
            "hook.yaml",
            &HOOK.replace("name: ops", &format!("name: ops{n}")),
        )
        .into_resources()
    };
    let first: Vec<Resource> = (0..MAX_WEBHOOKS_PER_TENANT).flat_map(named).collect();
    h.ok(Command::Put { resources: first });
    // Changing one that exists is fine; one more is not.
    h.ok(Command::Put {
        resources: named(0),
    });
    let err = h.refused(Command::Put {
        resources: named(MAX_WEBHOOKS_PER_TENANT),
    });
    assert!(err.to_string().contains("at most 16"), "{err}");
}
