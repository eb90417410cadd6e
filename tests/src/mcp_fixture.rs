//! The MCP front's fixture: a one-node cluster whose tenant `acme` has a trusted MCP upstream
//! `demo` backed by an `McpUpstream` (its tools discovered: `demo.echo` read-only,
//! `demo.transfer` destructive, `demo.add` read-only), a skill at tenant and at tool level, and
//! a second tenant `globex` with its own upstream `other` on the same server, to show isolation.
//!
//! Principals (their API keys are the constants below):
//! - `bot`, agent of acme, acting for the end user `john`, who is a principal of acme himself
//!   (by JWT), so that tasks bot delegates for him pass the user's check;
//! - `carol`, approver of acme;
//! - `gina`, agent of globex only;
//! - `lone`, agent of acme acting for `mallory`, a user acme does not know.

use crate::flow;
use crate::mcp_upstream::McpUpstream;
use crate::{NodeOptions, TestCluster};
use anyhow::Context;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::{CallState, Kind, ResourceKey};
use gatehouse_testkit::wire::{principal, resource};
use serde_json::json;
use std::time::Duration;

pub const ACME: &str = "acme";
pub const GLOBEX: &str = "globex";

pub const BOT: &str = "gate_mcp-bot-00000000000000000000000000";
pub const CAROL: &str = "gate_mcp-carol-000000000000000000000000";
pub const GINA: &str = "gate_mcp-gina-0000000000000000000000000";
/// `lone`, agent of acme acting for `mallory`, who holds no role in acme.
pub const LONE: &str = "gate_mcp-lone-0000000000000000000000000";

pub const ECHO: &str = "demo.echo";
pub const TRANSFER: &str = "demo.transfer";
pub const ADD: &str = "demo.add";

/// What acme's skills resolve to for `demo.echo`: the tenant skill, then the tool skill.
pub const ECHO_CONTEXT: &str = "Answer in one line.\nEcho exactly what you were given.";

/// How long setup, discovery and a followed call may take.
pub const SETTLE: Duration = Duration::from_secs(30);

#[derive(Debug)]
pub struct McpFixture {
    pub cluster: TestCluster,
    pub upstream: McpUpstream,
}

impl McpFixture {
    pub fn start() -> anyhow::Result<McpFixture> {
        McpFixture::start_with(McpSettings::default())
    }

    /// The fixture, its node's `/mcp` front set up with `mcp`.
    pub fn start_with(mcp: McpSettings) -> anyhow::Result<McpFixture> {
        let options = NodeOptions {
            mcp,
            ..NodeOptions::default()
        };
        let cluster = TestCluster::with_options(&[1], options)?;
        let upstream = McpUpstream::start();
        let index = cluster.block_on(cluster.admin(1).apply(resources(&upstream.url())))?;
        cluster.wait_for_applied(1, index, SETTLE)?;
        cluster.wait_all_placed(SETTLE)?;
        // The leader lists each MCP upstream when it is put and proposes its tools.
        cluster.wait_until("the upstreams' tools discovered", SETTLE, |c| {
            [(ACME, "demo"), (GLOBEX, "other")]
                .iter()
                .all(|(tenant, up)| {
                    ["echo", "transfer", "add"]
                        .iter()
                        .all(|tool| has_tool(c, tenant, &format!("{up}.{tool}")))
                })
        })?;
        Ok(McpFixture { cluster, upstream })
    }

    /// The node's MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.cluster.node(1).http_addr)
    }

    /// Waits until acme has an unfinished call of `tool` in `state`; its id.
    pub fn wait_for_call(&self, tool: &str, state: CallState) -> anyhow::Result<String> {
        let mut found = None;
        self.cluster
            .wait_until(&format!("a {state:?} call of {tool}"), SETTLE, |c| {
                let registry = c.node(1).cluster.registry.read();
                found = registry
                    .calls_of(ACME)
                    .find(|call| call.spec.tool == tool && call.state == state)
                    .map(|call| call.spec.id.0.clone());
                found.is_some()
            })?;
        found.context("no call found")
    }

    /// carol approves the call over gRPC, naming the arguments she read.
    pub fn approve(&self, call_id: &str) -> anyhow::Result<()> {
        flow::approve(&self.cluster, 1, CAROL, call_id)?;
        Ok(())
    }

    /// carol rejects the call over gRPC.
    pub fn reject(&self, call_id: &str, reason: &str) -> anyhow::Result<()> {
        let mut client = flow::approvals(&self.cluster, 1, CAROL);
        let request = pb::RejectCallRequest {
            call_id: call_id.into(),
            reason: reason.into(),
        };
        self.cluster.block_on(client.reject(request))?;
        Ok(())
    }

    /// The last `n` records of the node's audit log, once what it holds is on disk.
    pub fn audit_tail(&self, n: usize) -> anyhow::Result<Vec<gatehouse_audit::Record>> {
        let node = self.cluster.node(1);
        self.cluster.block_on(node.audit.flush())?;
        let files = gatehouse_cluster::node_files::NodeFiles::new(&self.cluster.data_dir(1))?;
        Ok(gatehouse_audit::tail(&files.audit_dir(), n)?)
    }

    /// The tool-call audit records of acme (or the tenant given) naming `tool`.
    pub fn audited_calls(
        &self,
        tenant: &str,
        tool: &str,
    ) -> anyhow::Result<Vec<gatehouse_audit::Record>> {
        Ok(self
            .audit_tail(10_000)?
            .into_iter()
            .filter(|r| {
                r.entry.kind == gatehouse_audit::Kind::ToolCall
                    && r.entry.tenant.as_deref() == Some(tenant)
                    && r.entry.target.as_deref() == Some(tool)
            })
            .collect())
    }
}

fn has_tool(cluster: &TestCluster, tenant: &str, name: &str) -> bool {
    let key = ResourceKey {
        kind: Kind::Tool,
        tenant: Some(tenant.to_owned()),
        name: name.to_owned(),
    };
    cluster.node(1).cluster.registry.read().get(&key).is_some()
}

fn resources(upstream_url: &str) -> Vec<pb::Resource> {
    let upstream =
        json!({"type": "mcp", "url": upstream_url, "trusted": true, "timeoutMs": 20_000});
    vec![
        resource("Tenant", ACME, None, json!({})),
        resource("Tenant", GLOBEX, None, json!({})),
        principal("bot", BOT, json!({ACME: ["agent"]}), Some("john")),
        principal("carol", CAROL, json!({ACME: ["approver"]}), None),
        principal("gina", GINA, json!({GLOBEX: ["agent"]}), None),
        principal("lone", LONE, json!({ACME: ["agent"]}), Some("mallory")),
        // john himself, as an identity provider knows him: the user bot acts for.
        resource(
            "Principal",
            "john",
            None,
            json!({"jwt": {"issuer": "https://id.acme.example", "subject": "john"},
                   "roles": {ACME: ["agent"]}}),
        ),
        resource("Upstream", "demo", Some(ACME), upstream.clone()),
        resource("Upstream", "other", Some(GLOBEX), upstream),
        resource(
            "Skill",
            "acme-brief",
            None,
            json!({
                "scope": {"type": "tenant", "tenant": ACME},
                "priority": 10,
                "instructions": "Answer in one line.",
            }),
        ),
        resource(
            "Skill",
            "echo-exact",
            None,
            json!({
                "scope": {"type": "tool", "tenant": ACME, "toolPattern": ECHO},
                "priority": 10,
                "instructions": "Echo exactly what you were given.",
            }),
        ),
        resource(
            "Policy",
            "approvals",
            Some(ACME),
            json!({"approvals": {"required": 1}}),
        ),
    ]
}
