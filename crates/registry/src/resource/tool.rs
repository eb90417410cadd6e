use super::Problem;
use crate::mode::{ApprovalMode, CapabilityClass};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A capability the gateway can call: `upstream.tool`. An admin's declaration and an upstream's
/// discovered listing share this shape; only an admin sets `approvalMode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default = "object_schema")]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// The declared maximum mode. When absent the upstream's annotations decide, if it is
    /// trusted; otherwise the tool is `destructive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_mode: Option<ApprovalMode>,
    /// The admin's word that calling the tool twice with the same arguments does what calling
    /// it once does: such a call may be retried and re-claimed after a failover. Only an admin
    /// sets it; discovery never does, and an untrusted upstream's `idempotentHint` counts for
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability_class: Option<CapabilityClass>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub categories: Vec<String>,
    /// The toolset the tool belongs to; its upstream's name when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolset: Option<String>,
    /// Argument name to the limits its value must keep.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub constraints: BTreeMap<String, ArgConstraint>,
    /// For a tool of an HTTP upstream: the request a call becomes. Without one, the arguments
    /// are POSTed to `{url}/{tool}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpBinding>,
}

/// The label on tools the leader wrote from an MCP upstream's listing; its value is the
/// upstream's name. A tool without it was declared by an admin and discovery never touches it.
pub const DISCOVERED_FROM: &str = "gatehouse.dev/discovered-from";

/// An HTTP request for a tool: `path` is joined to the upstream's URL, and each `{arg}` in it is
/// filled from the argument of that name. The other arguments go in the query string of a
/// `GET` or `DELETE`, and as a JSON object body otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpBinding {
    pub method: String,
    pub path: String,
}

impl HttpBinding {
    pub const METHODS: [&'static str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

    /// The names of the `{arg}` placeholders in `path`, in order; `None` when the braces do not
    /// pair up or a placeholder is empty.
    pub fn placeholders(&self) -> Option<Vec<&str>> {
        let mut names = Vec::new();
        let mut rest = self.path.as_str();
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return None;
            }
            let after = &rest[open + 1..];
            let close = after.find('}')?;
            let name = &after[..close];
            if name.is_empty() || name.contains('{') {
                return None;
            }
            names.push(name);
            rest = &after[close + 1..];
        }
        Some(names)
    }

    /// Whether the method sends the arguments in the query string rather than a body.
    pub fn uses_query(&self) -> bool {
        matches!(self.method.as_str(), "GET" | "DELETE")
    }

    fn validate(&self, problems: &mut Vec<Problem>) {
        if !Self::METHODS.contains(&self.method.as_str()) {
            problems.push(Problem::new(
                "spec.http.method",
                format!(
                    "{:?} is not one of {}",
                    self.method,
                    Self::METHODS.join(", ")
                ),
            ));
        }
        if !self.path.starts_with('/') {
            problems.push(Problem::new("spec.http.path", "must start with '/'"));
        }
        if self.placeholders().is_none() {
            problems.push(Problem::new(
                "spec.http.path",
                "every '{' must close with '}' around an argument name",
            ));
        }
        if let Some(problem) = crate::http_path::literal_path_problem(&self.path) {
            problems.push(Problem::new("spec.http.path", problem));
        }
    }
}

fn object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

/// MCP's tool annotations, as hints: only a trusted upstream's are believed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolAnnotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgConstraint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, rename = "enum", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default)]
    pub required: bool,
}

/// Where a tool's declared maximum mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeSource {
    Admin,
    Annotations,
    FailSafe,
}

impl ToolSpec {
    /// The declared maximum mode, by DESIGN's mapping. An untrusted upstream's hints, or none at
    /// all, mean `destructive`: MCP's own default for `destructiveHint` is true.
    pub fn declared_mode(&self, upstream_trusted: bool) -> (ApprovalMode, ModeSource) {
        if let Some(mode) = self.approval_mode {
            return (mode, ModeSource::Admin);
        }
        let hints = match (&self.annotations, upstream_trusted) {
            (Some(hints), true) => hints,
            _ => return (ApprovalMode::Destructive, ModeSource::FailSafe),
        };
        let mode = if hints.read_only_hint == Some(true) {
            ApprovalMode::ReadOnly
        } else if hints.destructive_hint != Some(false) {
            ApprovalMode::Destructive
        } else if hints.open_world_hint == Some(false) {
            ApprovalMode::LocalWrite
        } else {
            ApprovalMode::Network
        };
        (mode, ModeSource::Annotations)
    }

    /// Safe to retry and to re-claim after a failover: the admin's `idempotent` when given,
    /// else a trusted upstream's `idempotentHint`. An untrusted upstream never decides it.
    pub fn idempotent(&self, upstream_trusted: bool) -> bool {
        match self.idempotent {
            Some(declared) => declared,
            None => {
                upstream_trusted
                    && self
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.idempotent_hint == Some(true))
            }
        }
    }

    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        if !self.input_schema.is_object() {
            problems.push(Problem::new(
                "spec.inputSchema",
                "must be a JSON Schema object",
            ));
        } else if let Err(e) = jsonschema::draft202012::meta::validate(&self.input_schema) {
            problems.push(Problem::new(
                "spec.inputSchema",
                format!("not a valid draft 2020-12 schema: {e}"),
            ));
        }
        if let Some(schema) = &self.output_schema
            && let Err(e) = jsonschema::draft202012::meta::validate(schema)
        {
            problems.push(Problem::new(
                "spec.outputSchema",
                format!("not a valid draft 2020-12 schema: {e}"),
            ));
        }
        for (i, category) in self.categories.iter().enumerate() {
            if category.trim().is_empty() {
                problems.push(Problem::new(
                    format!("spec.categories[{i}]"),
                    "must not be empty",
                ));
            }
        }
        for (arg, c) in &self.constraints {
            let field = format!("spec.constraints.{arg}");
            if let (Some(min), Some(max)) = (c.min, c.max)
                && min > max
            {
                problems.push(Problem::new(
                    &field,
                    format!("min {min} is above max {max}"),
                ));
            }
            if let Some(pattern) = &c.pattern
                && let Err(e) = regex::Regex::new(pattern)
            {
                problems.push(Problem::new(
                    format!("{field}.pattern"),
                    format!("not a regular expression: {e}"),
                ));
            }
            if c.one_of.as_ref().is_some_and(Vec::is_empty) {
                problems.push(Problem::new(
                    format!("{field}.enum"),
                    "must list at least one value",
                ));
            }
        }
        if let Some(http) = &self.http {
            http.validate(problems);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(annotations: Option<ToolAnnotations>, approval_mode: Option<ApprovalMode>) -> ToolSpec {
        ToolSpec {
            idempotent: None,
            description: String::new(),
            input_schema: object_schema(),
            output_schema: None,
            annotations,
            approval_mode,
            capability_class: None,
            categories: vec![],
            toolset: None,
            constraints: BTreeMap::new(),
            http: None,
        }
    }

    fn hints(ro: Option<bool>, destructive: Option<bool>, open: Option<bool>) -> ToolAnnotations {
        ToolAnnotations {
            read_only_hint: ro,
            destructive_hint: destructive,
            open_world_hint: open,
            ..Default::default()
        }
    }

    #[test]
    fn annotations_map_to_modes_for_trusted_upstreams() {
        let cases = [
            (hints(Some(true), None, None), ApprovalMode::ReadOnly),
            (hints(None, Some(true), None), ApprovalMode::Destructive),
            (hints(None, None, None), ApprovalMode::Destructive),
            (hints(None, Some(false), None), ApprovalMode::Network),
            (hints(None, Some(false), Some(true)), ApprovalMode::Network),
            (
                hints(None, Some(false), Some(false)),
                ApprovalMode::LocalWrite,
            ),
        ];
        for (h, want) in cases {
            let (got, source) = tool(Some(h.clone()), None).declared_mode(true);
            assert_eq!((got, source), (want, ModeSource::Annotations), "{h:?}");
        }
    }

    #[test]
    fn untrusted_or_missing_metadata_is_destructive() {
        let read_only = hints(Some(true), None, None);
        assert_eq!(
            tool(Some(read_only), None).declared_mode(false),
            (ApprovalMode::Destructive, ModeSource::FailSafe)
        );
        assert_eq!(
            tool(None, None).declared_mode(true),
            (ApprovalMode::Destructive, ModeSource::FailSafe)
        );
    }

    #[test]
    fn only_the_admin_or_a_trusted_upstream_makes_a_tool_retry_safe() {
        let mut idempotent = hints(Some(false), Some(true), None);
        idempotent.idempotent_hint = Some(true);
        let hinted = tool(Some(idempotent), None);
        assert!(
            !hinted.idempotent(false),
            "an untrusted upstream's hint counts"
        );
        assert!(hinted.idempotent(true));
        let denied = ToolSpec {
            idempotent: Some(false),
            ..hinted.clone()
        };
        assert!(!denied.idempotent(true), "the admin's no is overridden");
        let declared = ToolSpec {
            idempotent: Some(true),
            ..tool(None, None)
        };
        assert!(declared.idempotent(false));
    }

    #[test]
    fn the_admins_declaration_wins_over_annotations() {
        let read_only = hints(Some(true), None, None);
        assert_eq!(
            tool(Some(read_only), Some(ApprovalMode::Delegated)).declared_mode(true),
            (ApprovalMode::Delegated, ModeSource::Admin)
        );
    }

    #[test]
    fn http_bindings_need_a_known_method_and_well_formed_placeholders() {
        let binding = |method: &str, path: &str| HttpBinding {
            method: method.into(),
            path: path.into(),
        };
        let good = binding("GET", "/pets/{petId}/toys/{toy}");
        assert_eq!(good.placeholders(), Some(vec!["petId", "toy"]));
        assert!(good.uses_query() && !binding("PATCH", "/").uses_query());
        for (bad, fields) in [
            (binding("FETCH", "/a"), vec!["spec.http.method"]),
            (binding("GET", "a"), vec!["spec.http.path"]),
            (binding("GET", "/a/{b"), vec!["spec.http.path"]),
            (binding("GET", "/a/{}"), vec!["spec.http.path"]),
            (binding("GET", "/a/b}"), vec!["spec.http.path"]),
            (binding("GET", "/a/../{b}"), vec!["spec.http.path"]),
            (binding("GET", "/a/{b}?x=1"), vec!["spec.http.path"]),
        ] {
            let mut spec = tool(None, None);
            spec.http = Some(bad.clone());
            let mut problems = Vec::new();
            spec.validate(&mut problems);
            let got: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
            assert_eq!(got, fields, "{bad:?}");
        }
    }
}
