//! The leader is killed while writes are being made: a new leader is elected, and no write that
//! was acknowledged is lost.

use gatehouse_tests::TestCluster;
use std::time::Duration;

#[test]
fn killing_the_leader_loses_no_acknowledged_write() -> anyhow::Result<()> {
    let mut cluster = TestCluster::new(&[1, 2, 3])?;
    let old = cluster.leader(Duration::from_secs(10))?;
    let survivors: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();

    let mut acked = Vec::new();
    for i in 0..20 {
        let name = format!("before-{i}");
        cluster.block_on(cluster.admin(survivors[i % 2]).put_tenant(&name))?;
        acked.push(name);
    }
    cluster.kill(old);

    let new = cluster.leader(Duration::from_secs(10))?;
    assert_ne!(new, old, "a killed node cannot lead");
    for i in 0..20 {
        let name = format!("after-{i}");
        cluster.block_on(cluster.admin(survivors[i % 2]).put_tenant(&name))?;
        acked.push(name);
    }
    let index = cluster.max_applied();
    cluster.wait_converged(index, Duration::from_secs(10))?;
    for id in &survivors {
        for name in &acked {
            assert!(cluster.has_tenant(*id, name), "node {id} lost {name}");
        }
    }

    // The old leader comes back, catches up, and agrees.
    cluster.restart(old)?;
    let digest = cluster.wait_converged(index, Duration::from_secs(20))?;
    assert_eq!(cluster.digest(old), digest);
    for name in &acked {
        assert!(
            cluster.has_tenant(old, name),
            "restarted node {old} lacks {name}"
        );
    }
    Ok(())
}
