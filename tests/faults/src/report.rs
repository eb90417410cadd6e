//! The campaign's report: what the clients did, which faults struck, how long writes stalled
//! under each kind of fault, and every anomaly the checkers found.

use crate::campaign::Outcome;
use crate::history::{FaultKind, Micros, OpKind, Outcome as OpOutcome};
use crate::nemesis::ALL;
use crate::procs::ELECTION_MAX_MS;
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn render(outcome: &Outcome) -> String {
    let history = &outcome.history;
    let mut out = String::new();
    let _ = writeln!(out, "\n== fault campaign, seed {}", history.seed);

    let mut ops: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for op in &history.ops {
        let name = match &op.kind {
            OpKind::Write { .. } => "registry write",
            OpKind::Read { .. } => "linearizable read",
            OpKind::Propose { .. } => "propose",
            OpKind::Decide { .. } => "decide",
        };
        let slot = match op.outcome {
            OpOutcome::Ok => 0,
            OpOutcome::Failed => 1,
            OpOutcome::Unknown => 2,
        };
        ops.entry(name).or_default()[slot] += 1;
    }
    let _ = writeln!(out, "operations: {}", history.ops.len());
    for (name, [ok, failed, unknown]) in &ops {
        let _ = writeln!(
            out,
            "  {name:<18} ok {ok:>6}  failed {failed:>5}  unknown {unknown:>5}"
        );
    }
    let executions = history.executions.len();
    let _ = writeln!(out, "upstream executions: {executions}");
    // Any node's view: the checkers have already compared them.
    if let Some(view) = history.nodes.values().next() {
        let unknown = view
            .calls
            .values()
            .filter(|c| c.state == "outcome_unknown")
            .count();
        let claimed = view
            .calls
            .values()
            .filter(|c| c.claimed_by.is_some())
            .count();
        let kills = history
            .faults
            .iter()
            .filter(|f| {
                matches!(
                    f.kind,
                    FaultKind::KillHome
                        | FaultKind::KillLeader
                        | FaultKind::KillRandom
                        | FaultKind::Replace
                )
            })
            .count();
        let _ = writeln!(
            out,
            "calls: {} ({claimed} claimed), outcome_unknown {unknown} after {kills} kills",
            view.calls.len()
        );
    }

    let _ = writeln!(out, "faults: {}", history.faults.len());
    let goal = (ELECTION_MAX_MS + 1_000) * 1_000;
    let _ = writeln!(
        out,
        "  {:<16} {:>5} {:>13}   first write through a spared node (s): {:>6} {:>6} {:>9}",
        "kind",
        "count",
        "longest stall",
        "median",
        "worst",
        format!("> {:.1} s", goal as f64 / 1e6)
    );
    let seconds = |us: Option<Micros>| {
        us.map_or_else(|| "-".to_owned(), |us| format!("{:.2}", us as f64 / 1e6))
    };
    for kind in ALL {
        let count = history.faults.iter().filter(|f| f.kind == kind).count();
        if count == 0 {
            continue;
        }
        let stall = seconds(outcome.unavailability.get(&kind).copied());
        let recovery = outcome.recovery.get(&kind).cloned().unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<16} {count:>5} {stall:>13}   {:>45} {:>6} {:>9}",
            format!("{kind:?}"),
            seconds(recovery.median()),
            seconds(recovery.worst()),
            recovery.over(goal),
        );
    }
    let _ = writeln!(
        out,
        "  (a stall: the longest gap between acknowledged writes overlapping a fault; the goal, \
         for a leader killed, paused or cut off: writes through a spared node within the \
         {ELECTION_MAX_MS} ms election timeout + 1 s; under Latency every round trip is slower \
         by the delay, so no election bound applies)"
    );
    if !outcome.errors.is_empty() {
        let _ = writeln!(out, "errors the clients met, by code:");
        for (code, count) in &outcome.errors {
            let sample = outcome.samples.get(code).map_or("", String::as_str);
            let _ = writeln!(out, "  {code:<18} {count:>6}  e.g. {sample}");
        }
    }
    let _ = writeln!(out, "anomalies: {}", outcome.anomalies.len());
    for anomaly in &outcome.anomalies {
        let _ = writeln!(out, "  [{}] {}", anomaly.checker, anomaly.what);
    }
    out
}
