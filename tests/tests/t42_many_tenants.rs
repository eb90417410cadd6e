//! Many tenants, created after the cluster settled: the leader's reviews still find and place
//! every one (they look at the registry's unsettled tenants, not at every tenant), and no home
//! starts an actor for a tenant with nothing queued; its actor comes on first use.

use gatehouse_tests::{TestCluster, fast_actors, fast_timings, tenant};
use std::time::Duration;

const TENANTS: usize = 300;
const SHORT: Duration = Duration::from_secs(20);

#[test]
fn tenants_created_in_bulk_are_all_placed_and_start_no_actor_until_used() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(SHORT)?;
    // The leader counts every voter reachable until `home_unreachable_after` has passed since
    // it took over, then looks again: the reviews after that window and a few more see the same
    // voters, so the load below is placed through the unsettled tenants alone. The window is
    // the leader's own clock, with nothing to poll for, so the test waits it out.
    let settings = fast_actors(fast_timings(500));
    std::thread::sleep(settings.home_unreachable_after + 3 * settings.review_every);
    let active = |c: &TestCluster| -> usize {
        c.running()
            .into_iter()
            .map(|id| c.node(id).actors.active_tenants())
            .sum()
    };
    let before = active(&cluster);

    let names: Vec<String> = (0..TENANTS).map(|i| format!("bulk-{i:04}")).collect();
    // Through a follower: the leader's batcher places the tenants its own batches create in
    // the same entry (t43), and these are for the reviews to find.
    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let admin = cluster.admin(follower);
    cluster.block_on(admin.apply(names.iter().map(|n| tenant(n)).collect()))?;
    cluster.wait_all_placed(SHORT)?;
    for id in cluster.running() {
        let registry = cluster.node(id).cluster.registry.read();
        assert_eq!(
            registry.unsettled_tenants().count(),
            0,
            "node {id} still counts tenants as unsettled once all are placed"
        );
    }
    assert_eq!(
        active(&cluster),
        before,
        "placing tenants with nothing queued started actors"
    );

    let name = &names[TENANTS / 2];
    let home = cluster
        .node(leader)
        .cluster
        .registry
        .read()
        .placement(name)
        .expect("placed")
        .home;
    let actors = cluster.node(home).actors.clone();
    cluster.block_on(actors.tenant(name))?;
    assert_eq!(active(&cluster), before + 1, "first use starts one actor");
    Ok(())
}
