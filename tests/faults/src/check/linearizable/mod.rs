//! Registry linearizability: every key of the registry must behave as one register that each
//! write and read touched at a single instant between its invoke and its complete.
//!
//! Keys are independent (a history is linearizable exactly when each key's sub-history is), so
//! each key is searched on its own. `Ok` ops took effect within [invoke, complete]; `Unknown`
//! writes may have taken effect at any time after invoke, or never; `Failed` ops took no effect
//! and `Unknown` or `Failed` reads observed nothing, so all of those are dropped. Every register
//! starts empty.
//!
//! What each node holds after healing is read back as one more acknowledged read per node and
//! key, later than every op, so a write acknowledged and then lost, or nodes that disagree at
//! the end, fail the search too.

#[cfg(test)]
mod oracle;
mod search;
#[cfg(test)]
mod tests;

use super::Anomaly;
use crate::history::{History, Micros, Op, OpKind, Outcome};
use search::{Action, Entry, Frontier, Verdict};
use std::collections::{BTreeMap, BTreeSet};

const CHECKER: &str = "linearizable";

/// How many search states one key may visit before the checker gives up on it. Real keys hold
/// tens to a few hundred ops and need about as many states; the cap only bounds a pathological
/// history, whose key is then reported as undecided.
pub const STEP_BUDGET: u64 = 500_000;

/// Checks every key of the registry with the default [`STEP_BUDGET`].
pub fn check(history: &History) -> Vec<Anomaly> {
    check_with_budget(history, STEP_BUDGET)
}

/// Checks every key, visiting at most `budget` search states per key. A key that is not
/// linearizable, or that the search could not decide within the budget, is one anomaly.
pub fn check_with_budget(history: &History, budget: u64) -> Vec<Anomaly> {
    let mut found = Vec::new();
    for (key, register) in registers(history) {
        let entries: Vec<Entry> = register.iter().map(|(entry, _)| entry.clone()).collect();
        let what = match search::search(&entries, budget) {
            Verdict::Linearizable => continue,
            Verdict::GaveUp => format!(
                "key {key:?}: the search gave up after {budget} states over {} ops, undecided",
                entries.len()
            ),
            Verdict::Not(frontier) => explain(key, &register, &frontier, history),
        };
        found.push(Anomaly::new(CHECKER, what));
    }
    found
}

/// Where an entry came from, to name it in an anomaly.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// `history.ops[i]`.
    Op(usize),
    /// The read of a node's final view.
    Final(u64),
}

/// Each key's entries, the final reads included.
fn registers(history: &History) -> BTreeMap<&str, Vec<(Entry, Source)>> {
    let last_seen = history
        .ops
        .iter()
        .map(|op| op.invoke.max(op.complete))
        .max()
        .unwrap_or(0);
    // Unknown writes end just before the final reads: whatever they did was done by then.
    let finale = history.healed_at.max(last_seen).saturating_add(2);
    let mut by_key: BTreeMap<&str, Vec<(Entry, Source)>> = BTreeMap::new();
    for (i, op) in history.ops.iter().enumerate() {
        let (key, action) = match &op.kind {
            OpKind::Write { key, value } => (key, Action::Write(*value)),
            OpKind::Read { key, value } => (key, Action::Read(*value)),
            OpKind::Propose { .. } | OpKind::Decide { .. } => continue,
        };
        let Some(entry) = entry(op, action, finale - 1) else {
            continue;
        };
        by_key.entry(key).or_default().push((entry, Source::Op(i)));
    }
    let mut keys: BTreeSet<&str> = by_key.keys().copied().collect();
    for view in history.nodes.values() {
        keys.extend(view.registers.keys().map(String::as_str));
    }
    for key in keys {
        for (&node, view) in &history.nodes {
            let entry = Entry {
                invoke: finale,
                complete: finale,
                action: Action::Read(view.registers.get(key).copied()),
                optional: false,
            };
            by_key
                .entry(key)
                .or_default()
                .push((entry, Source::Final(node)));
        }
    }
    for register in by_key.values_mut() {
        settle_unknown_writes(register);
    }
    by_key
}

/// Decides up front what the search would otherwise have to guess for each unknown write,
/// where the answer is forced; without this, many concurrent unknown writes on one key make
/// the search exponential.
///
/// - A write whose value no read saw can be left out: in any linearization that applies it,
///   no read falls between it and the next write, so the order without it is one too.
/// - A write whose value some read saw, and which is the only write of that value, must be
///   applied: nothing else could have produced what the read saw.
fn settle_unknown_writes(register: &mut Vec<(Entry, Source)>) {
    let mut seen = BTreeSet::new();
    let mut writers: BTreeMap<u64, usize> = BTreeMap::new();
    for (entry, _) in register.iter() {
        match entry.action {
            Action::Read(Some(value)) => {
                seen.insert(value);
            }
            Action::Read(None) => {}
            Action::Write(value) => *writers.entry(value).or_default() += 1,
        }
    }
    register.retain_mut(|(entry, _)| {
        let Action::Write(value) = entry.action else {
            return true;
        };
        if !entry.optional {
            return true;
        }
        if !seen.contains(&value) {
            return false;
        }
        entry.optional = writers.get(&value) != Some(&1);
        true
    });
}

/// The entry for one op, or `None` when the op took no effect that the register could show.
fn entry(op: &Op, action: Action, unknown_until: Micros) -> Option<Entry> {
    // A recorder whose clock stepped back must not wedge the search with an op that ends
    // before it begins.
    let complete = op.complete.max(op.invoke);
    let (complete, optional) = match (op.outcome, action) {
        (Outcome::Ok, _) => (complete, false),
        (Outcome::Unknown, Action::Write(_)) => (unknown_until.max(op.invoke), true),
        (Outcome::Unknown | Outcome::Failed, _) => return None,
    };
    Some(Entry {
        invoke: op.invoke,
        complete,
        action,
        optional,
    })
}

/// How many ops an anomaly names in each list before it only counts the rest.
const EXCERPT: usize = 6;

/// Says where the search stuck: the last ops it could order, the register's value then, the
/// ops that could have come next but did not fit, and the reads that kept writes from coming
/// next.
fn explain(
    key: &str,
    register: &[(Entry, Source)],
    frontier: &Frontier,
    history: &History,
) -> String {
    let name = |i: usize| describe(&register[i], history);
    let tail = frontier.tail.iter().map(|&(i, applied)| {
        if applied {
            name(i)
        } else {
            format!("{} (dropped)", name(i))
        }
    });
    let mut what = format!(
        "key {key:?} is not linearizable: {} of {} ops ordered",
        frontier.linearized,
        register.len()
    );
    if !frontier.tail.is_empty() {
        what += &format!(", ending [{}]", excerpt(tail));
    }
    what += &format!(
        ", with the register at {}; none of the ops that could come next fits: [{}]",
        value(frontier.state),
        excerpt(frontier.stuck.iter().map(|&i| name(i)))
    );
    if !frontier.stranded.is_empty() {
        what += &format!(
            "; no write may come next while these reads of {} wait: [{}]",
            value(frontier.state),
            excerpt(frontier.stranded.iter().map(|&i| name(i)))
        );
    }
    what
}

/// The first few items, joined, and how many more there were.
fn excerpt(items: impl ExactSizeIterator<Item = String>) -> String {
    let more = items.len().saturating_sub(EXCERPT);
    let mut shown: Vec<String> = items.take(EXCERPT).collect();
    if more > 0 {
        shown.push(format!("and {more} more"));
    }
    shown.join("; ")
}

fn describe((entry, source): &(Entry, Source), history: &History) -> String {
    let action = match entry.action {
        Action::Write(v) => format!("write {v}"),
        Action::Read(v) => format!("read {}", value(v)),
    };
    match source {
        Source::Final(node) => format!("{action} from n{node}'s final view"),
        Source::Op(i) => match history.ops.get(*i) {
            Some(op) => format!(
                "{action} by client {} via n{} [{}..{}] {:?}",
                op.client, op.node, op.invoke, op.complete, op.outcome
            ),
            None => action,
        },
    }
}

fn value(v: Option<u64>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}
