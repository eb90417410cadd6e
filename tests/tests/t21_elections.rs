//! A node stands for election only when a quorum would vote for it (pre-vote): a follower that
//! is cut off, or that alone stops hearing the leader, neither raises the term nor unseats a
//! leader the others still follow. Without it, such a follower stood again and again at ever
//! higher terms, and its higher term deposed the working leader the moment it was heard again.

use gatehouse_tests::TestCluster;
use std::time::Duration;

fn term(cluster: &TestCluster, id: u64) -> u64 {
    cluster
        .node(id)
        .cluster
        .raft
        .metrics()
        .borrow()
        .current_term
}

/// Long enough for a follower's election timeout to pass several times over (lease plus at
/// most 600 ms each time with the harness's timings).
const SEVERAL_TIMEOUTS: Duration = Duration::from_secs(4);

#[test]
fn a_follower_cut_off_and_back_raises_no_term_and_unseats_no_leader() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let before = term(&cluster, leader);
    let (cut, other) = match [1, 2, 3]
        .into_iter()
        .filter(|id| *id != leader)
        .collect::<Vec<_>>()[..]
    {
        [a, b] => (a, b),
        _ => unreachable!("three nodes, one leader"),
    };

    cluster.router().partition(&[cut], &[leader, other]);
    // The majority goes on writing, so the cut-off node's log falls behind too.
    for i in 0..5 {
        cluster.block_on(cluster.admin(leader).put_tenant(&format!("while-cut-{i}")))?;
    }
    std::thread::sleep(SEVERAL_TIMEOUTS);
    assert_eq!(
        term(&cluster, cut),
        before,
        "the cut-off node raised the term without a quorum that would vote for it"
    );

    cluster.router().heal();
    let index = cluster.block_on(cluster.admin(leader).put_tenant("after-heal"))?;
    cluster.wait_converged(index, Duration::from_secs(20))?;
    assert_eq!(
        cluster.leader(Duration::from_secs(5))?,
        leader,
        "the leader was unseated"
    );
    for id in [1, 2, 3] {
        assert_eq!(term(&cluster, id), before, "node {id} is in another term");
        assert!(cluster.has_tenant(id, "while-cut-4"), "node {id}");
    }
    Ok(())
}

#[test]
fn a_follower_that_alone_stops_hearing_the_leader_does_not_stand() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let before = term(&cluster, leader);
    let deaf = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");

    // The leader's messages to it are lost; it still reaches everyone, and they answer it.
    cluster.router().cut_one_way(leader, deaf);
    std::thread::sleep(SEVERAL_TIMEOUTS);
    for id in [1, 2, 3] {
        assert_eq!(term(&cluster, id), before, "node {id} is in another term");
    }
    assert_eq!(cluster.leader(Duration::from_secs(5))?, leader);

    cluster.router().heal();
    let index = cluster.block_on(cluster.admin(leader).put_tenant("after-heal"))?;
    cluster.wait_converged(index, Duration::from_secs(20))?;
    Ok(())
}
