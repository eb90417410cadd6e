//! Builders for the doctored histories the checkers' self-tests feed in. Every op is made by
//! client 0 on node 1 unless a test says otherwise; only times, outcomes and payloads matter to
//! the checkers.

use crate::history::{
    CallView, Decision, Execution, Fault, FaultKind, Micros, NodeView, Op, OpKind, Outcome,
};
use std::collections::BTreeMap;

pub fn op(invoke: Micros, complete: Micros, outcome: Outcome, kind: OpKind) -> Op {
    Op {
        client: 0,
        node: 1,
        invoke,
        complete,
        outcome,
        kind,
    }
}

pub fn write(key: &str, value: u64, invoke: Micros, complete: Micros, outcome: Outcome) -> Op {
    let key = key.to_owned();
    op(invoke, complete, outcome, OpKind::Write { key, value })
}

/// An acknowledged read.
pub fn read(key: &str, value: Option<u64>, invoke: Micros, complete: Micros) -> Op {
    let key = key.to_owned();
    op(invoke, complete, Outcome::Ok, OpKind::Read { key, value })
}

pub fn propose(logical: &str, call_id: Option<&str>, at: Micros, outcome: Outcome) -> Op {
    let kind = OpKind::Propose {
        logical: logical.to_owned(),
        idempotency_key: format!("idem-{logical}"),
        call_id: call_id.map(str::to_owned),
    };
    op(at, at + 10, outcome, kind)
}

pub fn approve(call_id: &str, at: Micros) -> Op {
    let kind = OpKind::Decide {
        call_id: call_id.to_owned(),
        decision: Decision::Approve,
    };
    op(at, at + 10, Outcome::Ok, kind)
}

/// A node that holds these registers, no calls, and a verified audit chain.
pub fn node(registers: &[(&str, u64)]) -> NodeView {
    NodeView {
        applied_index: 0,
        registers: registers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
        calls: BTreeMap::new(),
        audit_verified: Ok(()),
        audited_executions: Vec::new(),
    }
}

/// A node that holds these calls and nothing else.
pub fn node_with_calls(calls: &[(&str, CallView)]) -> NodeView {
    let mut view = node(&[]);
    view.calls = calls
        .iter()
        .map(|(id, c)| ((*id).to_owned(), c.clone()))
        .collect();
    view
}

pub fn call(state: &str, claimed: Option<(u64, Micros)>) -> CallView {
    CallView {
        state: state.to_owned(),
        idempotency_key: None,
        claimed_by: claimed.map(|(node, _)| node),
        claimed_at: claimed.map(|(_, at)| at),
    }
}

pub fn execution(call_id: &str, at: Micros) -> Execution {
    Execution {
        call_id: Some(call_id.to_owned()),
        idempotency_key: None,
        at,
    }
}

pub fn fault(kind: FaultKind, nodes: &[u64], start: Micros, end: Micros) -> Fault {
    Fault {
        kind,
        nodes: nodes.to_vec(),
        start,
        end,
    }
}
