//! Declarative files: YAML streams of `apiVersion`/`kind`/`metadata`/`spec` documents, parsed
//! into resources with every problem reported at once, each naming the file, the document, the
//! field and, where the parser knows it, the line.

use crate::resource::{
    API_VERSION, Object, PolicySpec, PrincipalSpec, Resource, SkillSpec, TenantSpec, ToolSpec,
    UpstreamSpec, WebhookSpec,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt;

/// Where a resource came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    /// 1-based position of the document in its file.
    pub document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    pub origin: Origin,
    /// `Kind/name`, once the document got that far.
    pub resource: Option<String>,
    pub field: Option<String>,
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(resource) = &self.resource {
            write!(f, " ({resource})")?;
        }
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// A parsed file: the resources that came out whole, and the problems of the rest.
#[derive(Debug, Default)]
pub struct Parsed {
    pub resources: Vec<(Origin, Resource)>,
    pub problems: Vec<SourceProblem>,
}

impl Parsed {
    pub fn extend(&mut self, other: Parsed) {
        self.resources.extend(other.resources);
        self.problems.extend(other.problems);
    }

    /// Reports the same resource defined twice across everything parsed so far.
    pub fn check_duplicates(&mut self) {
        let mut first: BTreeMap<_, &Origin> = BTreeMap::new();
        for (origin, resource) in &self.resources {
            let key = resource.key();
            if let Some(earlier) = first.insert(key.clone(), origin) {
                self.problems.push(SourceProblem {
                    origin: origin.clone(),
                    resource: Some(format!("{}/{}", resource.kind(), resource.name())),
                    field: Some("metadata.name".into()),
                    line: None,
                    message: format!("{key} is already defined at {earlier}"),
                });
            }
        }
    }

    pub fn into_resources(self) -> Vec<Resource> {
        self.resources.into_iter().map(|(_, r)| r).collect()
    }
}

/// The typed form of one document, with `kind` kept so unknown fields can be refused.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TypedDocument<S> {
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    metadata: crate::resource::Metadata,
    spec: S,
}

/// Parses one file's text. Empty documents (a stray `---`) are skipped.
pub fn parse(file: &str, text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let typed_pass = serde_norway::Deserializer::from_str(text);
    let loose_pass = serde_norway::Deserializer::from_str(text);
    for (i, (loose, typed)) in loose_pass.zip(typed_pass).enumerate() {
        let origin = Origin {
            file: file.to_owned(),
            document: i + 1,
        };
        let problem =
            |resource: Option<String>, field: Option<String>, line, message| SourceProblem {
                origin: origin.clone(),
                resource,
                field,
                line,
                message,
            };
        let value = match serde_norway::Value::deserialize(loose) {
            Ok(serde_norway::Value::Null) => continue,
            Ok(value) => value,
            Err(e) => {
                parsed
                    .problems
                    .push(problem(None, None, line_of(&e), strip_location(&e)));
                // A syntax error ends the stream: nothing after it can be read reliably.
                break;
            }
        };
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .map(str::to_owned);
        let name = value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(|n| n.as_str())
            .map(str::to_owned);
        let label = kind
            .as_ref()
            .map(|k| format!("{k}/{}", name.as_deref().unwrap_or("?")));
        let resource = match kind.as_deref() {
            Some("Tenant") => typed_resource::<TenantSpec>(typed).map(Resource::Tenant),
            Some("Principal") => typed_resource::<PrincipalSpec>(typed).map(Resource::Principal),
            Some("Upstream") => typed_resource::<UpstreamSpec>(typed).map(Resource::Upstream),
            Some("Tool") => typed_resource::<ToolSpec>(typed).map(Resource::Tool),
            Some("Skill") => typed_resource::<SkillSpec>(typed).map(Resource::Skill),
            Some("Policy") => typed_resource::<PolicySpec>(typed).map(Resource::Policy),
            Some("Webhook") => typed_resource::<WebhookSpec>(typed).map(Resource::Webhook),
            Some(other) => {
                parsed.problems.push(problem(
                    None,
                    Some("kind".into()),
                    None,
                    format!("unknown kind {other:?}: one of Tenant, Principal, Upstream, Tool, Skill, Policy, Webhook"),
                ));
                continue;
            }
            None => {
                parsed
                    .problems
                    .push(problem(None, Some("kind".into()), None, "missing".into()));
                continue;
            }
        };
        match resource.map(Resource::normalized) {
            Ok(resource) => {
                let problems = resource.validate();
                if problems.is_empty() {
                    parsed.resources.push((origin.clone(), resource));
                }
                for p in problems {
                    parsed
                        .problems
                        .push(problem(label.clone(), Some(p.field), None, p.message));
                }
            }
            Err((field, line, message)) => {
                parsed.problems.push(problem(label, field, line, message))
            }
        }
    }
    parsed
}

fn typed_resource<S: DeserializeOwned>(
    doc: serde_norway::Deserializer<'_>,
) -> Result<Object<S>, (Option<String>, Option<usize>, String)> {
    match serde_path_to_error::deserialize::<_, TypedDocument<S>>(doc) {
        Ok(d) => Ok(Object {
            api_version: d.api_version,
            metadata: d.metadata,
            spec: d.spec,
        }),
        Err(e) => {
            let path = e.path().to_string();
            let field = (path != ".").then_some(path);
            let inner = e.into_inner();
            Err((field, line_of(&inner), strip_location(&inner)))
        }
    }
}

fn line_of(e: &serde_norway::Error) -> Option<usize> {
    e.location().map(|l| l.line())
}

/// The parser appends "at line L column C"; the line is reported on its own.
fn strip_location(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    match text.find(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// Renders a resource back as a declarative YAML document.
pub fn to_yaml(resource: &Resource) -> String {
    let value = serde_json::to_value(resource).expect("resources serialise");
    let mut doc = serde_json::Map::new();
    doc.insert("apiVersion".into(), API_VERSION.into());
    doc.insert("kind".into(), resource.kind().as_str().into());
    if let serde_json::Value::Object(mut fields) = value {
        for k in ["metadata", "spec"] {
            if let Some(v) = fields.remove(k) {
                doc.insert(k.into(), v);
            }
        }
    }
    serde_norway::to_string(&doc).expect("YAML serialises")
}

#[cfg(test)]
mod tests;
