//! How long the cluster stopped accepting writes under each kind of fault: a measurement for
//! the campaign's report, not a verdict. Losing availability under a fault that cuts off a
//! majority is expected; what matters is how long it lasts and that it ends.

use crate::history::{FaultKind, History, Micros, OpKind, Outcome};
use std::collections::BTreeMap;

/// For each kind of fault injected, the longest stretch without an acknowledged write (a
/// registry write, a proposal or a decision) that overlapped a fault of that kind. A stretch
/// runs between consecutive acknowledgements; the workload's first invoke and `healed_at` bound
/// the first and last, so an outage that lasted until healing counts too. Kinds never injected
/// are absent.
pub fn unavailability(history: &History) -> BTreeMap<FaultKind, Micros> {
    let mut edges: Vec<Micros> = history
        .ops
        .iter()
        .filter(|op| op.outcome == Outcome::Ok && writes(&op.kind))
        .map(|op| op.complete)
        .collect();
    if let Some(first) = history.ops.iter().map(|op| op.invoke).min() {
        edges.push(first);
        edges.push(history.healed_at);
    }
    edges.sort_unstable();

    let mut longest = BTreeMap::new();
    for fault in &history.faults {
        let gap = edges
            .windows(2)
            .filter(|pair| pair[0] <= fault.end && pair[1] >= fault.start)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or(0);
        let worst = longest.entry(fault.kind).or_insert(0);
        *worst = gap.max(*worst);
    }
    longest
}

/// How long writes took to come back after faults of one kind: for each fault, from its start to
/// the completion of the first acknowledged write invoked after it started through a node the
/// fault did not hit (any node when it hit every node the clients used meanwhile, as a rolling
/// restart does). Faults that follow each other closely may add up in it: the search runs to
/// healing, past the next fault's start. A fault with no such write before healing is counted
/// apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Every fault's time to the first write, sorted.
    pub times: Vec<Micros>,
    /// Faults with no write through a spared node before healing.
    pub unrecovered: usize,
}

impl Recovery {
    pub fn worst(&self) -> Option<Micros> {
        self.times.last().copied()
    }

    pub fn median(&self) -> Option<Micros> {
        (!self.times.is_empty()).then(|| self.times[self.times.len() / 2])
    }

    /// How many faults took longer than `goal`, the unrecovered ones included.
    pub fn over(&self, goal: Micros) -> usize {
        self.times.iter().filter(|t| **t > goal).count() + self.unrecovered
    }
}

/// [`Recovery`] per kind of fault injected.
pub fn recovery(history: &History) -> BTreeMap<FaultKind, Recovery> {
    let mut by_kind: BTreeMap<FaultKind, Recovery> = BTreeMap::new();
    for fault in &history.faults {
        let spared_any = history
            .ops
            .iter()
            .filter(|op| op.invoke >= fault.start && op.invoke <= fault.end)
            .any(|op| !fault.nodes.contains(&op.node));
        let first = history
            .ops
            .iter()
            .filter(|op| op.outcome == Outcome::Ok && writes(&op.kind))
            .filter(|op| op.invoke >= fault.start && op.complete <= history.healed_at)
            .filter(|op| !spared_any || !fault.nodes.contains(&op.node))
            .map(|op| op.complete - fault.start)
            .min();
        let entry = by_kind.entry(fault.kind).or_default();
        match first {
            Some(time) => entry.times.push(time),
            None => entry.unrecovered += 1,
        }
    }
    for entry in by_kind.values_mut() {
        entry.times.sort_unstable();
    }
    by_kind
}

fn writes(kind: &OpKind) -> bool {
    match kind {
        OpKind::Write { .. } | OpKind::Propose { .. } | OpKind::Decide { .. } => true,
        OpKind::Read { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{Recovery, recovery, unavailability};
    use crate::check::fixture::{fault, propose, read, write};
    use crate::history::{Fault, FaultKind, History, Micros, Op, Outcome};
    use std::collections::BTreeMap;

    const MS: Micros = 1_000;

    /// Acknowledged writes every 100 ms from 10 ms to 1.01 s and from 4.01 s to 5.01 s: nothing
    /// in between but a read, a refused write and an unanswered one, none of which count.
    fn outage_from_one_to_four_seconds() -> Vec<Op> {
        let mut ops: Vec<Op> = (0..=10)
            .chain(40..=50)
            .map(|i| write("x", i, i * 100 * MS, i * 100 * MS + 10 * MS, Outcome::Ok))
            .collect();
        ops.push(read("x", Some(10), 2_000 * MS, 2_001 * MS));
        ops.push(write("x", 98, 2_500 * MS, 2_501 * MS, Outcome::Failed));
        ops.push(write("x", 99, 2_600 * MS, 3_900 * MS, Outcome::Unknown));
        ops
    }

    fn history(ops: Vec<Op>, faults: Vec<Fault>) -> History {
        History {
            ops,
            faults,
            healed_at: 6_000 * MS,
            ..History::default()
        }
    }

    #[test]
    fn a_three_second_outage_inside_a_pause_is_charged_to_pause_only() {
        let h = history(
            outage_from_one_to_four_seconds(),
            vec![
                fault(FaultKind::Pause, &[1], 1_200 * MS, 3_500 * MS),
                fault(FaultKind::KillLeader, &[2], 4_220 * MS, 4_250 * MS),
            ],
        );
        let expected = BTreeMap::from([
            (FaultKind::KillLeader, 100 * MS),
            (FaultKind::Pause, 3_000 * MS),
        ]);
        assert_eq!(unavailability(&h), expected);
    }

    #[test]
    fn an_acknowledged_proposal_ends_an_outage_as_a_write_does() {
        let mut ops = outage_from_one_to_four_seconds();
        // Acknowledged at 2.01 s, splitting the outage into 1 s and 2 s.
        ops.push(propose("a", Some("c1"), 2_010 * MS - 10, Outcome::Ok));
        let h = history(
            ops,
            vec![fault(FaultKind::Pause, &[1], 1_200 * MS, 3_500 * MS)],
        );
        let pause = unavailability(&h).get(&FaultKind::Pause).copied();
        assert_eq!(pause, Some(2_000 * MS));
    }

    #[test]
    fn an_outage_that_lasts_until_healing_is_measured_to_healing() {
        let ops = (0..=10)
            .map(|i| write("x", i, i * 100 * MS, i * 100 * MS + 10 * MS, Outcome::Ok))
            .collect();
        let h = history(
            ops,
            vec![fault(FaultKind::Split, &[1], 2_000 * MS, 6_000 * MS)],
        );
        // From the last acknowledgement at 1.01 s to healing at 6 s.
        let split = unavailability(&h).get(&FaultKind::Split).copied();
        assert_eq!(split, Some(4_990 * MS));
    }

    /// A write through node `node`, invoked at `invoke` ms and acknowledged at `complete` ms.
    fn write_on(node: u64, invoke: Micros, complete: Micros) -> Op {
        Op {
            node,
            ..write("x", invoke, invoke * MS, complete * MS, Outcome::Ok)
        }
    }

    #[test]
    fn recovery_counts_the_first_write_through_a_node_the_fault_spared() {
        let ops = vec![
            // Invoked before the fault: does not count, however late it completes.
            write_on(2, 900, 1_300),
            // Through the killed node: does not count.
            write_on(1, 1_100, 1_200),
            // Refused, then unanswered: neither counts.
            Op {
                outcome: Outcome::Failed,
                ..write_on(3, 1_050, 1_100)
            },
            Op {
                outcome: Outcome::Unknown,
                ..write_on(3, 1_060, 1_150)
            },
            // The first that counts: 1.7 s after the fault began.
            write_on(3, 1_200, 2_700),
            write_on(2, 1_300, 2_900),
        ];
        let h = history(
            ops,
            vec![fault(FaultKind::KillLeader, &[1], 1_000 * MS, 1_500 * MS)],
        );
        let kill = &recovery(&h)[&FaultKind::KillLeader];
        assert_eq!(kill.times, vec![1_700 * MS]);
        assert_eq!(kill.over(1_600 * MS), 1);
        assert_eq!(kill.over(1_700 * MS), 0);
    }

    #[test]
    fn a_fault_with_no_write_through_a_spared_node_before_healing_is_unrecovered() {
        // Node 2 is spared by the first split and used. Nothing is invoked during the second,
        // so any node's write counts for it: node 2's, invoked after it, 1.7 s from its start.
        let ops = vec![
            write_on(2, 1_100, 1_200),
            write_on(3, 3_100, 3_200),
            write_on(2, 5_100, 5_200),
        ];
        let h = history(
            ops,
            vec![
                fault(FaultKind::Split, &[1], 1_000 * MS, 2_000 * MS),
                fault(FaultKind::Split, &[2, 3], 3_500 * MS, 4_000 * MS),
                fault(FaultKind::Pause, &[3], 5_000 * MS, 5_500 * MS),
            ],
        );
        let r = recovery(&h);
        let split = &r[&FaultKind::Split];
        assert_eq!(split.times, vec![200 * MS, 1_700 * MS]);
        assert_eq!(split.over(1_600 * MS), 1);
        assert_eq!(r[&FaultKind::Pause].worst(), Some(200 * MS));

        let cut_off = history(
            vec![write_on(1, 1_100, 1_200), write_on(2, 1_300, 9_000)],
            vec![fault(FaultKind::IsolateOne, &[1], 1_000 * MS, 2_000 * MS)],
        );
        let isolate = &recovery(&cut_off)[&FaultKind::IsolateOne];
        assert_eq!(isolate.unrecovered, 1);
        assert_eq!(isolate.over(u64::MAX), 1);
    }

    #[test]
    fn a_fault_on_every_node_counts_writes_through_any() {
        let ops = vec![write_on(1, 1_100, 1_400), write_on(2, 1_200, 1_300)];
        let h = history(
            ops,
            vec![fault(
                FaultKind::RollingRestart,
                &[1, 2],
                1_000 * MS,
                2_000 * MS,
            )],
        );
        assert_eq!(
            recovery(&h)[&FaultKind::RollingRestart],
            Recovery {
                times: vec![300 * MS],
                unrecovered: 0
            }
        );
    }
}
