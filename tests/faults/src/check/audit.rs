//! The audit log: every node's hash chain verifies, and every call the upstream executed left
//! an execution record in some node's audit log.

use super::Anomaly;
use crate::history::History;
use std::collections::BTreeSet;

const CHECKER: &str = "audit";

/// Checks every node's audit chain, removed nodes' included, and that every execution of a call
/// was audited by some node.
pub fn check(history: &History) -> Vec<Anomaly> {
    let mut found = Vec::new();
    let every = || history.nodes.iter().chain(&history.retired);
    for (node, view) in every() {
        if let Err(error) = &view.audit_verified {
            let what = format!("n{node}'s audit chain does not verify: {error}");
            found.push(Anomaly::new(CHECKER, what));
        }
    }
    let audited: BTreeSet<&str> = every()
        .flat_map(|(_, view)| view.audited_executions.iter().map(String::as_str))
        .collect();
    // An upstream request without a call id was no gated call, so there is nothing to audit.
    let executed: BTreeSet<&str> = history
        .executions
        .iter()
        .filter_map(|execution| execution.call_id.as_deref())
        .collect();
    for id in executed.difference(&audited) {
        let what = format!("call {id} was executed upstream but no node audited the execution");
        found.push(Anomaly::new(CHECKER, what));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::check::fixture::{execution, node};
    use crate::history::{Execution, History, NodeView};

    fn history(nodes: Vec<NodeView>, executions: Vec<Execution>) -> History {
        History {
            nodes: (1..).zip(nodes).collect(),
            executions,
            ..History::default()
        }
    }

    fn audited(ids: &[&str]) -> NodeView {
        let mut view = node(&[]);
        view.audited_executions = ids.iter().map(|id| (*id).to_owned()).collect();
        view
    }

    #[test]
    fn verified_chains_that_audited_every_execution_are_clean() {
        let h = history(
            vec![audited(&["c1"]), audited(&["c1", "c2"]), audited(&[])],
            vec![execution("c1", 10), execution("c2", 20)],
        );
        assert_eq!(check(&h), vec![]);
    }

    #[test]
    fn a_chain_that_does_not_verify_is_named_with_its_error() {
        let mut broken = audited(&[]);
        broken.audit_verified = Err("entry 7 hash mismatch".to_owned());
        let found = check(&history(vec![audited(&[]), broken], vec![]));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            found[0].what,
            "n2's audit chain does not verify: entry 7 hash mismatch"
        );
    }

    #[test]
    fn an_execution_no_node_audited_is_an_anomaly() {
        let mut anonymous = execution("ignored", 30);
        anonymous.call_id = None;
        let h = history(
            vec![audited(&["c1"]), audited(&["c1"])],
            vec![execution("c1", 10), execution("c2", 20), anonymous],
        );
        let found = check(&h);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].what.contains("call c2"), "{}", found[0].what);
    }

    #[test]
    fn an_execution_audited_only_by_a_removed_node_counts_and_its_chain_is_checked() {
        let mut retired = node(&[]);
        retired.audited_executions = vec!["c1".into()];
        let mut history = history(vec![node(&[])], vec![execution("c1", 5)]);
        history.retired.insert(9, retired.clone());
        assert!(check(&history).is_empty(), "{:?}", check(&history));
        retired.audit_verified = Err("line 3: hash mismatch".into());
        history.retired.insert(9, retired);
        let found = check(&history);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].what.contains("n9"), "{found:?}");
    }
}
