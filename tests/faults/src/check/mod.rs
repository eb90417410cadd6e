//! The checkers: pure functions of a recorded [`History`] that return every anomaly they find.
//! They never talk to a node or the upstream, never sleep and never panic on what a campaign
//! recorded; a history they cannot decide is reported as an anomaly, so nothing passes silently.
//!
//! [`availability`] is the one exception to "returns anomalies": it measures how long the cluster
//! stopped accepting writes under each kind of fault, for a report rather than a verdict.

pub mod audit;
pub mod availability;
pub mod calls;
pub mod linearizable;

#[cfg(test)]
pub(crate) mod fixture;

use crate::history::History;
use serde::Serialize;

/// One thing a checker found wrong with a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    /// The checker that found it: `linearizable`, `calls` or `audit`; or `restore`, the
    /// campaign's restart from a backup (see [`crate::restore`]).
    pub checker: &'static str,
    /// What is wrong, naming the key, call, intent or node involved.
    pub what: String,
}

impl Anomaly {
    pub(crate) fn new(checker: &'static str, what: impl Into<String>) -> Self {
        Self {
            checker,
            what: what.into(),
        }
    }
}

/// Runs every checker over `history` and returns their anomalies, checker by checker; empty
/// when the history is clean.
pub fn all(history: &History) -> Vec<Anomaly> {
    let mut found = linearizable::check(history);
    found.extend(calls::check(history));
    found.extend(audit::check(history));
    found
}

#[cfg(test)]
mod tests {
    use super::all;
    use crate::check::fixture::{call, execution, node, propose, write};
    use crate::history::{History, Outcome};

    /// A write the nodes kept, and a call proposed, run once, audited and held everywhere.
    fn clean() -> History {
        let mut view = node(&[("x", 1)]);
        view.calls
            .insert("c1".to_owned(), call("succeeded", Some((1, 50))));
        view.audited_executions.push("c1".to_owned());
        History {
            ops: vec![
                write("x", 1, 0, 10, Outcome::Ok),
                propose("a", Some("c1"), 20, Outcome::Ok),
            ],
            healed_at: 1_000,
            nodes: (1..=3).map(|n| (n, view.clone())).collect(),
            executions: vec![execution("c1", 60)],
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_has_no_anomalies() {
        assert_eq!(all(&clean()), vec![]);
    }

    #[test]
    fn every_checker_runs_and_names_itself() {
        let mut h = clean();
        if let Some(view) = h.nodes.get_mut(&2) {
            view.registers.clear();
        }
        // A second, unaudited run of the call.
        h.executions.push(execution("c2", 70));
        h.ops.push(propose("a", Some("c2"), 30, Outcome::Unknown));
        let checkers: Vec<&str> = all(&h).iter().map(|a| a.checker).collect();
        assert_eq!(
            checkers,
            vec!["linearizable", "calls", "calls", "audit"],
            "{:#?}",
            all(&h)
        );
    }
}
