//! Fuzzes argument validation (`args::ArgValidator`), what every tool call's arguments pass
//! through, against generated tools: a simple input schema (typed properties, some required,
//! additional properties allowed or not) plus the admin's constraints (min/max, enum, pattern,
//! required), and arguments generated to satisfy or to break each property in a known way.
//!
//! Properties: validation names exactly the arguments that break the schema or a constraint
//! (empty for arguments made to satisfy both), whatever the order the caller wrote them in;
//! arguments that are not an object get one error for the whole; arbitrary JSON (huge numbers,
//! deep nesting, long and odd strings, long keys) never panics, and no message echoes more than a
//! bounded amount of what the caller sent.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_registry::args::{ArgError, ArgValidator};
use gatehouse_registry::resource::ToolSpec;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig::with_cases(cases)
}

/// Argument names, some of which need escaping in a JSON pointer.
const NAMES: [&str; 6] = ["amount", "a/b", "t~1", "é", "with space", ""];
/// The longest message here: the schema's words, and at most 60 characters of the caller's value.
const MAX_MESSAGE_CHARS: usize = 400;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ty {
    String,
    Integer,
    Number,
    Boolean,
}

#[derive(Debug, Clone)]
enum Rule {
    None,
    Range(f64, f64),
    Enum,
    Pattern,
}

#[derive(Debug, Clone)]
struct Prop {
    ty: Ty,
    schema_required: bool,
    rule: Rule,
    constraint_required: bool,
}

/// How an argument is given, relative to its property.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Given {
    Absent,
    Null,
    Good,
    WrongType,
    /// Breaks the property's constraint rule (only drawn when it has one).
    Breaking,
}

fn prop_strategy() -> impl Strategy<Value = Prop> {
    let ty = prop::sample::select(vec![Ty::String, Ty::Integer, Ty::Number, Ty::Boolean]);
    (
        ty,
        any::<bool>(),
        0u8..4,
        any::<bool>(),
        -1000i32..1000,
        0u16..2000,
    )
        .prop_map(
            |(ty, schema_required, rule, constraint_required, low, width)| {
                let rule = match (ty, rule) {
                    (Ty::Integer | Ty::Number, 1) => {
                        Rule::Range(f64::from(low), f64::from(low) + f64::from(width))
                    }
                    (Ty::Integer | Ty::String, 2) => Rule::Enum,
                    (Ty::String, 3) => Rule::Pattern,
                    _ => Rule::None,
                };
                Prop {
                    ty,
                    schema_required,
                    rule,
                    constraint_required,
                }
            },
        )
}

fn tool(props: &[Prop], closed: bool) -> ArgValidator {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut constraints = Map::new();
    for (name, p) in NAMES.iter().zip(props) {
        let ty = ["string", "integer", "number", "boolean"][p.ty as usize];
        properties.insert((*name).into(), json!({"type": ty}));
        if p.schema_required {
            required.push(*name);
        }
        let mut c = json!({"required": p.constraint_required});
        match (&p.rule, p.ty) {
            (Rule::Range(min, max), _) => {
                c["min"] = json!(min);
                c["max"] = json!(max);
            }
            (Rule::Enum, Ty::Integer) => c["enum"] = json!([1, 2, 3]),
            (Rule::Enum, _) => c["enum"] = json!(["usd", "eur", "é"]),
            (Rule::Pattern, _) => c["pattern"] = json!("^[a-z]+$"),
            (Rule::None, _) => {}
        }
        constraints.insert((*name).into(), c);
    }
    let spec: ToolSpec = serde_json::from_value(json!({
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": !closed,
        },
        "constraints": constraints,
    }))
    .expect("a tool spec");
    ArgValidator::new(&spec).expect("the generated tool compiles")
}

/// A value for `p` given as `given`, drawn from `seed` and `text`.
fn value_for(p: &Prop, given: Given, seed: i64, text: &str) -> Option<Value> {
    let pick = |values: &[Value]| values[seed.unsigned_abs() as usize % values.len()].clone();
    Some(match (given, p.ty) {
        (Given::Absent, _) => return None,
        (Given::Null, _) => Value::Null,
        (Given::Good, Ty::Boolean) => json!(seed % 2 == 0),
        (Given::Good, Ty::String) => match p.rule {
            Rule::Enum => pick(&[json!("usd"), json!("eur"), json!("é")]),
            Rule::Pattern => json!(format!(
                "ok{}",
                "z".repeat(seed.unsigned_abs() as usize % 9)
            )),
            _ => json!(text),
        },
        (Given::Good, Ty::Integer | Ty::Number) => match p.rule {
            Rule::Range(min, max) => {
                let n = min as i64 + seed.rem_euclid((max - min) as i64 + 1);
                match p.ty {
                    Ty::Number => json!(n as f64 + 0.25_f64.min(max - n as f64)),
                    _ => json!(n),
                }
            }
            Rule::Enum => json!(1 + seed.rem_euclid(3)),
            _ if p.ty == Ty::Number => json!(seed as f64 / 7.0),
            _ => json!(seed),
        },
        (Given::WrongType, Ty::String) => {
            pick(&[json!(true), json!([1]), json!({"x": 1}), json!(2.5)])
        }
        (Given::WrongType, Ty::Integer) => pick(&[json!("7"), json!(true), json!(2.5), json!([])]),
        (Given::WrongType, Ty::Number) => pick(&[json!("7"), json!(true), json!([1]), json!({})]),
        (Given::WrongType, Ty::Boolean) => pick(&[json!("true"), json!(0), json!(2.5), json!({})]),
        (Given::Breaking, _) => match p.rule {
            // Beyond the bound by a little or by a lot: the largest integers JSON carries too.
            Rule::Range(min, max) => pick(&[
                json!(min - 1.0),
                json!(max + 1.0),
                json!(i64::MIN),
                json!(u64::MAX),
            ]),
            Rule::Enum if p.ty == Ty::Integer => json!(4 + seed.rem_euclid(1000)),
            Rule::Enum => json!(format!("gbp{text}")),
            Rule::Pattern => json!(format!("{text}A1")),
            Rule::None => return value_for(p, Given::Good, seed, text),
        },
    })
}

fn breaks(p: &Prop, given: Given) -> bool {
    match given {
        Given::Absent => p.schema_required || p.constraint_required,
        Given::Null | Given::WrongType => true,
        Given::Good => false,
        Given::Breaking => !matches!(p.rule, Rule::None),
    }
}

fn pointer(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// Every message is bounded, but for the names of unexpected arguments: the schema library lists
/// those in full (`unexpected` is what the caller sent as names, never as values).
fn check_messages(errors: &[ArgError], unexpected: &[&str]) -> Result<(), TestCaseError> {
    let names: usize = unexpected.iter().map(|n| n.chars().count() + 4).sum();
    for e in errors {
        prop_assert!(
            e.message.chars().count() <= MAX_MESSAGE_CHARS + names,
            "a message of {} characters",
            e.message.chars().count()
        );
        prop_assert!(e.argument.is_empty() || e.argument.starts_with('/'));
    }
    Ok(())
}

fn given() -> impl Strategy<Value = Given> {
    use Given::*;
    prop::sample::select(vec![Absent, Null, Good, WrongType, Breaking])
}

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,20}",
        "[\\x00-\\x1f\\x7f\u{85}\u{feff}\u{2028}\u{202e}é𝄞]{0,10}",
        (0usize..20_000).prop_map(|n| "é".repeat(n)),
    ]
}

/// Arbitrary JSON, numbers at their extremes included, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        odd_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            prop::collection::btree_map(odd_string(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn exactly_the_broken_arguments_are_named(
        props in prop::collection::vec(prop_strategy(), NAMES.len()),
        givens in prop::collection::vec(given(), NAMES.len()),
        seeds in prop::collection::vec(any::<i64>(), NAMES.len()),
        text in odd_string(),
        closed in any::<bool>(),
        extra in prop::option::of("[a-z]{1,3}|x{5000}"),
    ) {
        let validator = tool(&props, closed);
        let mut args = Map::new();
        let mut expected = BTreeSet::new();
        for (i, (p, given)) in props.iter().zip(&givens).enumerate() {
            if let Some(v) = value_for(p, *given, seeds[i], &text) {
                args.insert(NAMES[i].into(), v);
            }
            if breaks(p, *given) {
                expected.insert(pointer(NAMES[i]));
            }
        }
        let extra = extra.map(|e| format!("x-{e}"));
        if let Some(extra) = &extra {
            args.insert(extra.clone(), json!(1));
            if closed {
                expected.insert(String::new());
            }
        }
        let errors = validator.validate(&Value::Object(args.clone()));
        check_messages(&errors, &extra.iter().map(String::as_str).collect::<Vec<_>>())?;
        let named: BTreeSet<String> = errors.iter().map(|e| e.argument.clone()).collect();
        prop_assert_eq!(named, expected, "{:?}", errors);
        // The caller's order does not matter.
        let reversed: Map<String, Value> = args.into_iter().rev().collect();
        prop_assert_eq!(validator.validate(&Value::Object(reversed)), errors);
    }

    #[test]
    fn arguments_that_are_not_an_object_are_one_error(
        props in prop::collection::vec(prop_strategy(), NAMES.len()),
        args in any_json().prop_filter("not an object", |v| !v.is_object()),
    ) {
        let errors = tool(&props, false).validate(&args);
        prop_assert_eq!(errors.len(), 1);
        prop_assert_eq!(errors[0].argument.as_str(), "");
        prop_assert!(errors[0].message.starts_with("must be a JSON object"));
    }

    #[test]
    fn arbitrary_json_is_judged_without_panics_or_long_echoes(
        props in prop::collection::vec(prop_strategy(), NAMES.len()),
        closed in any::<bool>(),
        fields in prop::collection::vec((prop::sample::select(NAMES.to_vec()), any_json()), 0..8),
    ) {
        let validator = tool(&props, closed);
        let args: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let errors = validator.validate(&Value::Object(args.clone()));
        check_messages(&errors, &[])?;
        prop_assert_eq!(validator.validate(&Value::Object(args)), errors);
    }
}
