//! The approval queue's fixture: a tenant `acme` with an agent, its approvers and an `http`
//! upstream `ops` backed by a `RecordingUpstream`, a second tenant `other` to show isolation, and
//! typed gRPC clients and helpers to call tools, approve calls and watch where calls and tenants
//! are. Executions are counted at the upstream (`Flow::upstream`), never from the registry.
//!
//! Principals (their API keys are the constants below):
//! - `bot`, agent of acme, acting for the end user `john`;
//! - `carol` and `dave`, approvers of acme;
//! - `john-approver`, an approver of acme whose user is `john`: in the chain of bot's calls;
//! - `other-bot` and `other-approver`, agent and approver of `other` only.

use crate::TestCluster;
use crate::upstream::RecordingUpstream;
use anyhow::{Context, bail};
use gatehouse_actors::placement::rendezvous;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_proto::v1::gateway_service_client::GatewayServiceClient;
use gatehouse_registry::registry::Placement;
use gatehouse_registry::{Call, CallId, CallState};
use gatehouse_testkit::wire::{principal, resource};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tonic::Status;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub const ACME: &str = "acme";
pub const OTHER: &str = "other";

/// Destructive and not idempotent: a call left executing by a lost home becomes unknown.
pub const DROP_TABLE: &str = "ops.drop_table";
/// Destructive but declared idempotent by the admin (`idempotent: true`): a new home may claim
/// it again.
pub const SET_FLAG: &str = "ops.set_flag";
// The upstream names them by the part after `ops.`: `drop_table`, `set_flag` (for `hold`).

pub const BOT: &str = "gate_flow-bot-000000000000000000000000";
pub const CAROL: &str = "gate_flow-carol-0000000000000000000000";
pub const DAVE: &str = "gate_flow-dave-00000000000000000000000";
pub const JOHN_APPROVER: &str = "gate_flow-john-approver-00000000000000";
pub const OTHER_BOT: &str = "gate_flow-other-bot-000000000000000000";
pub const OTHER_APPROVER: &str = "gate_flow-other-approver-0000000000000";

/// The tenant policy's approval settings.
#[derive(Debug, Clone, Copy)]
pub struct Approvals {
    /// N of M.
    pub required: u32,
    /// How long a pending call waits for its approvals; the registry's default when `None`.
    pub ttl_seconds: Option<u64>,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals {
            required: 1,
            ttl_seconds: None,
        }
    }
}

/// A set-up cluster's fixture: the upstream every `ops.*` call reaches.
#[derive(Debug)]
pub struct Flow {
    pub upstream: RecordingUpstream,
}

impl Flow {
    /// Applies the tenants, principals, upstream, tools and a policy needing one approval, and
    /// waits until every running node has them and both tenants have a home.
    pub fn setup(cluster: &TestCluster) -> anyhow::Result<Flow> {
        Self::setup_with(cluster, Approvals::default())
    }

    pub fn setup_with(cluster: &TestCluster, approvals: Approvals) -> anyhow::Result<Flow> {
        let upstream = RecordingUpstream::start();
        let leader = cluster.leader(Duration::from_secs(10))?;
        let index = cluster.block_on(
            cluster
                .admin(leader)
                .apply(resources(&upstream.url(), approvals)),
        )?;
        cluster.wait_converged(index, Duration::from_secs(10))?;
        cluster.wait_until("both tenants placed on every node", SETTLE, |c| {
            c.running().into_iter().all(|id| {
                [ACME, OTHER]
                    .iter()
                    .all(|t| placement_on(c, id, t).is_some())
            })
        })?;
        Ok(Flow { upstream })
    }

    /// Replaces acme's policy. Calls proposed under the old one and claimed after the change
    /// fail "policy changed", so change it before making the calls it should govern.
    pub fn set_approvals(cluster: &TestCluster, approvals: Approvals) -> anyhow::Result<()> {
        let leader = cluster.leader(Duration::from_secs(10))?;
        let index = cluster.block_on(
            cluster
                .admin(leader)
                .apply(vec![approval_policy(approvals)]),
        )?;
        cluster.wait_converged(index, Duration::from_secs(10))?;
        Ok(())
    }
}

/// How long setup and settling may take.
const SETTLE: Duration = Duration::from_secs(15);

/// acme's policy `approvals`.
pub fn approval_policy(approvals: Approvals) -> pb::Resource {
    let mut requirement = json!({"required": approvals.required});
    if let Some(ttl) = approvals.ttl_seconds {
        requirement["ttlSeconds"] = ttl.into();
    }
    resource(
        "Policy",
        "approvals",
        Some(ACME),
        json!({"approvals": requirement}),
    )
}

fn resources(upstream_url: &str, approvals: Approvals) -> Vec<pb::Resource> {
    vec![
        resource("Tenant", ACME, None, json!({})),
        resource("Tenant", OTHER, None, json!({})),
        principal("bot", BOT, json!({"acme": ["agent"]}), Some("john")),
        principal("carol", CAROL, json!({"acme": ["approver"]}), None),
        principal("dave", DAVE, json!({"acme": ["approver"]}), None),
        principal(
            "john-approver",
            JOHN_APPROVER,
            json!({"acme": ["approver"]}),
            Some("john"),
        ),
        principal("other-bot", OTHER_BOT, json!({"other": ["agent"]}), None),
        principal(
            "other-approver",
            OTHER_APPROVER,
            json!({"other": ["approver"]}),
            None,
        ),
        resource(
            "Upstream",
            "ops",
            Some(ACME),
            json!({"type": "http", "url": upstream_url, "timeoutMs": 60_000}),
        ),
        resource(
            "Tool",
            DROP_TABLE,
            Some(ACME),
            json!({
                "description": "Drops a table.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"table": {"type": "string"}, "n": {"type": "integer"}},
                    "required": ["table"],
                },
                "approvalMode": "destructive",
            }),
        ),
        resource(
            "Tool",
            SET_FLAG,
            Some(ACME),
            json!({
                "description": "Sets a feature flag; setting it twice is setting it once.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"flag": {"type": "string"}, "on": {"type": "boolean"}},
                    "required": ["flag"],
                },
                "idempotent": true,
                "approvalMode": "destructive",
            }),
        ),
        approval_policy(approvals),
    ]
}

/// Arguments for `ops.drop_table`, different on every call.
pub fn table(name: &str) -> Value {
    static N: AtomicU64 = AtomicU64::new(0);
    json!({"table": name, "n": N.fetch_add(1, Ordering::Relaxed)})
}

/// Arguments for `ops.set_flag`.
pub fn flag(name: &str) -> Value {
    json!({"flag": name, "on": true})
}

/// Adds the caller's API key to every request.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(..)")
    }
}

pub type Authed = InterceptedService<Channel, Bearer>;

/// A channel to the node that connects on first use and again after the node restarts.
fn channel(cluster: &TestCluster, node: u64) -> Channel {
    let endpoint = Channel::from_shared(format!("http://{}", cluster.addr(node)))
        .expect("a node's address is a URI")
        .connect_timeout(Duration::from_secs(2));
    // The lazy channel's worker runs on the harness's client runtime.
    cluster.block_on(async { endpoint.connect_lazy() })
}

fn bearer(key: &str) -> Bearer {
    Bearer(format!("Bearer {key}").parse().expect("API keys are ASCII"))
}

/// `GatewayService` on `node`, as the principal of `key`.
pub fn gateway(cluster: &TestCluster, node: u64, key: &str) -> GatewayServiceClient<Authed> {
    GatewayServiceClient::with_interceptor(channel(cluster, node), bearer(key))
}

/// `ApprovalService` on `node`, as the principal of `key`.
pub fn approvals(cluster: &TestCluster, node: u64, key: &str) -> ApprovalServiceClient<Authed> {
    ApprovalServiceClient::with_interceptor(channel(cluster, node), bearer(key))
}

/// Calls a tool through `node`'s gateway.
pub fn call_tool(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    tenant: &str,
    tool: &str,
    args: &Value,
) -> Result<pb::CallEnvelope, Status> {
    call_tool_keyed(cluster, node, key, tenant, tool, args, None)
}

/// `call_tool` with an idempotency key.
pub fn call_tool_keyed(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    tenant: &str,
    tool: &str,
    args: &Value,
    idempotency_key: Option<&str>,
) -> Result<pb::CallEnvelope, Status> {
    let mut client = gateway(cluster, node, key);
    let request = pb::CallToolRequest {
        tenant: tenant.into(),
        tool: tool.into(),
        arguments_json: args.to_string(),
        idempotency_key: idempotency_key.map(str::to_owned),
    };
    let answer = cluster.block_on(client.call_tool(request))?.into_inner();
    answer
        .envelope
        .ok_or_else(|| Status::internal("a CallTool answer without an envelope"))
}

/// bot calls `tool` in acme through `node`; the call must wait for approval. Its id.
pub fn propose(
    cluster: &TestCluster,
    node: u64,
    tool: &str,
    args: &Value,
) -> anyhow::Result<String> {
    let envelope = call_tool(cluster, node, BOT, ACME, tool, args)
        .with_context(|| format!("calling {tool} through node {node}"))?;
    if envelope.state != pb::CallState::Pending as i32 {
        bail!("{tool} should wait for approval: {envelope:?}");
    }
    Ok(envelope.call_id)
}

/// Reads the call through `node`'s `ApprovalService`.
pub fn get(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
) -> Result<pb::CallRecord, Status> {
    let mut client = approvals(cluster, node, key);
    let request = pb::GetCallRecordRequest {
        call_id: call_id.into(),
    };
    let answer = cluster.block_on(client.get(request))?.into_inner();
    answer
        .call
        .ok_or_else(|| Status::internal("a Get answer without a record"))
}

/// Approves the arguments the approver reads on the call, through `node`.
pub fn approve(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
) -> Result<pb::CallRecord, Status> {
    let reviewed = get(cluster, node, key, call_id)?;
    approve_hash(cluster, node, key, call_id, &reviewed.args_sha256)
}

/// Approves the call naming `args_sha256` as the arguments reviewed.
pub fn approve_hash(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
    args_sha256: &str,
) -> Result<pb::CallRecord, Status> {
    let mut client = approvals(cluster, node, key);
    let request = pb::ApproveCallRequest {
        call_id: call_id.into(),
        args_sha256: args_sha256.into(),
        reason: "reviewed".into(),
    };
    let answer = cluster.block_on(client.approve(request))?.into_inner();
    answer
        .call
        .ok_or_else(|| Status::internal("an Approve answer without a record"))
}

/// An approver settles an outcome-unknown call.
pub fn resolve(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
    outcome: pb::ResolveOutcome,
    note: &str,
) -> Result<pb::CallRecord, Status> {
    let mut client = approvals(cluster, node, key);
    let request = pb::ResolveCallRequest {
        call_id: call_id.into(),
        outcome: outcome as i32,
        reason: note.into(),
    };
    let answer = cluster.block_on(client.resolve(request))?.into_inner();
    answer
        .call
        .ok_or_else(|| Status::internal("a Resolve answer without a record"))
}

/// The running node that has applied the most: the freshest view a test can read locally.
fn freshest(cluster: &TestCluster) -> Option<u64> {
    cluster
        .running()
        .into_iter()
        .max_by_key(|id| cluster.applied(*id))
}

/// The tenant's placement as node `id` has applied it.
pub fn placement_on(cluster: &TestCluster, id: u64, tenant: &str) -> Option<Placement> {
    cluster.node(id).cluster.registry.read().placement(tenant)
}

/// The tenant's placement, from the running node that has applied the most.
pub fn home_of(cluster: &TestCluster, tenant: &str) -> Option<Placement> {
    placement_on(cluster, freshest(cluster)?, tenant)
}

/// The call's record as node `id` has applied it.
pub fn record_on(cluster: &TestCluster, id: u64, call_id: &str) -> Option<Call> {
    cluster
        .node(id)
        .cluster
        .registry
        .read()
        .call(&CallId(call_id.to_owned()))
        .cloned()
}

/// The call's record, from the running node that has applied the most.
pub fn record(cluster: &TestCluster, call_id: &str) -> Option<Call> {
    record_on(cluster, freshest(cluster)?, call_id)
}

/// Waits until the freshest node holds the call in `state`; the record then.
pub fn wait_state(
    cluster: &TestCluster,
    call_id: &str,
    state: CallState,
    timeout: Duration,
) -> anyhow::Result<Call> {
    let what = format!("call {call_id} {state}");
    cluster
        .wait_until(&what, timeout, |c| {
            record(c, call_id).is_some_and(|r| r.state == state)
        })
        .with_context(|| {
            format!(
                "the call is {:?}",
                record(cluster, call_id).map(|r| r.state)
            )
        })?;
    record(cluster, call_id).context("the call is gone")
}

/// Waits until the freshest node's placement of the tenant satisfies `done`; that placement.
pub fn wait_placement(
    cluster: &TestCluster,
    tenant: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Placement) -> bool,
) -> anyhow::Result<Placement> {
    cluster
        .wait_until(what, timeout, |c| {
            home_of(c, tenant).as_ref().is_some_and(&done)
        })
        .with_context(|| format!("{tenant} is placed {:?}", home_of(cluster, tenant)))?;
    home_of(cluster, tenant).context("no placement")
}

/// Waits until every running node agrees on the tenant's placement, no move is under way, and
/// the home is the one rendezvous hashing picks among the voters; that placement.
pub fn wait_settled(
    cluster: &TestCluster,
    tenant: &str,
    timeout: Duration,
) -> anyhow::Result<Placement> {
    cluster
        .wait_until(&format!("{tenant} settled"), timeout, |c| {
            let running = c.running();
            let seen: Vec<Option<Placement>> = running
                .iter()
                .map(|id| placement_on(c, *id, tenant))
                .collect();
            match seen.first() {
                Some(Some(p)) => {
                    let voters = c.membership(running[0]).0;
                    p.moving_to.is_none()
                        && rendezvous(tenant, &voters) == Some(p.home)
                        && running.contains(&p.home)
                        && seen.iter().all(|s| s == &seen[0])
                }
                _ => false,
            }
        })
        .with_context(|| format!("{tenant} is placed {:?}", home_of(cluster, tenant)))?;
    home_of(cluster, tenant).context("no placement")
}

/// Node 2 bootstraps and leads; rendezvous hashing over {1, 2, 3} makes node 1 acme's home, so
/// a test can lose the home without losing the leader.
pub const NODES: [u64; 3] = [2, 3, 1];

/// Who is who in a settled three-node cluster.
#[derive(Debug, Clone, Copy)]
pub struct Roles {
    /// acme's home.
    pub home: u64,
    pub leader: u64,
    /// The node that is neither.
    pub follower: u64,
}

/// A three-node cluster (`NODES`) with the fixture applied and acme settled on its home.
pub fn start(approvals: Approvals) -> anyhow::Result<(TestCluster, Flow)> {
    let cluster = TestCluster::new(&NODES)?;
    let flow = Flow::setup_with(&cluster, approvals)?;
    Ok((cluster, flow))
}

/// A one-node cluster with the fixture applied: for attacks that need no failover.
pub fn start_one(approvals: Approvals) -> anyhow::Result<(TestCluster, Flow)> {
    let cluster = TestCluster::new(&[1])?;
    let flow = Flow::setup_with(&cluster, approvals)?;
    Ok((cluster, flow))
}

/// The home, the leader and the third node; the home must not lead.
pub fn roles(cluster: &TestCluster) -> anyhow::Result<Roles> {
    let home = wait_settled(cluster, ACME, SETTLE)?.home;
    let leader = cluster.leader(Duration::from_secs(10))?;
    if home == leader {
        bail!("acme's home {home} leads: the tests need them apart");
    }
    let follower = cluster
        .running()
        .into_iter()
        .find(|n| *n != home && *n != leader)
        .context("a third running node")?;
    Ok(Roles {
        home,
        leader,
        follower,
    })
}

/// Gives a duplicate invocation, or a premature move, the time to show up before the test
/// counts or looks: a negative can only be observed over some time. Never used to wait for a
/// condition.
pub fn grace() {
    std::thread::sleep(Duration::from_millis(400));
}

/// Waits until the upstream has received `n` requests for the call.
pub fn wait_invoked(flow: &Flow, call_id: &str, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let reached = flow.upstream.wait_until(timeout, |all| {
        all.iter()
            .filter(|i| i.call_id.as_deref() == Some(call_id))
            .count()
            >= n
    });
    if !reached {
        bail!(
            "call {call_id}: {} of {n} requests reached the upstream within {timeout:?}",
            flow.upstream.count_for(call_id)
        );
    }
    Ok(())
}
