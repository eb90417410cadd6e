use super::*;

const ADR: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {displayName: ACME}
---
apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: request-ids}
spec:
  scope: {type: global}
  priority: 10
  instructions: Always include a request ID in API calls.
---
apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: api-approval, tenant: acme}
spec:
  scope: {type: tool, tenant: acme, toolPattern: "api-*"}
  priority: 100
  instructions: api-create requires approval for amounts > 10000.
"#;

#[test]
fn a_stream_of_documents_parses_into_resources() {
    let parsed = parse("adr.yaml", ADR);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    let names: Vec<_> = parsed
        .resources
        .iter()
        .map(|(o, r)| (o.document, r.kind().as_str(), r.name().to_owned()))
        .collect();
    assert_eq!(
        names,
        [
            (1, "Tenant", "acme".to_owned()),
            (2, "Skill", "request-ids".to_owned()),
            (3, "Skill", "api-approval".to_owned())
        ]
    );
    match &parsed.resources[2].1 {
        Resource::Skill(s) => assert_eq!(s.spec.scope.tool_pattern.as_deref(), Some("api-*")),
        other => panic!("not a skill: {other:?}"),
    }
}

#[test]
fn every_problem_is_reported_with_file_document_field_and_line() {
    let text = r#"apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: bad-priority}
spec:
  scope: {type: global}
  priority: high
  instructions: x
---
apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: no-tenant}
spec:
  scope: {type: tenant}
  instructions: "   "
---
apiVersion: gatehouse.dev/v1
kind: Gadget
metadata: {name: g}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: ok}
spec: {colour: blue}
"#;
    let parsed = parse("skills.yaml", text);
    let lines: Vec<String> = parsed.problems.iter().map(ToString::to_string).collect();
    assert_eq!(parsed.problems.len(), 5, "{lines:#?}");
    let first = &parsed.problems[0];
    assert_eq!(first.origin.document, 1);
    assert_eq!(first.field.as_deref(), Some("spec.priority"));
    assert_eq!(first.line, Some(6));
    assert!(
        lines[0]
            .starts_with("skills.yaml: document 1 (Skill/bad-priority), line 6: spec.priority:"),
        "{}",
        lines[0]
    );
    let second: Vec<_> = parsed.problems[1..3]
        .iter()
        .map(|p| (p.origin.document, p.field.as_deref()))
        .collect();
    assert_eq!(
        second,
        [
            (2, Some("spec.scope.tenant")),
            (2, Some("spec.instructions"))
        ]
    );
    assert_eq!(parsed.problems[3].field.as_deref(), Some("kind"));
    assert!(parsed.problems[3].message.contains("Gadget"));
    assert_eq!(parsed.problems[4].origin.document, 4);
    assert!(
        parsed.problems[4].message.contains("colour"),
        "{}",
        parsed.problems[4]
    );
    assert!(parsed.resources.is_empty());
}

#[test]
fn a_syntax_error_names_its_line() {
    let parsed = parse("broken.yaml", "kind: Tenant\nmetadata: {name: [unclosed\n");
    assert_eq!(parsed.problems.len(), 1);
    assert!(
        parsed.problems[0].line.is_some(),
        "{:?}",
        parsed.problems[0]
    );
}

#[test]
fn a_secret_in_instructions_is_refused_without_echoing_it() {
    let secret = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
    let text = format!(
        "apiVersion: gatehouse.dev/v1\nkind: Skill\nmetadata: {{name: leak}}\nspec:\n  scope: {{type: global}}\n  instructions: use key {secret} for S3\n"
    );
    let parsed = parse("leak.yaml", &text);
    assert_eq!(parsed.problems.len(), 1);
    let shown = parsed.problems[0].to_string();
    assert!(shown.contains("credential"), "{shown}");
    assert!(!shown.contains(&secret), "{shown}");
}

#[test]
fn duplicates_across_files_are_reported() {
    let mut all = parse("a.yaml", ADR);
    all.extend(parse("b.yaml", ADR));
    all.check_duplicates();
    assert_eq!(all.problems.len(), 3);
    assert!(
        all.problems[0].message.contains("a.yaml: document 1"),
        "{}",
        all.problems[0]
    );
}

#[test]
fn yaml_round_trips() {
    let parsed = parse("adr.yaml", ADR);
    for (_, resource) in &parsed.resources {
        let again = parse("again.yaml", &to_yaml(resource));
        assert!(again.problems.is_empty(), "{:?}", again.problems);
        assert_eq!(&again.resources[0].1, resource);
    }
}

/// The problems a one-document file reports: validation's own, as an operator sees them.
fn problems(yaml: &str) -> Vec<String> {
    let text = format!("apiVersion: gatehouse.dev/v1\n{yaml}");
    parse("t.yaml", &text)
        .problems
        .into_iter()
        .map(|p| format!("{}: {}", p.field.unwrap_or_default(), p.message))
        .collect()
}

#[test]
fn a_principal_never_stores_a_plain_key() {
    let found = problems(
        "kind: Principal\nmetadata: {name: p}\nspec: {apiKeySha256: gate_0123, roles: {acme: []}}",
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("spec.apiKeySha256: must be the 64 lower-case hex digits"));
    assert!(found[1].starts_with("spec.roles.acme: lists no role"));
    assert!(
        !found.concat().contains("gate_0123"),
        "the value is never echoed"
    );
}

#[test]
fn upstreams_name_credentials_and_need_urls() {
    let found = problems(
        "kind: Upstream\nmetadata: {name: u}\nspec: {type: mcp, credential: {env: A, file: /b}, timeoutMs: 0}",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(
        fields,
        ["spec.url", "spec.credential", "spec.timeoutMs"],
        "{found:?}"
    );
    assert!(found[1].contains("`credential: NAME`"), "{found:?}");
    assert!(
        problems(
            "kind: Upstream\nmetadata: {name: u}\nspec: {type: mcp, url: 'http://h', credential: stripe}"
        )
        .is_empty()
    );
}

#[test]
fn tools_need_an_upstream_prefix_and_sound_constraints() {
    let found = problems(
        "kind: Tool\nmetadata: {name: refund}\nspec:\n  inputSchema: {type: object, properties: {a: {type: 12}}}\n  constraints: {a: {min: 5, max: 1, pattern: \"(\"}}",
    );
    let fields: Vec<&str> = found.iter().map(|p| p.split(':').next().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.inputSchema",
            "spec.constraints.a",
            "spec.constraints.a.pattern"
        ],
        "{found:?}"
    );
}

#[test]
fn a_skills_metadata_tenant_must_agree_with_its_scope() {
    let found = problems(
        "kind: Skill\nmetadata: {name: s, tenant: other}\nspec: {scope: {type: tenant, tenant: acme}, instructions: hi}",
    );
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("metadata.tenant:"), "{found:?}");
}

#[test]
fn over_long_instructions_are_refused() {
    let long = "x".repeat(2_001);
    let found = problems(&format!(
        "kind: Skill\nmetadata: {{name: s}}\nspec: {{scope: {{type: global}}, instructions: {long}}}"
    ));
    assert_eq!(found, ["spec.instructions: 2001 characters, at most 2000"]);
}
