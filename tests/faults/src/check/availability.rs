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

fn writes(kind: &OpKind) -> bool {
    match kind {
        OpKind::Write { .. } | OpKind::Propose { .. } | OpKind::Decide { .. } => true,
        OpKind::Read { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::unavailability;
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
}
