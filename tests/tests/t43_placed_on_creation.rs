//! A tenant created through the leader is placed in the log entry that creates it: the leader's
//! batcher appends the placement step after the batch's proposals, so no review and no entry
//! of its own is needed. An update asks for no step, and what a follower's batch creates is
//! left to the reviews, as before.

use gatehouse_actors::NewTenantPlacer;
use gatehouse_actors::placement::rendezvous;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::Command;
use gatehouse_registry::registry::Placement;
use gatehouse_testkit::wire::resource;
use gatehouse_tests::{NodeOptions, TestCluster, fast_actors, fast_timings, tenant};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const SHORT: Duration = Duration::from_secs(20);

fn placement(cluster: &TestCluster, node: u64, tenant: &str) -> Option<Placement> {
    cluster.node(node).cluster.registry.read().placement(tenant)
}

/// With reviews an hour apart, none runs during the test: whatever is placed was placed by the
/// batcher. The placer installed on the leader homes every tenant on a node the rendezvous
/// would not pick, so a placement a review made could not pass for it either.
#[test]
fn the_leaders_batcher_places_the_tenants_a_batch_creates_in_its_own_entry() -> anyhow::Result<()> {
    let timings = fast_timings(500);
    let options = NodeOptions {
        timings,
        actors: Some(gatehouse_actors::ActorSettings {
            review_every: Duration::from_secs(3600),
            ..fast_actors(timings)
        }),
        ..NodeOptions::default()
    };
    let cluster = TestCluster::with_options(&[1, 2, 3], options)?;
    let leader = cluster.leader(SHORT)?;
    let follower = [1, 2, 3].into_iter().find(|id| *id != leader).expect("one");
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let placer: NewTenantPlacer = {
        let asked = asked.clone();
        Arc::new(move |tenants: &[&str]| {
            let mut asked = asked.lock().unwrap();
            tenants
                .iter()
                .map(|tenant| {
                    asked.push((*tenant).to_owned());
                    Command::Place {
                        tenant: (*tenant).to_owned(),
                        home: not_the_winner(tenant),
                        epoch: 1,
                    }
                })
                .collect()
        })
    };
    cluster.node(leader).cluster.place_new_tenants(Some(placer));

    // Ten writers at once, so the batcher takes several writes into one entry; one write in five
    // carries two tenants, and one in five is a policy of a tenant that does not exist.
    let writes: Vec<Vec<pb::Resource>> = (0..40)
        .map(|i| match i % 5 {
            4 => vec![resource(
                "Policy",
                &format!("p{i}"),
                Some("none"),
                json!({}),
            )],
            0 => vec![tenant(&format!("a{i}")), tenant(&format!("b{i}"))],
            _ => vec![tenant(&format!("a{i}"))],
        })
        .collect();
    let outcomes = cluster.block_on(async {
        let mut writers = Vec::new();
        for chunk in writes.chunks(4) {
            let (admin, chunk) = (cluster.admin(leader), chunk.to_vec());
            writers.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for write in chunk {
                    outcomes.push(admin.apply(write).await.is_ok());
                }
                outcomes
            }));
        }
        let mut all = Vec::new();
        for writer in writers {
            all.extend(writer.await.expect("a writer"));
        }
        all
    });
    let created: Vec<String> = (0..40)
        .filter(|i| i % 5 != 4)
        .flat_map(|i| {
            let second = (i % 5 == 0).then(|| format!("b{i}"));
            std::iter::once(format!("a{i}")).chain(second)
        })
        .collect();
    assert_eq!(
        outcomes.iter().filter(|ok| **ok).count(),
        32,
        "the tenants' writes are taken and the orphan policies refused"
    );
    for name in &created {
        assert_eq!(
            placement(&cluster, leader, name),
            Some(Placement {
                home: not_the_winner(name),
                epoch: 1,
                moving_to: None
            }),
            "{name} was placed by the batcher when its write was answered"
        );
    }

    // Put again, a tenant is not placed again: the placer is not even asked.
    let before = asked.lock().unwrap().len();
    let again = cluster.admin(leader);
    cluster.block_on(again.apply(vec![tenant("a1")]))?;
    assert_eq!(
        asked.lock().unwrap().len(),
        before,
        "an update asks nothing"
    );
    assert_eq!(
        before,
        created.len(),
        "each created tenant was asked for once"
    );

    // A follower's batch carries no placement: that tenant waits for a review.
    cluster.block_on(cluster.admin(follower).apply(vec![tenant("via-follower")]))?;
    let index = cluster.max_applied();
    cluster.wait_converged(index, SHORT)?;
    assert!(cluster.has_tenant(leader, "via-follower"));
    assert_eq!(placement(&cluster, leader, "via-follower"), None);
    assert_eq!(
        placement(&cluster, follower, "a1"),
        placement(&cluster, leader, "a1")
    );
    Ok(())
}

/// The node after the rendezvous winner among the three: never the home a review would pick.
fn not_the_winner(tenant: &str) -> u64 {
    let winner = rendezvous(tenant, &[1, 2, 3]).expect("a winner");
    winner % 3 + 1
}

/// With the product's loop publishing its own placer, every tenant created through the leader
/// is placed by the time its write is answered, at the home the reviews would give it.
#[test]
fn tenants_created_through_the_leader_are_placed_when_their_write_is_answered() -> anyhow::Result<()>
{
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(SHORT)?;
    // A review as leader publishes the placer before it proposes anything: once the first
    // tenant is placed, one has run.
    cluster.block_on(cluster.admin(leader).apply(vec![tenant("first")]))?;
    cluster.wait_all_placed(SHORT)?;

    let admin = cluster.admin(leader);
    for i in 0..20 {
        let name = format!("t{i:02}");
        cluster.block_on(admin.apply(vec![tenant(&name)]))?;
        let placed = placement(&cluster, leader, &name)
            .ok_or_else(|| anyhow::anyhow!("{name} was not placed when its write was answered"))?;
        assert_eq!(placed.epoch, 1, "{name}");
        assert_eq!(Some(placed.home), rendezvous(&name, &[1, 2, 3]), "{name}");
    }
    Ok(())
}
