//! The whole cluster stops and starts again from its data directories: same state, same
//! leaderless-then-elected cluster, and it takes writes again.

use gatehouse_tests::TestCluster;
use std::time::Duration;

#[test]
fn the_whole_cluster_restarts_from_disk() -> anyhow::Result<()> {
    let mut cluster = TestCluster::new(&[1, 2, 3])?;
    let mut last = 0;
    for i in 0..30 {
        last = cluster.block_on(cluster.admin(1 + i % 3).put_tenant(&format!("r-{i}")))?;
    }
    // The leader places the new tenants in the background: the state is still once it has.
    cluster.wait_all_placed(Duration::from_secs(10))?;
    let last = last.max(cluster.max_applied());
    let digest = cluster.wait_converged(last, Duration::from_secs(10))?;
    let addrs: Vec<_> = [1, 2, 3].iter().map(|id| cluster.addr(*id)).collect();

    for id in [1, 2, 3] {
        cluster.kill(id);
    }
    for id in [1, 2, 3] {
        cluster.restart(id)?;
    }
    let again: Vec<_> = [1, 2, 3].iter().map(|id| cluster.addr(*id)).collect();
    assert_eq!(addrs, again, "a restarted node binds the address it had");

    cluster.leader(Duration::from_secs(15))?;
    assert_eq!(
        cluster.wait_converged(last, Duration::from_secs(15))?,
        digest
    );
    let next = cluster.block_on(cluster.admin(2).put_tenant("after-restart"))?;
    assert!(next > last);
    cluster.wait_converged(next, Duration::from_secs(10))?;
    for id in [1, 2, 3] {
        assert!(cluster.has_tenant(id, "after-restart") && cluster.has_tenant(id, "r-0"));
    }
    Ok(())
}
