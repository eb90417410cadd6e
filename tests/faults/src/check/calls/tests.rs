use super::check;
use crate::check::fixture::{approve, call, execution, fault, node_with_calls, propose};
use crate::history::{CallView, Execution, Fault, FaultKind, History, Op, Outcome::*};

/// A history whose three nodes all hold `calls`.
fn history(ops: Vec<Op>, calls: &[(&str, CallView)], executions: Vec<Execution>) -> History {
    History {
        ops,
        nodes: (1..=3).map(|n| (n, node_with_calls(calls))).collect(),
        executions,
        healed_at: 10_000,
        ..History::default()
    }
}

fn with_faults(mut history: History, faults: Vec<Fault>) -> History {
    history.faults = faults;
    history
}

fn assert_only(history: &History, excerpts: &[&str]) {
    let found = check(history);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].checker, "calls");
    for excerpt in excerpts {
        assert!(found[0].what.contains(excerpt), "{}", found[0].what);
    }
}

#[test]
fn a_retried_proposal_approved_and_executed_once_is_clean() {
    let h = history(
        vec![
            propose("a", None, 0, Unknown),
            propose("a", Some("c1"), 100, Ok),
            propose("a", Some("c1"), 200, Ok),
            approve("c1", 300),
            propose("b", Some("c2"), 400, Ok),
        ],
        &[
            ("c1", call("succeeded", Some((1, 350)))),
            ("c2", call("pending", None)),
        ],
        vec![execution("c1", 360)],
    );
    assert_eq!(check(&h), vec![]);
}

#[test]
fn one_call_executed_twice_upstream_is_doubled() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("succeeded", Some((1, 50))))],
        vec![execution("c1", 60), execution("c1", 70)],
    );
    assert_only(&h, &["call c1 (intent a) was executed 2 times"]);
}

#[test]
fn two_calls_of_one_intent_both_executed_are_a_doubled_intent() {
    // The first answer was lost, so the retry's different call id is not itself an anomaly.
    let h = history(
        vec![
            propose("a", Some("c1"), 0, Unknown),
            propose("a", Some("c2"), 100, Ok),
        ],
        &[
            ("c1", call("succeeded", Some((1, 50)))),
            ("c2", call("succeeded", Some((2, 150)))),
        ],
        vec![execution("c1", 60), execution("c2", 160)],
    );
    assert_only(&h, &["intent a was executed under 2 calls: c1, c2"]);
}

#[test]
fn a_call_whose_answer_was_lost_is_tied_to_its_intent_by_idempotency_key() {
    // The first proposal's answer never arrived, so only the node's record names its key.
    let mut lost = call("succeeded", Some((1, 50)));
    lost.idempotency_key = Some("idem-a".to_owned());
    let h = history(
        vec![
            propose("a", None, 0, Unknown),
            propose("a", Some("c2"), 100, Ok),
        ],
        &[("c1", lost), ("c2", call("succeeded", Some((2, 150))))],
        vec![execution("c1", 60), execution("c2", 160)],
    );
    assert_only(&h, &["intent a was executed under 2 calls: c1, c2"]);
}

#[test]
fn an_execution_tied_to_an_intent_only_by_the_upstream_counts_for_it() {
    let mut keyed_run = execution("c1", 60);
    keyed_run.idempotency_key = Some("idem-a".to_owned());
    let h = history(
        vec![
            propose("a", None, 0, Unknown),
            propose("a", Some("c2"), 100, Ok),
        ],
        &[
            ("c1", call("succeeded", Some((1, 50)))),
            ("c2", call("succeeded", Some((2, 150)))),
        ],
        vec![keyed_run, execution("c2", 160)],
    );
    assert_only(&h, &["intent a was executed under 2 calls: c1, c2"]);
}

#[test]
fn acknowledged_retries_answered_with_different_calls_are_an_anomaly() {
    let h = history(
        vec![
            propose("a", Some("c1"), 0, Ok),
            propose("a", Some("c2"), 100, Ok),
        ],
        &[("c1", call("pending", None)), ("c2", call("pending", None))],
        vec![],
    );
    assert_only(&h, &["intent a", "different calls: c1, c2"]);
}

#[test]
fn an_acknowledged_proposal_without_a_call_id_is_an_anomaly() {
    let h = history(vec![propose("a", None, 0, Ok)], &[], vec![]);
    assert_only(&h, &["intent a carried no call id"]);
}

#[test]
fn an_acknowledged_call_that_no_node_holds_was_lost() {
    let h = history(vec![propose("a", Some("c1"), 0, Ok)], &[], vec![]);
    assert_only(
        &h,
        &["acknowledged call c1 (intent a) is missing on n1, n2, n3"],
    );
}

#[test]
fn an_acknowledged_call_missing_on_one_node_is_lost_there_and_a_disagreement() {
    let mut h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("pending", None))],
        vec![],
    );
    if let Some(view) = h.nodes.get_mut(&2) {
        view.calls.clear();
    }
    let whats: Vec<String> = check(&h).into_iter().map(|a| a.what).collect();
    assert_eq!(
        whats,
        vec![
            "acknowledged call c1 (intent a) is missing on n2".to_owned(),
            "nodes disagree on call c1: n1 pending, n2 missing, n3 pending".to_owned(),
        ]
    );
}

#[test]
fn nodes_holding_one_call_in_different_states_disagree() {
    let mut h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("succeeded", Some((1, 50))))],
        vec![execution("c1", 60)],
    );
    if let Some(view) = h.nodes.get_mut(&3) {
        view.calls
            .insert("c1".to_owned(), call("failed", Some((1, 50))));
    }
    assert_only(&h, &["nodes disagree on call c1", "n3 failed"]);
}

#[test]
fn a_call_that_succeeded_without_reaching_the_upstream_is_an_anomaly() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("succeeded", Some((1, 50))))],
        vec![],
    );
    assert_only(
        &h,
        &["call c1 is in state \"succeeded\" but the upstream ran it 0 times"],
    );
}

#[test]
fn a_rejected_call_that_reached_the_upstream_is_an_anomaly() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("rejected", None))],
        vec![execution("c1", 60)],
    );
    assert_only(
        &h,
        &["call c1 is in state \"rejected\" but the upstream ran it once"],
    );
}

#[test]
fn a_call_executed_upstream_that_no_node_holds_is_an_anomaly() {
    let h = history(vec![], &[], vec![execution("ghost", 60)]);
    assert_only(
        &h,
        &["call ghost was executed upstream but no node holds it"],
    );
}

#[test]
fn a_call_in_a_state_the_gateway_does_not_have_is_an_anomaly() {
    let h = history(vec![], &[("c1", call("sucseeded", None))], vec![]);
    assert_only(&h, &["a state the gateway does not have: \"sucseeded\""]);
}

#[test]
fn an_unknown_outcome_whose_claimer_was_killed_after_the_claim_is_explained() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("outcome_unknown", Some((2, 500))))],
        vec![execution("c1", 510)],
    );
    let h = with_faults(h, vec![fault(FaultKind::KillHome, &[2], 520, 900)]);
    assert_eq!(check(&h), vec![]);
}

#[test]
fn an_unknown_outcome_without_a_fault_on_its_claimer_is_an_anomaly() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("outcome_unknown", Some((2, 500))))],
        vec![],
    );
    let h = with_faults(
        h,
        vec![
            // Another node killed, the claimer only resized, and killed long before the claim.
            fault(FaultKind::KillRandom, &[3], 520, 900),
            fault(FaultKind::Resize, &[2], 520, 900),
            fault(FaultKind::KillLeader, &[2], 100, 400),
        ],
    );
    assert_only(
        &h,
        &["call c1 is outcome_unknown", "claimer n2 suffered no fault"],
    );
}

#[test]
fn an_unknown_outcome_that_was_never_claimed_is_an_anomaly() {
    let h = history(vec![], &[("c1", call("outcome_unknown", None))], vec![]);
    let h = with_faults(h, vec![fault(FaultKind::KillRandom, &[1, 2, 3], 0, 900)]);
    assert_only(&h, &["call c1 is outcome_unknown but was never claimed"]);
}

#[test]
fn a_failed_call_run_twice_is_reported_once_as_doubled() {
    let h = history(
        vec![propose("a", Some("c1"), 0, Ok)],
        &[("c1", call("failed", Some((1, 50))))],
        vec![execution("c1", 60), execution("c1", 70)],
    );
    assert_only(&h, &["call c1 (intent a) was executed 2 times"]);
}
