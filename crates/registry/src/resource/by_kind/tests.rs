use super::*;
use crate::documents;
use std::collections::BTreeSet;

const WEBHOOK: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Webhook
metadata: {name: ops, tenant: acme}
spec: {url: "https://hooks.example/acme", credential: acme-hook, format: slack}
"#;

/// The example files' resources and a webhook: every kind at least once.
fn every_kind() -> Vec<Resource> {
    let files = [
        (
            "tenants.yaml",
            include_str!("../../../../../examples/gateway/tenants.yaml"),
        ),
        (
            "tools.yaml",
            include_str!("../../../../../examples/gateway/tools.yaml"),
        ),
        (
            "skills.yaml",
            include_str!("../../../../../examples/gateway/skills.yaml"),
        ),
        (
            "policy.yaml",
            include_str!("../../../../../examples/gateway/policy.yaml"),
        ),
        ("webhook.yaml", WEBHOOK),
    ];
    let mut resources = Vec::new();
    for (name, text) in files {
        let parsed = documents::parse(name, text);
        assert!(parsed.problems.is_empty(), "{name}: {:?}", parsed.problems);
        resources.extend(parsed.into_resources());
    }
    let kinds: BTreeSet<Kind> = resources.iter().map(|r| r.key().kind).collect();
    assert_eq!(
        kinds,
        Kind::ALL.into_iter().collect(),
        "a kind has no sample"
    );
    resources
}

#[test]
fn every_kind_reads_back_as_it_was_written() {
    for resource in every_kind() {
        let written = serde_json::to_string(&resource).unwrap();
        assert!(written.starts_with("{\"kind\":"), "{written}");
        let read: Resource = serde_json::from_str(&written).unwrap();
        assert_eq!(read, resource, "{written}");
    }
}

#[test]
fn a_resource_whose_kind_comes_later_reads_the_same() {
    for resource in every_kind() {
        // A `Value` hands its keys over sorted: `apiVersion` before `kind`.
        let value = serde_json::to_value(&resource).unwrap();
        let read: Resource = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(read, resource);
        // And as text, with `kind` last.
        let mut fields = value.as_object().unwrap().clone();
        let kind = fields.remove("kind").unwrap();
        let mut text = serde_json::to_string(&fields).unwrap();
        text.pop();
        text.push_str(&format!(",\"kind\":{kind}}}"));
        let read: Resource = serde_json::from_str(&text).unwrap();
        assert_eq!(read, resource, "{text}");
    }
}

/// Why `text` is refused as a resource.
fn refusal(text: &str) -> String {
    serde_json::from_str::<Resource>(text)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_resource_of_no_known_kind_or_none_is_refused() {
    let unknown = refusal(r#"{"kind":"Secret","apiVersion":"gatehouse.dev/v1"}"#);
    assert!(unknown.contains("unknown variant `Secret`"), "{unknown}");
    let unknown_later = refusal(r#"{"apiVersion":"gatehouse.dev/v1","kind":"Secret"}"#);
    assert!(
        unknown_later.contains("unknown variant `Secret`"),
        "{unknown_later}"
    );
    let missing = refusal(r#"{"apiVersion":"gatehouse.dev/v1"}"#);
    assert!(missing.contains("missing field `kind`"), "{missing}");
    let empty = refusal("{}");
    assert!(empty.contains("missing field `kind`"), "{empty}");
}

#[test]
fn an_error_in_a_spec_read_kind_first_names_its_field() {
    // Collected first, as serde reads an internally tagged enum, the error would say `.`.
    let text = r#"{"kind":"Tenant","apiVersion":"gatehouse.dev/v1","metadata":{"name":"acme"},"spec":{"displayName":5}}"#;
    let mut reader = serde_json::Deserializer::from_str(text);
    let error = serde_path_to_error::deserialize::<_, Resource>(&mut reader).unwrap_err();
    assert_eq!(error.path().to_string(), "spec.displayName");
    assert!(
        error
            .inner()
            .to_string()
            .contains("invalid type: integer `5`"),
        "{error}"
    );
}

#[test]
fn a_resource_naming_its_kind_twice_is_refused_either_way() {
    // A reader that keeps the last of two kinds would see a principal here.
    let tenant = r#""apiVersion":"gatehouse.dev/v1","metadata":{"name":"acme"},"spec":{}"#;
    for text in [
        format!(r#"{{"kind":"Tenant",{tenant},"kind":"Principal"}}"#),
        format!(r#"{{{tenant},"kind":"Tenant","kind":"Principal"}}"#),
    ] {
        let refused = refusal(&text);
        assert!(
            refused.contains("duplicate field `kind`"),
            "{text}: {refused}"
        );
    }
    // The same document with one kind reads.
    let once: Resource = serde_json::from_str(&format!(r#"{{"kind":"Tenant",{tenant}}}"#)).unwrap();
    assert_eq!(once.key().kind, Kind::Tenant);
}
