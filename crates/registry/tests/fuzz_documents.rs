//! Fuzzes the declarative file parser (`documents::parse`, what `apply -f` reads) with
//! arbitrary text, with YAML made of YAML's own punctuation and odd unicode, with valid streams
//! cut or damaged, and with deep nesting and alias bombs.
//!
//! Properties: parsing always returns (no panic, no stack overflow, bounded work on aliases);
//! every resource it returns passes `validate`, and no document yields both a resource and a
//! problem; a resource written by `to_yaml` parses back to itself exactly when `validate` finds
//! nothing, and otherwise to exactly `validate`'s problems; a damaged last document never costs
//! the documents before it.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_registry::Resource;
use gatehouse_registry::documents::{Parsed, parse, to_yaml};
use gatehouse_registry::resource::{
    API_VERSION, JwtSubject, Level, Metadata, Object, PrincipalSpec, Role, SkillScope, SkillSpec,
    TenantSpec, ToolOverrides,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const FILE: &str = "fuzz.yaml";

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig::with_cases(cases)
}

/// Characters YAML gives meaning to, whitespace of every kind, and unicode that trips parsers.
fn odd_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('a', 'z'),
        2 => prop::sample::select(":-#&*!|>'\"%@`{}[],?.~ \t\n\r\\".chars().collect::<Vec<_>>()),
        2 => prop::sample::select(vec![
            '\u{0}', '\u{7}', '\u{7f}', '\u{85}', '\u{a0}', '\u{feff}', '\u{2028}', '\u{2029}',
            '\u{200b}', '\u{202e}', '\u{fffd}', 'é', 'ß', '中', '𝄞', '😀',
        ]),
        1 => any::<char>(),
    ]
}

/// Words YAML reads as something other than a string when they stand unquoted.
fn odd_word() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(
            "null ~ true False yes no on 1e3 0x1F 0o17 .inf -.NaN 12:30 2024-01-01 --- ... <<"
                .split(' ')
                .chain(["- ", "? ", "!!str", "&a", "*a"])
                .collect::<Vec<_>>()
        )
        .prop_map(str::to_owned),
        prop::collection::vec(odd_char(), 0..12).prop_map(|c| c.into_iter().collect()),
    ]
}

fn odd_text(max_words: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(odd_word(), 0..max_words).prop_map(|w| w.concat())
}

/// YAML's printable set (`c-printable`): the YAML reader refuses anything else wherever in the
/// file it stands, so such a character fails the whole file, not the document that holds it.
fn printable(text: String) -> String {
    text.chars()
        .filter(|c| {
            matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{a0}'..='\u{d7ff}')
                || matches!(c, '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        })
        .collect()
}

/// Names that are sometimes valid and sometimes not, so both outcomes are exercised.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9][a-z0-9._-]{0,8}", 1 => odd_text(3)]
}

fn object<S>(name: String, tenant: Option<String>, spec: S) -> Object<S> {
    Object {
        api_version: API_VERSION.to_owned(),
        metadata: Metadata {
            name,
            tenant,
            labels: BTreeMap::new(),
        },
        spec,
    }
}

fn tenant() -> impl Strategy<Value = Resource> {
    (name(), prop::option::of(odd_text(40)), odd_text(6)).prop_map(|(n, display, description)| {
        Resource::Tenant(object(
            n,
            None,
            TenantSpec {
                display_name: display,
                description,
            },
        ))
    })
}

fn principal() -> impl Strategy<Value = Resource> {
    let role = prop::sample::select(vec![Role::Agent, Role::Approver, Role::Admin]);
    let roles = prop::collection::btree_map(name(), prop::collection::vec(role, 0..3), 0..3);
    (name(), odd_text(4), roles, prop::option::of(odd_text(3))).prop_map(
        |(n, subject, roles, user)| {
            Resource::Principal(object(
                n,
                None,
                PrincipalSpec {
                    jwt: Some(JwtSubject {
                        issuer: "https://idp.example".into(),
                        subject,
                    }),
                    roles,
                    user,
                    ..PrincipalSpec::default()
                },
            ))
        },
    )
}

fn skill() -> impl Strategy<Value = Resource> {
    let level = prop::sample::select(Level::ALL.to_vec());
    (
        name(),
        level,
        prop::option::of(name()),
        any::<i64>(),
        odd_text(8),
    )
        .prop_map(|(n, level, tenant, priority, instructions)| {
            Resource::Skill(object(
                n,
                tenant.clone(),
                SkillSpec {
                    scope: SkillScope {
                        level,
                        tenant,
                        tool_pattern: (level == Level::Tool).then(|| "api-*".to_owned()),
                        user: (level == Level::User).then(|| "dana".to_owned()),
                    },
                    priority,
                    key: None,
                    instructions,
                    required_capabilities: Vec::new(),
                    tool_overrides: ToolOverrides::default(),
                    enabled: true,
                },
            ))
        })
}

fn resource() -> impl Strategy<Value = Resource> {
    prop_oneof![tenant(), principal(), skill()]
}

/// The rules every parse keeps, whatever the input.
fn check_invariants(parsed: &Parsed) -> Result<(), TestCaseError> {
    let mut last = 0;
    for (origin, resource) in &parsed.resources {
        prop_assert_eq!(&origin.file, FILE);
        prop_assert!(origin.document > last, "documents out of order");
        last = origin.document;
        prop_assert!(resource.validate().is_empty(), "{:?}", resource.validate());
    }
    let with_resource: BTreeSet<usize> = parsed.resources.iter().map(|(o, _)| o.document).collect();
    for problem in &parsed.problems {
        prop_assert_eq!(&problem.origin.file, FILE);
        prop_assert!(problem.origin.document >= 1);
        prop_assert!(
            !with_resource.contains(&problem.origin.document),
            "document {} gave a resource and a problem: {}",
            problem.origin.document,
            problem
        );
        prop_assert!(!problem.to_string().is_empty());
    }
    Ok(())
}

fn stream(resources: &[Resource]) -> String {
    resources
        .iter()
        .map(to_yaml)
        .collect::<Vec<_>>()
        .join("---\n")
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn arbitrary_text_parses_to_valid_resources_or_problems(text in odd_text(60)) {
        check_invariants(&parse(FILE, &text))?;
    }

    #[test]
    fn yaml_shaped_documents_keep_the_invariants(
        kind in prop::sample::select(vec!["Tenant", "Principal", "Skill", "Tool", "Gadget", ""]),
        metadata in odd_text(6),
        spec in odd_text(12),
    ) {
        let text = format!("apiVersion: {API_VERSION}\nkind: {kind}\nmetadata: {metadata}\nspec: {spec}\n");
        check_invariants(&parse(FILE, &text))?;
    }

    #[test]
    fn a_written_resource_reads_back_to_itself_or_to_its_problems(
        resources in prop::collection::vec(resource(), 1..4),
    ) {
        let parsed = parse(FILE, &stream(&resources));
        check_invariants(&parsed)?;
        let mut expected_problems = Vec::new();
        let mut expected_resources = Vec::new();
        for (i, resource) in resources.iter().enumerate() {
            let problems = resource.validate();
            if problems.is_empty() {
                expected_resources.push((i + 1, resource.clone().normalized()));
            }
            expected_problems.extend(problems.into_iter().map(|p| (i + 1, p.field)));
        }
        let read: Vec<_> = parsed.resources.iter().map(|(o, r)| (o.document, r.clone())).collect();
        prop_assert_eq!(read, expected_resources);
        let reported: Vec<_> = parsed
            .problems
            .iter()
            .map(|p| (p.origin.document, p.field.clone().unwrap_or_default()))
            .collect();
        prop_assert_eq!(reported, expected_problems);
    }

    #[test]
    fn damage_to_a_valid_stream_keeps_the_invariants(
        resources in prop::collection::vec(resource(), 1..4),
        at in any::<prop::sample::Index>(),
        how in 0u8..4,
        junk in odd_text(4),
    ) {
        let mut text = stream(&resources).into_bytes();
        let i = at.index(text.len());
        match how {
            0 => text.truncate(i),
            1 => text[i] ^= 1 << (i % 8),
            2 => text.splice(i..i, junk.bytes()).for_each(drop),
            _ => text.splice(i..(i + 4).min(text.len()), []).for_each(drop),
        }
        check_invariants(&parse(FILE, &String::from_utf8_lossy(&text)))?;
    }

    #[test]
    fn a_damaged_last_document_costs_none_before_it(
        resources in prop::collection::vec(resource(), 1..4),
        garbage in odd_text(30).prop_map(printable),
    ) {
        let whole = parse(FILE, &stream(&resources));
        let damaged = parse(FILE, &format!("{}---\n{garbage}", stream(&resources)));
        check_invariants(&damaged)?;
        let n = resources.len();
        let before = |p: &Parsed| -> Vec<_> {
            p.resources.iter().filter(|(o, _)| o.document <= n).cloned().collect()
        };
        prop_assert_eq!(before(&damaged), before(&whole));
        let problems_before: Vec<_> =
            damaged.problems.iter().filter(|p| p.origin.document <= n).cloned().collect();
        prop_assert_eq!(problems_before, whole.problems);
    }
}

proptest! {
    // Each case parses inputs of thousands of levels: fewer of them by default.
    #![proptest_config(config(16))]

    #[test]
    fn deep_nesting_and_alias_bombs_are_refused_not_followed(depth in 1usize..2_500, fan in 2usize..12) {
        let mut deep = format!("kind: Tenant\nmetadata: {{name: a}}\nspec: {}", "[".repeat(depth));
        deep.push_str(&"]".repeat(depth));
        check_invariants(&parse(FILE, &deep))?;
        let mapped = format!("kind: Tenant\nspec: {}", "{a: ".repeat(depth.min(2_000)));
        check_invariants(&parse(FILE, &mapped))?;
        // Ten levels of `fan` aliases each: fan^10 nodes if every alias were expanded.
        let mut bomb = String::from("kind: Tenant\nmetadata: {name: a}\nx0: &x0 [lol]\n");
        for level in 1..10 {
            let refs = vec![format!("*x{}", level - 1); fan].join(", ");
            bomb.push_str(&format!("x{level}: &x{level} [{refs}]\n"));
        }
        bomb.push_str("spec: {displayName: *x9}\n");
        let started = std::time::Instant::now();
        check_invariants(&parse(FILE, &bomb))?;
        prop_assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
