//! A new learner catches up from a snapshot of a registry of 50,000 resources: the log behind
//! the snapshot is purged, so the snapshot is the only way in.

use gatehouse_node::config::RaftTimings;
use gatehouse_tests::{TestCluster, fast_timings, tenant};
use std::time::{Duration, Instant};

const RESOURCES: usize = 50_000;
const BATCH: usize = 1_000;

#[test]
fn a_new_learner_catches_up_from_a_snapshot_of_50k_resources() -> anyhow::Result<()> {
    // No snapshot by policy during the load (each would serialise the growing registry on
    // three nodes sharing two cores); one is asked for once the registry stands still, and no
    // log is kept behind it: the learner cannot catch up from the log. Big entries (1,000
    // resources each) get a roomier heartbeat, which also bounds each AppendEntries.
    let timings = RaftTimings {
        heartbeat: Duration::from_millis(200),
        election_min: Duration::from_millis(1_000),
        election_max: Duration::from_millis(2_000),
        logs_kept_after_snapshot: 0,
        ..fast_timings(1_000_000)
    };
    let mut cluster = TestCluster::with_timings(&[1, 2, 3], timings)?;
    let admin = cluster.admin(1);
    let mut last = 0;
    for b in 0..RESOURCES / BATCH {
        let batch = (0..BATCH)
            .map(|i| tenant(&format!("t{:05}", b * BATCH + i)))
            .collect();
        last = cluster.block_on(admin.apply(batch))?;
    }
    // The leader gives every new tenant a home, a few hundred per review: let it finish, so the
    // registry stands still while the learner catches up and the digests are compared.
    // Generous: on a 2-core machine shared with other work this alone can take minutes.
    cluster.wait_all_placed(Duration::from_secs(300))?;
    let last = last.max(cluster.max_applied());
    cluster.wait_converged(last, Duration::from_secs(60))?;
    let last = cluster.max_applied();
    let leader = cluster.leader(Duration::from_secs(10))?;
    cluster.block_on(cluster.node(leader).raft().trigger().snapshot())?;
    cluster.wait_until(
        "the leader snapshots and purges its log",
        Duration::from_secs(120),
        |c| c.purged_index(leader).is_some_and(|p| p >= last),
    )?;

    let started = Instant::now();
    cluster.add_learner(4)?;
    // Admitting node 4 is itself a write: catch up to everything, then compare.
    let now = cluster.max_applied();
    cluster.wait_for_applied(4, now, Duration::from_secs(120))?;
    println!(
        "learner caught up on {RESOURCES} resources in {:?}",
        started.elapsed()
    );
    let (_, learners) = cluster.membership(leader);
    assert_eq!(learners, [4]);
    assert!(
        cluster.snapshot_index(4).is_some_and(|i| i > 0),
        "the learner's state came from a snapshot"
    );
    let digest = cluster.wait_converged(now, Duration::from_secs(30))?;
    assert_eq!(cluster.digest(4), digest);
    assert!(
        cluster.has_tenant(4, "t00000") && cluster.has_tenant(4, &format!("t{:05}", RESOURCES - 1))
    );
    Ok(())
}
