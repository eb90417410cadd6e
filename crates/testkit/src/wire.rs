//! Resources as `RegistryService.Apply` takes them, requests that carry a caller's key, and the
//! JSON-RPC message in an MCP answer.

use gatehouse_proto::v1 as pb;
use gatehouse_registry::canonical::sha256_hex;
use serde_json::{Value, json};

/// A resource of `kind` named `name`, in `tenant` if it has one, with `spec` as its JSON.
pub fn resource(kind: &str, name: &str, tenant: Option<&str>, spec: Value) -> pb::Resource {
    pb::Resource {
        kind: kind.into(),
        name: name.into(),
        tenant: tenant.map(str::to_owned),
        labels: Default::default(),
        spec_json: spec.to_string(),
        generation: 0,
    }
}

/// A principal who signs in with the API key `key`, holding `roles` (`{"acme": ["agent"]}`),
/// bound to `user` when given.
pub fn principal(name: &str, key: &str, roles: Value, user: Option<&str>) -> pb::Resource {
    let mut spec = json!({"apiKeySha256": sha256_hex(key.as_bytes()), "roles": roles});
    if let Some(user) = user {
        spec["user"] = user.into();
    }
    resource("Principal", name, None, spec)
}

/// `message` as a gRPC request of the principal whose API key is `key`.
pub fn bearer<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {key}").parse().expect("API keys are ASCII"),
    );
    request
}

/// The JSON-RPC message of an MCP response body, whether sent as JSON or as an event stream.
pub fn jsonrpc_message(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v.get("jsonrpc").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC message in {body}"))
}
