//! Three nodes replicate a write: committed through any node, present on every node, with one
//! state digest everywhere.

use gatehouse_tests::TestCluster;
use std::time::Duration;

#[test]
fn three_nodes_replicate_a_write() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let follower = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");

    // One write through the leader, one through a follower (forwarded to the leader).
    let a = cluster.block_on(cluster.admin(leader).put_tenant("through-leader"))?;
    let b = cluster.block_on(cluster.admin(follower).put_tenant("through-follower"))?;
    assert!(b > a, "the second write commits after the first");

    let digest = cluster.wait_converged(b, Duration::from_secs(10))?;
    for id in [1, 2, 3] {
        assert!(cluster.has_tenant(id, "through-leader"), "node {id}");
        assert!(cluster.has_tenant(id, "through-follower"), "node {id}");
        assert_eq!(cluster.digest(id), digest);
    }
    // A linearizable read on a follower sees a write made a moment ago elsewhere.
    let c = cluster.block_on(cluster.admin(leader).put_tenant("just-now"))?;
    assert!(c > b);
    let read = cluster.block_on(cluster.admin(follower).get_tenant("just-now", true))?;
    assert!(
        read.is_some(),
        "a linearizable read on node {follower} missed a committed write"
    );
    Ok(())
}
