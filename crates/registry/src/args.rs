//! A call's arguments against its tool: the input schema (draft 2020-12) and the admin's
//! per-argument constraints. Every problem is reported at once, so an agent can fix its call in
//! one round trip.

use crate::http_path;
use crate::resource::{ArgConstraint, ToolSpec};
use regex::Regex;
use serde_json::Value;
use std::cmp::Ordering;
use std::fmt;
use std::io;

/// How many characters of an argument's value a message may echo: agents send megabytes.
const ECHO_CHARS: usize = 60;

/// One thing wrong with a call's arguments.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ArgError {
    /// A JSON pointer into the arguments (`/amount`, `/items/0/sku`); empty for the whole object.
    pub argument: String,
    pub message: String,
}

impl ArgError {
    fn new(argument: impl Into<String>, message: impl Into<String>) -> Self {
        ArgError {
            argument: argument.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.argument.strip_prefix('/') {
            Some(name) => write!(f, "argument `{name}`: {}", self.message),
            None => write!(f, "arguments: {}", self.message),
        }
    }
}

/// A tool whose argument checks cannot be built. Tool validation rejects these before they are
/// applied, so meeting one at call time means the registry holds something it should not.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("the input schema does not compile: {0}")]
    InputSchema(String),
    #[error(
        "constraint on `{argument}`: pattern {pattern:?} is not a regular expression: {source}"
    )]
    Pattern {
        argument: String,
        pattern: String,
        #[source]
        source: regex::Error,
    },
}

/// A tool's compiled argument checks; build once per tool generation, use for every call.
pub struct ArgValidator {
    schema: jsonschema::Validator,
    constraints: Vec<Compiled>,
    /// The arguments that fill the placeholders of the tool's HTTP path: each must stay one
    /// path segment (`http_path`).
    path_arguments: Vec<String>,
}

struct Compiled {
    name: String,
    pointer: String,
    rule: ArgConstraint,
    pattern: Option<Regex>,
}

impl fmt::Debug for ArgValidator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArgValidator")
            .field(
                "constraints",
                &self.constraints.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ArgValidator {
    pub fn new(tool: &ToolSpec) -> Result<Self, SchemaError> {
        let schema = jsonschema::draft202012::new(&tool.input_schema)
            .map_err(|e| SchemaError::InputSchema(e.to_string()))?;
        let constraints = tool
            .constraints
            .iter()
            .map(|(name, rule)| {
                let pattern = match &rule.pattern {
                    Some(p) => Some(Regex::new(p).map_err(|source| SchemaError::Pattern {
                        argument: name.clone(),
                        pattern: p.clone(),
                        source,
                    })?),
                    None => None,
                };
                Ok(Compiled {
                    name: name.clone(),
                    pointer: pointer_to(name),
                    rule: rule.clone(),
                    pattern,
                })
            })
            .collect::<Result<_, SchemaError>>()?;
        let path_arguments = tool
            .http
            .as_ref()
            .and_then(|binding| binding.placeholders())
            .unwrap_or_default()
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok(ArgValidator {
            schema,
            constraints,
            path_arguments,
        })
    }

    /// Every problem at once, schema errors first, then constraint errors, then arguments that
    /// may not fill the tool's HTTP path, in a deterministic order; empty when the arguments
    /// may be used.
    pub fn validate(&self, args: &Value) -> Vec<ArgError> {
        let Some(object) = args.as_object() else {
            return vec![ArgError::new(
                "",
                format!("must be a JSON object, not {}", type_name(args)),
            )];
        };
        let mut schema_errors: Vec<ArgError> = self
            .schema
            .iter_errors(args)
            .map(|e| schema_error(&e))
            .collect();
        // The schema library's order follows its internal layout; sorting makes the report
        // the same on every node and every version.
        schema_errors.sort_by(|a, b| (&a.argument, &a.message).cmp(&(&b.argument, &b.message)));
        schema_errors.dedup();

        let mut errors = schema_errors;
        for c in &self.constraints {
            for e in c.check(object.get(&c.name)) {
                // A missing argument required by both the schema and a constraint is one problem.
                if !errors.contains(&e) {
                    errors.push(e);
                }
            }
        }
        for name in &self.path_arguments {
            let pointer = pointer_to(name);
            let problem = match object.get(name) {
                None => Some("is required: the tool's path holds it".to_owned()),
                Some(value) => http_path::segment_text(value).err().map(|e| e.to_string()),
            };
            if let Some(message) = problem {
                let e = ArgError::new(pointer, message);
                if !errors.iter().any(|known| known.argument == e.argument) {
                    errors.push(e);
                }
            }
        }
        errors
    }
}

fn schema_error(e: &jsonschema::ValidationError<'_>) -> ArgError {
    let path = e.instance_path().as_str();
    if let jsonschema::error::ValidationErrorKind::Required { property } = e.kind() {
        // Point at the missing argument itself rather than at the object that lacks it.
        let name = property
            .as_str()
            .map_or_else(|| property.to_string(), str::to_owned);
        return ArgError::new(format!("{path}{}", pointer_to(&name)), "is required");
    }
    let shown = echo(e.instance());
    ArgError::new(path, e.masked_with(shown).to_string())
}

impl Compiled {
    fn check(&self, value: Option<&Value>) -> Vec<ArgError> {
        let rule = &self.rule;
        // JSON null is how agents leave an optional argument out; only `required` minds it.
        let value = match value {
            None | Some(Value::Null) => {
                return match (rule.required, value) {
                    (true, None) => vec![ArgError::new(&self.pointer, "is required")],
                    (true, Some(_)) => vec![ArgError::new(&self.pointer, "is required, not null")],
                    (false, _) => vec![],
                };
            }
            Some(v) => v,
        };
        let mut errors = Vec::new();
        if rule.min.is_some() || rule.max.is_some() {
            match value.as_f64() {
                None => errors.push(ArgError::new(
                    &self.pointer,
                    format!(
                        "must be a number {}, not {}",
                        bounds(rule.min, rule.max),
                        type_name(value)
                    ),
                )),
                Some(n) => {
                    if let Some(min) = rule.min.filter(|&min| n < min) {
                        errors.push(ArgError::new(
                            &self.pointer,
                            format!("{} is below the minimum {min}", echo(value)),
                        ));
                    }
                    if let Some(max) = rule.max.filter(|&max| n > max) {
                        errors.push(ArgError::new(
                            &self.pointer,
                            format!("{} is above the maximum {max}", echo(value)),
                        ));
                    }
                }
            }
        }
        if let Some(allowed) = &rule.one_of
            && !allowed.iter().any(|a| same_value(a, value))
        {
            let listed: Vec<String> = allowed.iter().map(echo).collect();
            errors.push(ArgError::new(
                &self.pointer,
                format!("{} is not one of {}", echo(value), listed.join(", ")),
            ));
        }
        if let (Some(regex), Some(source)) = (&self.pattern, &rule.pattern) {
            match value.as_str() {
                None => errors.push(ArgError::new(
                    &self.pointer,
                    format!(
                        "must be a string matching the pattern {source}, not {}",
                        type_name(value)
                    ),
                )),
                Some(s) if !regex.is_match(s) => errors.push(ArgError::new(
                    &self.pointer,
                    format!("{} does not match the pattern {source}", echo(value)),
                )),
                Some(_) => {}
            }
        }
        errors
    }
}

fn bounds(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(min), Some(max)) => format!("from {min} to {max}"),
        (Some(min), None) => format!("of at least {min}"),
        (None, Some(max)) => format!("of at most {max}"),
        (None, None) => String::new(),
    }
}

/// JSON equality where numbers compare by value, as JSON Schema's `enum` does: `1 == 1.0`.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64()
                    .zip(y.as_f64())
                    .is_some_and(|(x, y)| x.partial_cmp(&y) == Some(Ordering::Equal))
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        _ => a == b,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A top-level argument's JSON pointer (RFC 6901 escaping).
fn pointer_to(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// The value as JSON, cut to `ECHO_CHARS` characters. Serialisation stops early, so a huge
/// value costs no more than a small one.
fn echo(value: &Value) -> String {
    struct Bounded(Vec<u8>);
    impl io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            // Four bytes per char covers the worst case of UTF-8.
            let room = (ECHO_CHARS + 1) * 4 - self.0.len();
            if room == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let n = buf.len().min(room);
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    let _ = serde_json::to_writer(&mut out, value);
    let text = match std::str::from_utf8(&out.0) {
        Ok(s) => s,
        Err(e) => std::str::from_utf8(&out.0[..e.valid_up_to()]).unwrap_or_default(),
    };
    if text.chars().count() <= ECHO_CHARS {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(ECHO_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validator(tool: Value) -> ArgValidator {
        let spec: ToolSpec = serde_json::from_value(tool).unwrap();
        ArgValidator::new(&spec).unwrap()
    }

    fn payments() -> ArgValidator {
        validator(json!({
            "inputSchema": {
                "type": "object",
                "properties": {
                    "amount": {"type": "number"},
                    "currency": {"type": "string"},
                    "memo": {"type": "string"},
                    "account": {"type": "string"},
                },
                "required": ["amount"],
            },
            "constraints": {
                "amount": {"min": 1, "max": 10000},
                "currency": {"enum": ["usd", "eur"], "required": true},
                "account": {"pattern": "^acct_[0-9]+$"},
                "level": {"enum": [1, 2, 3]},
            },
        }))
    }

    fn arguments(errors: &[ArgError]) -> Vec<&str> {
        errors.iter().map(|e| e.argument.as_str()).collect()
    }

    #[test]
    fn valid_arguments_have_no_errors() {
        let v = payments();
        let ok = json!({"amount": 10000, "currency": "usd", "account": "acct_42", "level": 2});
        assert_eq!(v.validate(&ok), vec![]);
    }

    #[test]
    fn schema_type_errors_name_the_argument() {
        let errors = payments().validate(&json!({"amount": "ten", "currency": "usd"}));
        assert_eq!(arguments(&errors), ["/amount", "/amount"]);
        assert!(errors[0].message.contains("\"ten\""), "{}", errors[0]);
        assert!(errors[0].message.contains("number"), "{}", errors[0]);
        assert_eq!(
            errors[1].message,
            "must be a number from 1 to 10000, not a string"
        );
    }

    #[test]
    fn missing_required_arguments_are_reported_once_each() {
        let errors = payments().validate(&json!({}));
        assert_eq!(
            errors,
            vec![
                ArgError::new("/amount", "is required"),
                ArgError::new("/currency", "is required"),
            ]
        );
        assert_eq!(errors[0].to_string(), "argument `amount`: is required");
        let null = payments().validate(&json!({"amount": 5, "currency": null}));
        assert_eq!(
            null,
            vec![
                ArgError::new("/currency", r#"null is not of type "string""#),
                ArgError::new("/currency", "is required, not null"),
            ]
        );
    }

    #[test]
    fn schema_and_constraint_requirements_dedupe() {
        let v = validator(json!({
            "inputSchema": {"type": "object", "required": ["id"]},
            "constraints": {"id": {"required": true}},
        }));
        assert_eq!(
            v.validate(&json!({})),
            vec![ArgError::new("/id", "is required")]
        );
    }

    #[test]
    fn bounds_are_inclusive_and_named() {
        let v = payments();
        for ok in [json!(1), json!(1.0), json!(10000), json!(10000.0)] {
            assert_eq!(
                v.validate(&json!({"amount": ok, "currency": "usd"})),
                vec![]
            );
        }
        let above = v.validate(&json!({"amount": 12000, "currency": "usd"}));
        assert_eq!(
            above.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["argument `amount`: 12000 is above the maximum 10000"]
        );
        let below = v.validate(&json!({"amount": 0.5, "currency": "usd"}));
        assert_eq!(
            below,
            vec![ArgError::new("/amount", "0.5 is below the minimum 1")]
        );
    }

    #[test]
    fn enum_lists_the_choices_and_compares_numbers_by_value() {
        let v = payments();
        let errors = v.validate(&json!({"amount": 5, "currency": "gbp"}));
        assert_eq!(
            errors,
            vec![ArgError::new(
                "/currency",
                r#""gbp" is not one of "usd", "eur""#
            )]
        );
        assert_eq!(
            v.validate(&json!({"amount": 5, "currency": "usd", "level": 2.0})),
            vec![]
        );
        assert_eq!(
            v.validate(&json!({"amount": 5, "currency": "usd", "level": 2.5})),
            vec![ArgError::new("/level", "2.5 is not one of 1, 2, 3")]
        );
        assert_eq!(
            v.validate(&json!({"amount": 5, "currency": "usd", "level": "2"})),
            vec![ArgError::new("/level", r#""2" is not one of 1, 2, 3"#)]
        );
    }

    #[test]
    fn pattern_searches_strings_only() {
        let v = payments();
        let base = |account: Value| json!({"amount": 5, "currency": "usd", "account": account});
        assert_eq!(
            v.validate(&base(json!("acct_x"))),
            vec![ArgError::new(
                "/account",
                r#""acct_x" does not match the pattern ^acct_[0-9]+$"#
            )]
        );
        let unanchored = validator(json!({"constraints": {"q": {"pattern": "[0-9]"}}}));
        assert_eq!(unanchored.validate(&json!({"q": "abc1def"})), vec![]);
        let errors = unanchored.validate(&json!({"q": 7}));
        assert_eq!(
            errors,
            vec![ArgError::new(
                "/q",
                "must be a string matching the pattern [0-9], not a number"
            )]
        );
    }

    #[test]
    fn arguments_must_be_an_object() {
        for (args, kind) in [
            (json!([1, 2]), "an array"),
            (json!("x"), "a string"),
            (json!(null), "null"),
        ] {
            let errors = payments().validate(&args);
            assert_eq!(
                errors,
                vec![ArgError::new(
                    "",
                    format!("must be a JSON object, not {kind}")
                )]
            );
            assert!(errors[0].to_string().starts_with("arguments: "));
        }
    }

    #[test]
    fn every_problem_is_reported_schema_first() {
        let errors = payments().validate(&json!({
            "amount": 20000,
            "memo": 3,
            "account": "nope",
            "level": 9,
        }));
        assert_eq!(
            arguments(&errors),
            ["/memo", "/account", "/amount", "/currency", "/level"]
        );
        assert_eq!(
            errors,
            payments().validate(&json!({
                "level": 9, "account": "nope", "memo": 3, "amount": 20000,
            }))
        );
    }

    #[test]
    fn nested_schema_errors_point_inside_and_missing_nested_properties_too() {
        let v = validator(json!({"inputSchema": {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {
                "type": "object",
                "properties": {"qty": {"type": "integer"}},
                "required": ["sku"],
            }}},
        }}));
        let errors = v.validate(&json!({"items": [{"sku": "a"}, {"qty": 1.5}]}));
        assert_eq!(arguments(&errors), ["/items/1/qty", "/items/1/sku"]);
        assert_eq!(errors[1].to_string(), "argument `items/1/sku`: is required");
    }

    #[test]
    fn arguments_filling_the_http_path_must_stay_one_segment() {
        let v = validator(json!({
            "inputSchema": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
            },
            "http": {"method": "GET", "path": "/tenants/acme/items/{id}/summary"},
        }));
        assert!(v.validate(&json!({"id": "item.7"})).is_empty());
        for id in ["..", ".", "%2e%2e", "a/b", "a\\b", "%2F", ""] {
            let errors = v.validate(&json!({"id": id}));
            assert_eq!(arguments(&errors), ["/id"], "{id:?}: {errors:?}");
        }
        let missing = v.validate(&json!({"n": 1}));
        assert_eq!(arguments(&missing), ["/id"]);
        assert!(missing[0].message.contains("path"), "{missing:?}");
        // A schema error on the same argument is reported once.
        let typed = v.validate(&json!({"id": 5}));
        assert_eq!(arguments(&typed), ["/id"], "{typed:?}");
    }

    #[test]
    fn huge_values_are_not_echoed() {
        let v = validator(json!({"constraints": {"q": {"enum": ["a"]}}}));
        let errors = v.validate(&json!({"q": "x".repeat(100_000)}));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].message.len() < 200, "{}", errors[0].message);
        assert!(errors[0].message.contains('…'));
        let schema = validator(json!({"inputSchema": {
            "type": "object", "properties": {"q": {"type": "integer"}},
        }}));
        let errors = schema.validate(&json!({"q": "y".repeat(100_000)}));
        assert!(errors[0].message.len() < 200, "{}", errors[0].message);
    }

    #[test]
    fn echo_cuts_on_character_boundaries() {
        assert_eq!(echo(&json!(12)), "12");
        let long = echo(&json!("é".repeat(500)));
        assert_eq!(long.chars().count(), ECHO_CHARS);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn bad_schemas_and_patterns_do_not_compile() {
        let spec: ToolSpec =
            serde_json::from_value(json!({"inputSchema": {"type": "nope"}})).unwrap();
        assert!(matches!(
            ArgValidator::new(&spec),
            Err(SchemaError::InputSchema(_))
        ));
        let spec: ToolSpec =
            serde_json::from_value(json!({"constraints": {"q": {"pattern": "("}}})).unwrap();
        let err = ArgValidator::new(&spec).unwrap_err();
        assert!(err.to_string().contains("`q`"), "{err}");
    }

    #[test]
    fn validators_can_be_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<ArgValidator>();
    }
}
