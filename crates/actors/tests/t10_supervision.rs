//! The supervision tree on one node, over an in-memory cluster that applies every command
//! through the real registry (no Raft, no network): the home claims and runs approved calls once,
//! a panicking tenant actor comes back and serves the next call, and a restart loop escalates.

use futures::future::BoxFuture;
use gatehouse_actors::{
    ActorSettings, Actors, ClusterPort, ExecError, Execution, Executor, Health, NewTenantPlacer,
    ProposeError, ToolOutput,
};
use gatehouse_raft_store::{AppliedEntry, SharedRegistry};
use gatehouse_registry::call::{CallId, CallState, NodeId};
use gatehouse_registry::plan::{CallRequest, plan_call};
use gatehouse_registry::{Command, Proposal, Registry, Response, documents};
use gatehouse_testkit::yaml;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

const NODE: NodeId = 1;

/// One node that is its own leader: proposals apply at once, in order, and are broadcast like the
/// state machine does.
struct LocalCluster {
    registry: SharedRegistry,
    events: broadcast::Sender<AppliedEntry>,
    index: Mutex<u64>,
}

impl LocalCluster {
    fn apply(&self, command: Command) -> Result<Response, ProposeError> {
        let mut index = self.index.lock().unwrap();
        *index += 1;
        let proposal = Proposal {
            request_id: uuid::Uuid::new_v4(),
            at: gatehouse_actors::now_ms(),
            command,
        };
        let (result, calls) = {
            let mut registry = self.registry.write().unwrap();
            let result = registry.apply(*index, &proposal);
            let calls = match &result {
                Ok(Response::Call { call_id, .. }) => registry.call(call_id).cloned(),
                _ => None,
            };
            (result, calls.into_iter().collect::<Vec<_>>())
        };
        let _ = self.events.send(AppliedEntry {
            index: *index,
            proposal: Arc::new(proposal),
            result: result.clone(),
            calls: Arc::new(calls),
        });
        result.map_err(|e| ProposeError::Refused(e.to_string()))
    }
}

struct Port(Arc<LocalCluster>);

impl ClusterPort for Port {
    fn node_id(&self) -> NodeId {
        NODE
    }
    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>> {
        let result = self.0.apply(command);
        Box::pin(async move { result })
    }
    fn is_leader(&self) -> bool {
        true
    }
    fn voters(&self) -> Vec<NodeId> {
        vec![NODE]
    }
    fn reachable(&self, _: NodeId, _: Duration) -> bool {
        true
    }
    fn place_new_tenants(&self, _: Option<NewTenantPlacer>) {}
}

/// Counts invocations per call: what the upstream would see.
#[derive(Default)]
struct CountingExecutor {
    calls: Mutex<Vec<CallId>>,
    seen_context: Mutex<Vec<Option<String>>>,
}

struct Exec(Arc<CountingExecutor>);

impl Executor for Exec {
    fn execute(&self, execution: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
        self.0.calls.lock().unwrap().push(execution.call_id.clone());
        self.0
            .seen_context
            .lock()
            .unwrap()
            .push(execution.skill_context.clone());
        Box::pin(async move {
            Ok(ToolOutput {
                result_json: format!(r#"{{"content":[],"ran":"{}"}}"#, execution.call_id),
                is_error: false,
            })
        })
    }
}

const SETUP: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: bot}
spec:
  apiKeySha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
  roles: {acme: [agent]}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: carol}
spec:
  apiKeySha256: 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752
  roles: {acme: [approver]}
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {name: ops}
spec: {type: builtin}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: ops.drop_table, tenant: acme}
spec: {approvalMode: destructive}
---
apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: careful}
spec:
  scope: {type: tenant, tenant: acme}
  instructions: Double-check the table name.
"#;

struct Fixture {
    cluster: Arc<LocalCluster>,
    executor: Arc<CountingExecutor>,
    actors: Actors,
    next: AtomicU64,
}

async fn fixture(settings: ActorSettings) -> Fixture {
    let registry: SharedRegistry = SharedRegistry::new(Registry::new());
    let (events, _) = broadcast::channel(1024);
    let cluster = Arc::new(LocalCluster {
        registry: registry.clone(),
        events: events.clone(),
        index: Mutex::new(0),
    });
    cluster
        .apply(Command::Put {
            resources: yaml::resources(SETUP),
        })
        .unwrap();
    let executor = Arc::new(CountingExecutor::default());
    let actors = Actors::start(
        settings,
        registry,
        events.subscribe(),
        Arc::new(Port(cluster.clone())),
        Arc::new(Exec(executor.clone())),
    )
    .await
    .unwrap();
    Fixture {
        cluster,
        executor,
        actors,
        next: AtomicU64::new(1),
    }
}

fn fast() -> ActorSettings {
    ActorSettings {
        review_every: Duration::from_millis(20),
        restart_backoff: Duration::from_millis(10),
        restart_limit: 3,
        restart_window: Duration::from_secs(30),
        ..ActorSettings::default()
    }
}

impl Fixture {
    /// Proposes a destructive call; returns its id and argument hash.
    fn pending_call(&self) -> (CallId, String) {
        let id = CallId::from_random(self.next.fetch_add(1, Ordering::Relaxed) as u128);
        let args = serde_json::json!({"table": "users"});
        let plan = {
            let registry = self.cluster.registry.read();
            plan_call(
                &registry,
                &CallRequest {
                    id: id.clone(),
                    at: gatehouse_actors::now_ms(),
                    tenant: "acme",
                    principal: "bot",
                    end_user: None,
                    a2a_peer: None,
                    tool: "ops.drop_table",
                    arguments: &args,
                    idempotency_key: None,
                    requested_mode: None,
                },
            )
            .unwrap()
        };
        assert!(plan.replicated);
        let sha = plan.call.args_sha256.clone();
        self.cluster
            .apply(Command::Propose {
                call: Box::new(plan.call),
            })
            .unwrap();
        (id, sha)
    }

    /// Proposes a destructive call and approves it; returns its id.
    fn approved_call(&self) -> CallId {
        let (id, sha) = self.pending_call();
        self.cluster
            .apply(Command::Approve {
                user: None,
                call_id: id.clone(),
                approver: "carol".into(),
                args_sha256: sha,
                note: "ok".into(),
            })
            .unwrap();
        id
    }

    fn state(&self, id: &CallId) -> CallState {
        self.cluster.registry.read().call(id).unwrap().state
    }

    async fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn invocations(&self, id: &CallId) -> usize {
        self.executor
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == id)
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_home_runs_an_approved_call_once_with_the_tenants_skills() {
    let f = fixture(fast()).await;
    let id = f.approved_call();
    f.wait_for("the call to succeed", || {
        f.state(&id) == CallState::Succeeded
    })
    .await;
    // Give any duplicate a chance to show itself before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.invocations(&id), 1);
    assert_eq!(
        f.executor.seen_context.lock().unwrap()[0].as_deref(),
        Some("Double-check the table name.")
    );
    f.actors.stop(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tenant_actor_is_restarted_and_serves_the_next_call() {
    let f = fixture(fast()).await;
    let handle = f.actors.tenant("acme").await.unwrap();
    handle.inject_panic();
    f.wait_for("a restart", || f.actors.restarts() == 1).await;
    f.wait_for("the tenant's actor back", || f.actors.active_tenants() == 1)
        .await;
    let id = f.approved_call();
    f.wait_for("the call to succeed", || {
        f.state(&id) == CallState::Succeeded
    })
    .await;
    assert_eq!(f.invocations(&id), 1);
    let handle = f.actors.tenant("acme").await.unwrap();
    assert_eq!(
        handle.skill_context("ops.drop_table", None).as_deref(),
        Some("Double-check the table name.")
    );
    assert_eq!(*f.actors.health().borrow(), Health::Ready);
    f.actors.stop(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loop_escalates_instead_of_spinning() {
    let settings = fast();
    let limit = settings.restart_limit as u64;
    let f = fixture(settings).await;
    let handle = f.actors.tenant("acme").await.unwrap();
    f.actors.fail_starts("acme", true);
    handle.inject_panic();
    let mut health = f.actors.health();
    tokio::time::timeout(
        Duration::from_secs(10),
        health.wait_for(|h| *h != Health::Ready),
    )
    .await
    .expect("the node is marked not ready")
    .unwrap();
    let restarts = f.actors.restarts();
    assert_eq!(restarts, limit, "restarted up to the limit, then gave up");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(f.actors.restarts(), restarts, "no restart after giving up");
    assert!(f.actors.tenant("acme").await.is_err());
    f.actors.stop(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_actor_passivates_unless_it_is_home_to_unfinished_calls() {
    let f = fixture(ActorSettings {
        passivate_after: Duration::from_millis(200),
        ..fast()
    })
    .await;
    f.wait_for("the leader's loop to place acme here", || {
        f.cluster.registry.read().placement("acme").map(|p| p.home) == Some(NODE)
    })
    .await;
    // A pending call keeps its home's actor alive however idle it is.
    let (id, _) = f.pending_call();
    f.actors.tenant("acme").await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(f.actors.active_tenants(), 1, "home to a pending call");
    f.cluster
        .apply(Command::Reject {
            user: None,
            call_id: id,
            approver: "carol".into(),
            reason: "no".into(),
        })
        .unwrap();
    f.wait_for("the idle actor to stop", || f.actors.active_tenants() == 0)
        .await;
    assert_eq!(f.actors.restarts(), 0, "passivation is not a failure");
    f.actors.stop(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_change_is_in_the_next_resolution_without_waiting() {
    let f = fixture(fast()).await;
    let handle = f.actors.tenant("acme").await.unwrap();
    let before = handle.skill_context("ops.drop_table", None);
    assert_eq!(before.as_deref(), Some("Double-check the table name."));
    let parsed = documents::parse(
        "change.yaml",
        r#"
apiVersion: gatehouse.dev/v1
kind: Skill
metadata: {name: careful}
spec:
  scope: {type: tenant, tenant: acme}
  instructions: Ask before dropping anything.
"#,
    );
    f.cluster
        .apply(Command::Put {
            resources: parsed.into_resources(),
        })
        .unwrap();
    assert_eq!(
        handle.skill_context("ops.drop_table", None).as_deref(),
        Some("Ask before dropping anything.")
    );
    f.actors.stop(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_purges_finished_calls_after_the_retention() {
    let f = fixture(ActorSettings {
        retention: Duration::from_millis(100),
        purge_every: Duration::from_millis(100),
        ..fast()
    })
    .await;
    let id = f.approved_call();
    f.wait_for("the call to succeed", || {
        f.state(&id) == CallState::Succeeded
    })
    .await;
    f.wait_for("the finished call purged", || {
        f.cluster.registry.read().call(&id).is_none()
    })
    .await;
    f.actors.stop(Duration::from_secs(1)).await;
}
