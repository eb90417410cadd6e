//! What a campaign records: every client operation with its invoke and complete times and its
//! outcome, every fault the nemesis injected, and what each node and the upstream held once
//! everything was healed. Times are microseconds since the campaign started.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Microseconds since the campaign started.
pub type Micros = u64;

/// How an operation ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The cluster acknowledged it.
    Ok,
    /// The cluster refused it: it certainly took no effect.
    Failed,
    /// No answer, or an answer that leaves it open (a timeout, UNAVAILABLE, a reset): it may or
    /// may not have taken effect, at any time after it was invoked.
    Unknown,
}

/// One client operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The client that made it; a client makes one operation at a time.
    pub client: usize,
    /// The node it was sent to.
    pub node: u64,
    pub invoke: Micros,
    pub complete: Micros,
    pub outcome: Outcome,
    pub kind: OpKind,
}

/// What an operation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpKind {
    /// Put `value` into register `key` (a registry resource; every write's value is unique).
    Write { key: String, value: u64 },
    /// A linearizable read of register `key`: `None` when the resource did not exist. Only
    /// meaningful when the outcome is `Ok`.
    Read { key: String, value: Option<u64> },
    /// An agent proposing a destructive call. `logical` names the agent's intent: retries of the
    /// same intent carry the same idempotency key. `call_id` is what the gateway answered.
    Propose {
        logical: String,
        idempotency_key: String,
        call_id: Option<String>,
    },
    /// An approver's decision, or an agent's cancel, on a call.
    Decide { call_id: String, decision: Decision },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Reject,
    Cancel,
}

/// The kinds of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL of a random node, then a restart from its data directory.
    KillRandom,
    /// SIGKILL of the leader.
    KillLeader,
    /// SIGKILL of a tenant's home while calls execute.
    KillHome,
    /// SIGSTOP, then SIGCONT.
    Pause,
    /// One node cut off from every other.
    IsolateOne,
    /// The leader cut off from every other.
    IsolateLeader,
    /// A minority on one side, the majority on the other.
    Split,
    /// Packets from one node to another dropped, the other way left open.
    OneWay,
    /// Two learners added and promoted, then removed again: 3 -> 5 -> 3.
    Resize,
    /// Every node restarted in turn.
    RollingRestart,
    /// A voter lost for good (SIGKILL, never restarted) and replaced: a fresh node joins and is
    /// promoted, then the lost one is removed. Its data directory stays where it was, unused, so
    /// its audit log is read with the other retired nodes'.
    Replace,
    /// Every chunk to and from one voter, or every node, delayed (50-400 ms each way) by the
    /// node's delay proxy, which its peers reach it through.
    Latency,
}

/// One fault, from when it was injected to when it was healed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    /// The nodes it hit (for a split, the minority; for one-way, `[from, to]`).
    pub nodes: Vec<u64>,
    pub start: Micros,
    pub end: Micros,
}

/// One call record as a node holds it once everything was healed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallView {
    /// `pending`, `approved`, `executing`, `succeeded`, `failed`, `rejected`, `cancelled`,
    /// `expired` or `outcome_unknown`.
    pub state: String,
    pub idempotency_key: Option<String>,
    /// The node that claimed it for execution, and when (campaign time), if it was claimed.
    pub claimed_by: Option<u64>,
    pub claimed_at: Option<Micros>,
}

/// What one node holds once everything was healed, read from its own copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub applied_index: u64,
    /// Every register's value (absent: the resource does not exist).
    pub registers: BTreeMap<String, u64>,
    /// Every call of the campaign's tenant, by id.
    pub calls: BTreeMap<String, CallView>,
    /// Whether the node's audit hash chain verified, and the error if it did not.
    pub audit_verified: Result<(), String>,
    /// The call ids the node's audit log holds an execution record for.
    pub audited_executions: Vec<String>,
}

impl Default for NodeView {
    fn default() -> Self {
        NodeView {
            applied_index: 0,
            registers: BTreeMap::new(),
            calls: BTreeMap::new(),
            audit_verified: Ok(()),
            audited_executions: Vec::new(),
        }
    }
}

/// One request the recording upstream received: an execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    pub call_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub at: Micros,
}

/// Everything a campaign recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub seed: u64,
    /// Unix milliseconds at time 0, to line the history up with the nodes' logs.
    #[serde(default)]
    pub start_unix_ms: u64,
    pub ops: Vec<Op>,
    pub faults: Vec<Fault>,
    /// When the workload stopped and the healing began.
    pub healed_at: Micros,
    /// Each node's view after healing, by node id.
    pub nodes: BTreeMap<u64, NodeView>,
    /// The audit logs of nodes removed during the campaign (their registry views are gone with
    /// them): only `audit_verified` and `audited_executions` are filled in.
    #[serde(default)]
    pub retired: BTreeMap<u64, NodeView>,
    pub executions: Vec<Execution>,
}
