use super::*;
use std::collections::HashMap;

fn wire(kind: &str, name: &str, tenant: Option<&str>, spec_json: &str) -> pb::Resource {
    pb::Resource {
        kind: kind.into(),
        name: name.into(),
        tenant: tenant.map(str::to_owned),
        labels: HashMap::from([("team".to_owned(), "billing".to_owned())]),
        spec_json: spec_json.into(),
        generation: 0,
    }
}

fn refused(resource: pb::Resource) -> String {
    resource_from(resource).unwrap_err().message
}

#[test]
fn a_wrong_field_in_a_spec_is_named_by_its_path() {
    let message = refused(wire("Tenant", "acme", None, r#"{"displayName": 5}"#));
    assert!(
        message.starts_with("Tenant/acme: spec.displayName: invalid type: integer `5`"),
        "{message}"
    );
    let message = refused(wire(
        "Skill",
        "tone",
        Some("acme"),
        r#"{"level": "galaxy"}"#,
    ));
    assert!(message.starts_with("Skill/tone: spec.level: "), "{message}");
}

#[test]
fn a_spec_that_is_not_an_object_or_not_json_is_refused_as_such() {
    let message = refused(wire("Tenant", "acme", None, "5"));
    assert!(
        message.starts_with("Tenant/acme: spec: invalid type: integer `5`"),
        "{message}"
    );
    // serde reads a struct from a sequence of its fields in order: the first is the display name.
    let message = refused(wire("Tenant", "acme", None, "[1, 2]"));
    assert!(
        message.starts_with("Tenant/acme: spec[0]: invalid type"),
        "{message}"
    );
    let message = refused(wire("Tenant", "acme", None, "{displayName"));
    assert!(
        message.starts_with("Tenant/acme: spec_json is not JSON"),
        "{message}"
    );
    let message = refused(wire("Secret", "acme", None, "{}"));
    assert!(message.starts_with("unknown kind \"Secret\""), "{message}");
}

#[test]
fn a_wire_resource_reads_as_the_same_document_would() {
    let read = resource_from(wire(
        "Tenant",
        "acme",
        Some(""),
        r#"{"displayName": "Acme", "description": "d"}"#,
    ))
    .unwrap();
    let document = r#"{"kind": "Tenant", "apiVersion": "gatehouse.dev/v1",
        "metadata": {"name": "acme", "labels": {"team": "billing"}},
        "spec": {"displayName": "Acme", "description": "d"}}"#;
    let expected: Resource = serde_json::from_str(document).unwrap();
    assert_eq!(read, expected);
    // And back: the wire form of what was read reads the same again.
    let stored = Stored {
        resource: read.clone(),
        generation: 1,
    };
    assert_eq!(resource_from(resource_to(&stored)).unwrap(), read);
}
