//! The approval queue: every destructive call runs upstream at most once, however often the
//! agent retried and whichever nodes died; every call the cluster acknowledged survives on
//! every node; and every call's final state agrees with what the upstream saw.
//!
//! A proposal's `logical` names the agent's intent, so acknowledged retries of one intent must
//! name one call, and at most one of the intent's calls may run. An intent's calls are those its
//! proposals were answered with and those a node or the upstream recorded under one of its
//! idempotency keys, since a proposal whose answer was lost may still have made a call.

#[cfg(test)]
mod tests;

use super::Anomaly;
use crate::history::{CallView, FaultKind, History, OpKind, Outcome};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

const CHECKER: &str = "calls";

/// Checks the approval queue's promises; see the module docs.
pub fn check(history: &History) -> Vec<Anomaly> {
    let proposals = Proposals::of(history);
    let runs = executions(history);
    let mut found = Vec::new();
    found.extend(one_call_per_intent(&proposals));
    found.extend(at_most_one_run(&proposals, &runs));
    found.extend(acknowledged_everywhere(history, &proposals));
    let agreed = agreed_calls(history, &mut found);
    found.extend(runs_match_states(history, &agreed, &runs));
    found.extend(unknown_outcomes_explained(history, &agreed));
    found
        .into_iter()
        .map(|what| Anomaly::new(CHECKER, what))
        .collect()
}

/// What the gateway answered each intent, and which calls belong to it.
#[derive(Debug, Default)]
struct Proposals<'h> {
    /// Intent -> the call ids of its acknowledged proposals.
    acknowledged: BTreeMap<&'h str, BTreeSet<&'h str>>,
    /// Intent -> every call that may exist for it: those its acknowledged or unanswered
    /// proposals named, and those a node or the upstream tied to one of its idempotency keys.
    possible: BTreeMap<&'h str, BTreeSet<&'h str>>,
    /// Intents with an acknowledged proposal that carried no call id.
    without_id: BTreeSet<&'h str>,
}

impl<'h> Proposals<'h> {
    fn of(history: &'h History) -> Self {
        let mut proposals = Self::default();
        let mut intent_of_key: BTreeMap<&str, &str> = BTreeMap::new();
        for op in &history.ops {
            let OpKind::Propose {
                logical,
                idempotency_key,
                call_id,
            } = &op.kind
            else {
                continue;
            };
            let logical = logical.as_str();
            intent_of_key.insert(idempotency_key, logical);
            match (op.outcome, call_id.as_deref()) {
                (Outcome::Failed, _) | (Outcome::Unknown, None) => {}
                (Outcome::Ok, None) => {
                    proposals.without_id.insert(logical);
                }
                (Outcome::Ok, Some(id)) => {
                    proposals
                        .acknowledged
                        .entry(logical)
                        .or_default()
                        .insert(id);
                    proposals.possible.entry(logical).or_default().insert(id);
                }
                (Outcome::Unknown, Some(id)) => {
                    proposals.possible.entry(logical).or_default().insert(id);
                }
            }
        }
        // A proposal whose answer was lost may still have made a call: only its key says whose.
        let held = history.nodes.values().flat_map(|view| {
            let keyed =
                |(id, call): (&'h String, &'h CallView)| (id.as_str(), &call.idempotency_key);
            view.calls.iter().map(keyed)
        });
        let ran = history
            .executions
            .iter()
            .filter_map(|run| Some((run.call_id.as_deref()?, &run.idempotency_key)));
        for (id, key) in held.chain(ran) {
            if let Some(logical) = key.as_deref().and_then(|key| intent_of_key.get(key)) {
                proposals.possible.entry(logical).or_default().insert(id);
            }
        }
        proposals
    }

    fn intent_of(&self, call_id: &str) -> Option<&'h str> {
        let (logical, _) = self
            .possible
            .iter()
            .find(|(_, ids)| ids.contains(call_id))?;
        Some(logical)
    }
}

/// How many times the upstream ran each call.
fn executions(history: &History) -> BTreeMap<&str, usize> {
    let mut runs = BTreeMap::new();
    for execution in &history.executions {
        if let Some(id) = execution.call_id.as_deref() {
            *runs.entry(id).or_default() += 1;
        }
    }
    runs
}

/// Retries of one intent carry one idempotency key, so every acknowledgement must name the
/// same call.
fn one_call_per_intent(proposals: &Proposals) -> Vec<String> {
    let mut found: Vec<String> = proposals
        .without_id
        .iter()
        .map(|logical| format!("an acknowledged proposal of intent {logical} carried no call id"))
        .collect();
    for (logical, ids) in &proposals.acknowledged {
        if ids.len() > 1 {
            found.push(format!(
                "acknowledged retries of intent {logical} were answered with different calls: {}",
                list(ids)
            ));
        }
    }
    found
}

fn at_most_one_run(proposals: &Proposals, runs: &BTreeMap<&str, usize>) -> Vec<String> {
    let mut found = Vec::new();
    for (id, &n) in runs {
        if n > 1 {
            let intent = match proposals.intent_of(id) {
                Some(logical) => format!(" (intent {logical})"),
                None => String::new(),
            };
            found.push(format!("call {id}{intent} was executed {n} times upstream"));
        }
    }
    for (logical, ids) in &proposals.possible {
        let ran: BTreeSet<&str> = ids
            .iter()
            .copied()
            .filter(|id| runs.contains_key(id))
            .collect();
        if ran.len() > 1 {
            found.push(format!(
                "intent {logical} was executed under {} calls: {}",
                ran.len(),
                list(&ran)
            ));
        }
    }
    found
}

fn acknowledged_everywhere(history: &History, proposals: &Proposals) -> Vec<String> {
    let mut found = Vec::new();
    for (logical, ids) in &proposals.acknowledged {
        for id in ids {
            let missing: Vec<String> = history
                .nodes
                .iter()
                .filter(|(_, view)| !view.calls.contains_key(*id))
                .map(|(node, _)| format!("n{node}"))
                .collect();
            if !missing.is_empty() {
                found.push(format!(
                    "acknowledged call {id} (intent {logical}) is missing on {}",
                    missing.join(", ")
                ));
            }
        }
    }
    found
}

/// The calls every node holds in one state, by id; pushes an anomaly for every other call.
fn agreed_calls<'h>(
    history: &'h History,
    found: &mut Vec<String>,
) -> BTreeMap<&'h str, &'h CallView> {
    let ids: BTreeSet<&str> = history
        .nodes
        .values()
        .flat_map(|view| view.calls.keys().map(String::as_str))
        .collect();
    let mut agreed = BTreeMap::new();
    for id in ids {
        let views: Vec<(u64, Option<&CallView>)> = history
            .nodes
            .iter()
            .map(|(&node, view)| (node, view.calls.get(id)))
            .collect();
        let first = views.first().and_then(|(_, view)| *view);
        let same = |view: &Option<&CallView>| view.map(|v| &v.state) == first.map(|v| &v.state);
        match first {
            Some(call) if views.iter().all(|(_, view)| same(view)) => {
                agreed.insert(id, call);
            }
            _ => {
                let states: Vec<String> = views
                    .iter()
                    .map(|(node, view)| match view {
                        Some(call) => format!("n{node} {}", call.state),
                        None => format!("n{node} missing"),
                    })
                    .collect();
                found.push(format!(
                    "nodes disagree on call {id}: {}",
                    states.join(", ")
                ));
            }
        }
    }
    agreed
}

fn runs_match_states(
    history: &History,
    agreed: &BTreeMap<&str, &CallView>,
    runs: &BTreeMap<&str, usize>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (id, call) in agreed {
        let n = runs.get(id).copied().unwrap_or(0);
        let state = call.state.as_str();
        let Some(allowed) = runs_allowed(state) else {
            found.push(format!(
                "call {id} is in a state the gateway does not have: {state:?}"
            ));
            continue;
        };
        // More than one run is already reported, whatever the state.
        let doubled = n > 1 && *allowed.end() == 1;
        if !allowed.contains(&n) && !doubled {
            found.push(format!(
                "call {id} is in state {state:?} but the upstream ran it {}",
                times(n)
            ));
        }
    }
    // A call that ran must have been claimed, so some node must still hold it.
    let held = |id: &str| {
        history
            .nodes
            .values()
            .any(|view| view.calls.contains_key(id))
    };
    if !history.nodes.is_empty() {
        for id in runs.keys().filter(|id| !held(id)) {
            found.push(format!(
                "call {id} was executed upstream but no node holds it"
            ));
        }
    }
    found
}

/// How many times the upstream may have run a call that ended in `state`; `None` for a state
/// the gateway does not have.
fn runs_allowed(state: &str) -> Option<RangeInclusive<usize>> {
    match state {
        "succeeded" => Some(1..=1),
        "pending" | "approved" | "rejected" | "cancelled" | "expired" => Some(0..=0),
        // Claimed, and the claimer may or may not have reached the upstream.
        "executing" | "failed" | "outcome_unknown" => Some(0..=1),
        _ => None,
    }
}

/// A call's outcome is unknown only when its claimer may have died mid-execution, so a fault
/// other than a resize must have hit the claimer at or after the claim.
fn unknown_outcomes_explained(
    history: &History,
    agreed: &BTreeMap<&str, &CallView>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (id, call) in agreed.iter().filter(|(_, c)| c.state == "outcome_unknown") {
        let Some(claimer) = call.claimed_by else {
            found.push(format!(
                "call {id} is outcome_unknown but was never claimed"
            ));
            continue;
        };
        // A claim without a time is judged against every fault on the claimer.
        let claimed_at = call.claimed_at.unwrap_or(0);
        let hit = history.faults.iter().any(|fault| {
            fault.kind != FaultKind::Resize
                && fault.nodes.contains(&claimer)
                && fault.end >= claimed_at
        });
        if !hit {
            found.push(format!(
                "call {id} is outcome_unknown but its claimer n{claimer} suffered no fault at or \
                 after the claim at {claimed_at}"
            ));
        }
    }
    found
}

fn times(n: usize) -> String {
    match n {
        0 => "0 times".to_owned(),
        1 => "once".to_owned(),
        n => format!("{n} times"),
    }
}

fn list(ids: &BTreeSet<&str>) -> String {
    ids.iter().copied().collect::<Vec<_>>().join(", ")
}
