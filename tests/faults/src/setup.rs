//! What the campaign declares in the cluster: one tenant with an agent, two approvers, an HTTP
//! upstream (the recording upstream outside the cluster) and one destructive tool that needs two
//! approvals; and the registers the registry workload writes, as tenant skills.

use gatehouse_proto::v1 as pb;
use gatehouse_testkit::wire::{principal, resource};
use serde_json::json;

pub const TENANT: &str = "acme";
pub const TOOL: &str = "ops.drop_table";
pub const AGENT: &str = "gate_faults-agent-0000000000000000000000";
pub const CAROL: &str = "gate_faults-carol-0000000000000000000000";
pub const DAVE: &str = "gate_faults-dave-00000000000000000000000";

/// How many registers the registry workload shares: few enough that writes and reads of one
/// key overlap.
pub const REGISTERS: usize = 6;

pub fn register(k: usize) -> String {
    format!("reg-{k}")
}

/// The register `key` holding `value`: a tenant skill whose instructions carry the value.
pub fn register_resource(key: &str, value: u64) -> pb::Resource {
    resource(
        "Skill",
        key,
        Some(TENANT),
        json!({
            "scope": {"type": "tenant", "tenant": TENANT},
            "priority": 10,
            "instructions": format!("value {value}"),
        }),
    )
}

/// The value a register's stored skill holds.
pub fn register_value(resource: &pb::Resource) -> Option<u64> {
    let spec: serde_json::Value = serde_json::from_str(&resource.spec_json).ok()?;
    spec["instructions"]
        .as_str()?
        .strip_prefix("value ")?
        .parse()
        .ok()
}

pub fn key_of(name: &str) -> pb::ResourceKey {
    pb::ResourceKey {
        kind: "Skill".into(),
        tenant: Some(TENANT.into()),
        name: name.into(),
    }
}

pub fn resources(upstream_url: &str) -> Vec<pb::Resource> {
    vec![
        resource("Tenant", TENANT, None, json!({})),
        principal("agent", AGENT, json!({TENANT: ["agent"]}), None),
        principal("carol", CAROL, json!({TENANT: ["approver"]}), None),
        principal("dave", DAVE, json!({TENANT: ["approver"]}), None),
        resource(
            "Upstream",
            "ops",
            Some(TENANT),
            json!({"type": "http", "url": upstream_url, "timeoutMs": 10_000}),
        ),
        resource(
            "Tool",
            TOOL,
            Some(TENANT),
            json!({
                "description": "Drops a table.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"table": {"type": "string"}},
                    "required": ["table"],
                },
                "approvalMode": "destructive",
            }),
        ),
        resource(
            "Policy",
            "approvals",
            Some(TENANT),
            json!({"approvals": {"required": 2}}),
        ),
    ]
}
