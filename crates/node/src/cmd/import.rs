//! `gatehouse import openapi FILE --upstream NAME`: an OpenAPI 3.0/3.1 document (JSON or YAML)
//! becomes Tool resources for an HTTP upstream, one per operation, written as a YAML stream for
//! an admin to review and apply. GET operations are declared `read_only`, every other one
//! `destructive`, until an admin says otherwise.

use crate::exit::Exit;
use anyhow::{Context, bail};
use clap::Subcommand;
use gatehouse_registry::resource::{API_VERSION, Metadata, Object, Resource, ToolSpec};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];
/// `$ref`s deeper than this are left as an open schema: a recursive schema has no end.
const MAX_REF_DEPTH: usize = 16;

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// An OpenAPI 3.0/3.1 document (JSON or YAML): one Tool per operation of an HTTP upstream.
    Openapi {
        /// An OpenAPI 3 document, JSON or YAML.
        file: PathBuf,
        /// The Upstream the tools call.
        #[arg(long)]
        upstream: String,
        /// The tenant the tools belong to; shared when absent.
        #[arg(long)]
        tenant: Option<String>,
        /// Where to write the YAML stream; standard output when absent.
        #[arg(long, value_name = "OUT")]
        output: Option<PathBuf>,
    },
}

pub fn openapi(
    file: &Path,
    upstream: &str,
    tenant: Option<&str>,
    output: Option<&Path>,
) -> anyhow::Result<Exit> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let document: Value = match serde_json::from_str(&text) {
        Ok(document) => document,
        Err(_) => serde_norway::from_str(&text)
            .with_context(|| format!("{} is neither JSON nor YAML", file.display()))?,
    };
    let tools = openapi_tools(&document, upstream, tenant)?;
    let yaml = to_yaml(&tools)?;
    match output {
        Some(path) => {
            std::fs::write(path, yaml).with_context(|| format!("writing {}", path.display()))?
        }
        None => print!("{yaml}"),
    }
    eprintln!("{} tool(s) from {}", tools.len(), file.display());
    Ok(Exit::Done)
}

/// A YAML stream, one document per resource.
pub fn to_yaml(resources: &[Resource]) -> anyhow::Result<String> {
    let mut out = String::new();
    for resource in resources {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(resource)?);
    }
    Ok(out)
}

/// One Tool per operation of the document, in path order.
pub fn openapi_tools(
    document: &Value,
    upstream: &str,
    tenant: Option<&str>,
) -> anyhow::Result<Vec<Resource>> {
    let version = document
        .get("openapi")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !version.starts_with("3.") {
        bail!("not an OpenAPI 3 document (openapi: {version:?})");
    }
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        bail!("the document has no paths");
    };
    let mut tools = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (path, item) in paths {
        let item = resolve(document, item, 0);
        let shared = item.get("parameters").and_then(Value::as_array);
        for method in METHODS {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let name = format!("{upstream}.{}", operation_name(operation, method, path));
            if !names.insert(name.clone()) {
                bail!("two operations would both be named {name}");
            }
            let spec = json!({
                "description": description(operation),
                "inputSchema": input_schema(document, shared, operation),
                "approvalMode": if method == "get" { "read_only" } else { "destructive" },
                "http": {"method": method.to_ascii_uppercase(), "path": path},
            });
            let spec: ToolSpec = serde_json::from_value(spec)
                .with_context(|| format!("the tool for {} {path}", method.to_uppercase()))?;
            tools.push(Resource::Tool(Object {
                api_version: API_VERSION.into(),
                metadata: Metadata {
                    name,
                    tenant: tenant.map(str::to_owned),
                    labels: Default::default(),
                },
                spec,
            }));
        }
    }
    Ok(tools)
}

/// The operation id, or `method_path`, with anything a tool name cannot hold as `_`.
fn operation_name(operation: &Value, method: &str, path: &str) -> String {
    let raw = match operation.get("operationId").and_then(Value::as_str) {
        Some(id) if !id.trim().is_empty() => id.to_owned(),
        _ => format!("{method}_{path}"),
    };
    let mut name = String::new();
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || "-_.".contains(c) {
            c
        } else {
            '_'
        };
        if !(c == '_' && name.ends_with('_')) {
            name.push(c);
        }
    }
    let name = name.trim_matches('_');
    let name = if name.is_empty() { method } else { name };
    name.chars().take(128).collect()
}

fn description(operation: &Value) -> String {
    ["summary", "description"]
        .iter()
        .filter_map(|field| operation.get(*field).and_then(Value::as_str))
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// An object schema: the path and query parameters, then the JSON body's properties.
fn input_schema(document: &Value, shared: Option<&Vec<Value>>, operation: &Value) -> Value {
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    let own = operation.get("parameters").and_then(Value::as_array);
    // An operation's parameter overrides the path item's of the same name and place.
    let mut parameters: Vec<Value> = Vec::new();
    for parameter in shared.into_iter().chain(own).flatten() {
        let parameter = resolve(document, parameter, 0);
        let key = |p: &Value| (p.get("name").cloned(), p.get("in").cloned());
        parameters.retain(|p| key(p) != key(&parameter));
        parameters.push(parameter);
    }
    for parameter in &parameters {
        let place = parameter.get("in").and_then(Value::as_str);
        let Some(name) = parameter.get("name").and_then(Value::as_str) else {
            continue;
        };
        if !matches!(place, Some("path" | "query")) {
            continue;
        }
        let mut schema = parameter
            .get("schema")
            .map(|s| resolve(document, s, 0))
            .unwrap_or_else(|| json!({}));
        if let (Some(text), Some(object)) = (
            parameter.get("description").and_then(Value::as_str),
            schema.as_object_mut(),
        ) {
            object
                .entry("description")
                .or_insert_with(|| Value::String(text.to_owned()));
        }
        properties.insert(name.to_owned(), schema);
        if place == Some("path") || parameter.get("required") == Some(&Value::Bool(true)) {
            required.push(Value::String(name.to_owned()));
        }
    }
    let body = operation
        .get("requestBody")
        .map(|b| resolve(document, b, 0))
        .and_then(|b| b.pointer("/content/application~1json/schema").cloned())
        .map(|s| resolve(document, &s, 0));
    if let Some(body) = body {
        if let Some(props) = body.get("properties").and_then(Value::as_object) {
            for (name, schema) in props {
                properties.insert(name.clone(), schema.clone());
            }
        }
        if let Some(names) = body.get("required").and_then(Value::as_array) {
            required.extend(names.iter().cloned());
        }
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        required.dedup();
        schema["required"] = Value::Array(required);
    }
    schema
}

/// `value` with every local `$ref` (`#/...`) replaced by what it points at.
fn resolve(document: &Value, value: &Value, depth: usize) -> Value {
    match value {
        Value::Object(object) => {
            if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
                let target = reference
                    .strip_prefix('#')
                    .and_then(|pointer| document.pointer(pointer));
                return match target {
                    Some(target) if depth < MAX_REF_DEPTH => resolve(document, target, depth + 1),
                    _ => json!({}),
                };
            }
            Value::Object(
                object
                    .iter()
                    .map(|(k, v)| (k.clone(), resolve(document, v, depth)))
                    .collect(),
            )
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| resolve(document, v, depth)).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn petstore() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/openapi/petstore.yaml"
        );
        serde_norway::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_petstore_becomes_valid_tools_that_validate_accepts() {
        let tools = openapi_tools(&petstore(), "pets", Some("acme")).unwrap();
        let names: Vec<&str> = tools.iter().map(Resource::name).collect();
        assert_eq!(
            names,
            [
                "pets.listPets",
                "pets.createPet",
                "pets.showPetById",
                "pets.patch_pets_petId",
                "pets.deletePet",
            ]
        );
        for tool in &tools {
            assert!(
                tool.validate().is_empty(),
                "{tool:?}: {:?}",
                tool.validate()
            );
        }

        // What `gatehouse validate -f` reads.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pets.yaml");
        std::fs::write(&file, to_yaml(&tools).unwrap()).unwrap();
        let parsed = crate::files::load(&file).unwrap();
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(parsed.resources.len(), 5);
    }

    #[test]
    fn operations_map_to_bindings_modes_and_schemas() {
        let tools = openapi_tools(&petstore(), "pets", None).unwrap();
        let spec = |name: &str| match tools.iter().find(|t| t.name() == name) {
            Some(Resource::Tool(tool)) => tool.spec.clone(),
            other => panic!("{other:?}"),
        };
        use gatehouse_registry::ApprovalMode;
        let list = spec("pets.listPets");
        assert_eq!(list.approval_mode, Some(ApprovalMode::ReadOnly));
        let binding = list.http.unwrap();
        assert_eq!(
            (binding.method.as_str(), binding.path.as_str()),
            ("GET", "/pets")
        );
        assert_eq!(
            list.input_schema,
            json!({"type": "object", "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100,
                          "description": "How many at most."},
                "species": {"type": "string", "enum": ["cat", "dog", "bird"]},
            }})
        );
        let create = spec("pets.createPet");
        assert_eq!(create.approval_mode, Some(ApprovalMode::Destructive));
        assert_eq!(
            create.input_schema,
            json!({"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "tag": {"type": "string", "maxLength": 32},
            }})
        );
        let show = spec("pets.showPetById");
        assert_eq!(
            show.description,
            "One pet.\n\nEverything known about the pet."
        );
        assert_eq!(show.input_schema["required"], json!(["petId"]));
        let patch = spec("pets.patch_pets_petId");
        assert_eq!(patch.http.unwrap().path, "/pets/{petId}");
        assert_eq!(
            patch.input_schema["properties"]["tag"],
            json!({"type": "string", "maxLength": 32})
        );
    }

    #[test]
    fn documents_that_are_not_openapi_3_are_refused() {
        let err = openapi_tools(&json!({"swagger": "2.0", "paths": {}}), "x", None).unwrap_err();
        assert!(err.to_string().contains("not an OpenAPI 3"), "{err}");
    }
}
