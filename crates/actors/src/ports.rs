//! What the actors need from the rest of the node, as traits: the node's cluster handle proposes
//! commands and says who leads, an executor reaches upstreams. Tests can back both with fakes.

use futures::future::BoxFuture;
use gatehouse_registry::call::{CallId, NodeId};
use gatehouse_registry::{Command, Response};
use std::sync::Arc;
use std::time::Duration;

/// Why a proposal did not commit.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// The state machine refused the command; nothing changed.
    #[error("refused: {0}")]
    Refused(String),
    /// No leader, a timeout, a lost connection: it may or may not have committed.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// The leader's first placement steps for tenants that do not exist yet (nor have a placement
/// record), given their names: what the node's batcher writes in the log entry of the puts that
/// create them ([`ClusterPort::place_new_tenants`]).
pub type NewTenantPlacer = Arc<dyn Fn(&[&str]) -> Vec<Command> + Send + Sync>;

/// The node's view of the cluster.
pub trait ClusterPort: Send + Sync + 'static {
    fn node_id(&self) -> NodeId;
    /// Proposes a command through Raft (forwarded to the leader when this node is not it) and
    /// waits until it is applied on this node.
    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>>;
    /// Whether this node is the leader now.
    fn is_leader(&self) -> bool;
    /// The current voters.
    fn voters(&self) -> Vec<NodeId>;
    /// The cluster's learners, as this node's Raft metrics say: among them, a voter being
    /// removed, which drains its tenants before it leaves.
    fn learners(&self) -> Vec<NodeId> {
        Vec::new()
    }
    /// Whether `node` answered this node within `window` (always true for this node itself).
    fn reachable(&self, node: NodeId, window: Duration) -> bool;
    /// While this node leads, `placer` places each tenant that a batch of this node's proposals
    /// creates, in the same log entry; `None` once it stops leading. A port that drops it
    /// leaves new tenants to the leader's next review.
    fn place_new_tenants(&self, placer: Option<NewTenantPlacer>);
}

/// One execution of a call, as an executor sees it.
#[derive(Debug, Clone)]
pub struct Execution {
    pub call_id: CallId,
    /// The claim this execution runs under; `None` for a call run at once, which has none.
    pub claim_id: Option<String>,
    pub tenant: String,
    /// The namespaced tool, `upstream.tool`.
    pub tool: String,
    /// Canonical JSON of the arguments: exactly what was approved.
    pub arguments: String,
    /// What the upstream dedupes on: the same for every claim of one call, so an idempotent
    /// call re-claimed after a failover is recognised as a repeat.
    pub idempotency_key: String,
    /// The tenant's resolved skill context for this tool and user, if any.
    pub skill_context: Option<String>,
    /// The end user the call is made for.
    pub end_user: Option<String>,
    /// The call may run more than once with the same effect (the tool is idempotent or its
    /// upstream dedupes by the idempotency key): the executor may retry a failed attempt.
    pub retry_safe: bool,
    /// The W3C `traceparent` the call's record carries: the execution continues that trace.
    pub trace_parent: Option<String>,
}

/// What an upstream answered: the MCP `CallToolResult` as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub result_json: String,
    /// The tool itself reported an error (`isError: true`).
    pub is_error: bool,
}

/// Why a call could not be carried out.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ExecError {
    pub message: String,
}

/// Reaches upstreams. One call of `execute` is one invocation of the upstream: the caller, not
/// the executor, decides when one is allowed.
pub trait Executor: Send + Sync + 'static {
    fn execute(&self, execution: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>>;

    /// Whether this node certainly never sent a request under `claim`, one of its own claims
    /// that nothing runs under now: then the call may be claimed again instead of ending
    /// `outcome_unknown`. Only an executor that keeps a durable record before every request can
    /// know; the default says it cannot.
    fn never_sent(&self, _claim: &gatehouse_registry::call::Claim) -> bool {
        false
    }
}
