use super::{check, check_with_budget};
use crate::check::fixture::{node, read, write};
use crate::history::{History, Op, Outcome::*};

fn history(ops: Vec<Op>, finals: &[&[(&str, u64)]]) -> History {
    History {
        ops,
        healed_at: 1_000,
        nodes: (1..).zip(finals.iter().map(|regs| node(regs))).collect(),
        ..History::default()
    }
}

/// The one anomaly `history` must produce, which must name `key` and mention `excerpt`.
fn assert_one_anomaly(history: &History, key: &str, excerpt: &str) {
    let found = check(history);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].checker, "linearizable");
    let what = &found[0].what;
    assert!(what.contains(&format!("{key:?}")), "{what}");
    assert!(what.contains(excerpt), "{what}");
}

#[test]
fn sequential_writes_and_reads_that_agree_with_every_node_pass() {
    let h = history(
        vec![
            read("x", None, 0, 5),
            write("x", 1, 10, 20, Ok),
            read("x", Some(1), 30, 40),
            write("x", 2, 50, 60, Ok),
            read("x", Some(2), 70, 80),
            write("y", 7, 10, 90, Ok),
        ],
        &[&[("x", 2), ("y", 7)], &[("x", 2), ("y", 7)]],
    );
    assert_eq!(check(&h), vec![]);
}

#[test]
fn a_read_of_an_overwritten_value_after_the_newer_write_completed_is_stale() {
    let h = history(
        vec![
            write("x", 1, 0, 10, Ok),
            write("x", 2, 20, 30, Ok),
            read("x", Some(1), 40, 50),
        ],
        &[&[("x", 2)]],
    );
    assert_one_anomaly(&h, "x", "read 1 by client 0 via n1 [40..50]");
}

#[test]
fn a_read_of_a_value_nobody_wrote_is_an_anomaly() {
    let h = history(
        vec![write("x", 1, 0, 10, Ok), read("x", Some(99), 20, 30)],
        &[],
    );
    assert_one_anomaly(&h, "x", "read 99");
}

#[test]
fn an_acknowledged_write_missing_from_a_node_after_healing_is_lost() {
    let h = history(vec![write("x", 1, 0, 10, Ok)], &[&[("x", 1)], &[]]);
    assert_one_anomaly(&h, "x", "read none from n2's final view");
}

#[test]
fn nodes_that_disagree_after_healing_are_an_anomaly() {
    let h = history(
        vec![write("x", 1, 0, 10, Ok), write("x", 2, 20, 30, Ok)],
        &[&[("x", 2)], &[("x", 1)], &[("x", 2)]],
    );
    assert_one_anomaly(&h, "x", "read 1 from n2's final view");
}

#[test]
fn an_unknown_write_that_shows_up_later_took_effect_and_passes() {
    let h = history(
        vec![
            write("x", 1, 0, 10, Ok),
            write("x", 2, 20, 30, Unknown),
            read("x", Some(1), 40, 50),
            read("x", Some(2), 400, 410),
        ],
        &[&[("x", 2)], &[("x", 2)]],
    );
    assert_eq!(check(&h), vec![]);
}

#[test]
fn an_unknown_write_that_never_shows_up_may_have_been_lost_and_passes() {
    let h = history(
        vec![
            write("x", 1, 0, 10, Ok),
            write("x", 2, 20, 30, Unknown),
            read("x", Some(1), 400, 410),
        ],
        &[&[("x", 1)], &[("x", 1)]],
    );
    assert_eq!(check(&h), vec![]);
}

#[test]
fn an_unknown_write_cannot_take_effect_after_a_later_read_saw_it_undone() {
    // Once 2 was read and then 1 was overwritten by 3, 2 cannot reappear.
    let h = history(
        vec![
            write("x", 2, 0, 10, Unknown),
            read("x", Some(2), 20, 30),
            write("x", 3, 40, 50, Ok),
            read("x", Some(2), 60, 70),
        ],
        &[],
    );
    assert_one_anomaly(&h, "x", "read 2 by client 0 via n1 [60..70]");
}

#[test]
fn a_failed_write_that_shows_up_later_is_an_anomaly() {
    let h = history(
        vec![write("x", 1, 0, 10, Failed), read("x", Some(1), 20, 30)],
        &[],
    );
    assert_one_anomaly(&h, "x", "read 1");
}

#[test]
fn reads_of_two_concurrent_writes_that_agree_on_their_order_pass() {
    let h = history(
        vec![
            write("x", 1, 0, 100, Ok),
            write("x", 2, 0, 100, Ok),
            read("x", Some(1), 10, 20),
            read("x", Some(1), 12, 22),
            read("x", Some(2), 30, 40),
            read("x", Some(2), 32, 42),
        ],
        &[&[("x", 2)]],
    );
    assert_eq!(check(&h), vec![]);
}

#[test]
fn reads_that_see_two_concurrent_writes_in_both_orders_are_a_cycle() {
    // One reader sees 1 then 2, another 2 then 1, each pair ordered by real time.
    let h = history(
        vec![
            write("x", 1, 0, 100, Ok),
            write("x", 2, 0, 100, Ok),
            read("x", Some(1), 10, 20),
            read("x", Some(2), 30, 40),
            read("x", Some(2), 10, 20),
            read("x", Some(1), 30, 40),
        ],
        &[],
    );
    assert_one_anomaly(&h, "x", "not linearizable");
}

#[test]
fn keys_are_checked_apart_and_only_the_broken_one_is_named() {
    let h = history(
        vec![
            write("good", 1, 0, 10, Ok),
            write("bad", 2, 0, 10, Ok),
            read("good", Some(1), 20, 30),
            read("bad", None, 20, 30),
        ],
        &[],
    );
    assert_one_anomaly(&h, "bad", "read none");
}

#[test]
fn a_search_that_runs_out_of_budget_is_reported_undecided() {
    let ops = (0..6).map(|v| write("x", v, 0, 100, Ok)).collect();
    let found = check_with_budget(&history(ops, &[]), 3);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(found[0].what.contains("gave up"), "{}", found[0].what);
}

#[test]
fn many_concurrent_unknown_writes_are_decided_within_the_budget() {
    // Each of 40 overlapping unknown writes may or may not have happened: 2^40 guesses unless
    // the checker settles them first.
    let mut ops: Vec<Op> = (0..40).map(|v| write("x", v, v, 1_000, Unknown)).collect();
    ops.push(read("x", Some(17), 2_000, 2_010));
    assert_eq!(check(&history(ops.clone(), &[&[("x", 17)]])), vec![]);
    ops.push(read("x", Some(18), 2_020, 2_030));
    ops.push(read("x", Some(17), 2_040, 2_050));
    let found = check(&history(ops, &[&[("x", 17)]]));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].what.contains("not linearizable"),
        "{}",
        found[0].what
    );
}

#[test]
fn many_concurrent_acknowledged_writes_with_reads_between_are_decided_within_the_budget() {
    // 60 writes all overlapping, their order pinned only by the reads that interleave them,
    // in an order unlike the writes' own: the search's first guesses are all wrong.
    let order = |i: u64| (7 * i) % 60;
    let mut ops: Vec<Op> = (0..60).map(|v| write("x", v, 0, 10_000, Ok)).collect();
    ops.extend((0..60).map(|i| read("x", Some(order(i)), 100 * i + 10, 100 * i + 20)));
    assert_eq!(check(&history(ops.clone(), &[&[("x", order(59))]])), vec![]);
    // One read too many of an early value makes it impossible.
    ops.push(read("x", Some(order(3)), 6_010, 6_020));
    let found = check(&history(ops, &[&[("x", order(59))]]));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].what.contains("not linearizable"),
        "{}",
        found[0].what
    );
}
