//! Concurrent writes through one node share log entries, and each still gets its own answer:
//! a refused write in a batch refuses nothing else.

use gatehouse_proto::v1 as pb;
use gatehouse_testkit::wire::resource;
use gatehouse_tests::{TestCluster, tenant};
use serde_json::json;
use std::time::Duration;

const WRITERS: usize = 32;
const EACH: usize = 10;

fn orphan_policy(name: &str) -> pb::Resource {
    resource("Policy", name, Some("no-such-tenant"), json!({}))
}

#[test]
fn concurrent_writes_share_entries_and_keep_their_own_answers() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let via = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let before = cluster.max_applied();

    let outcomes = cluster.block_on(async {
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let admin = cluster.admin(via);
            writers.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for i in 0..EACH {
                    // Every fifth write names a tenant that does not exist.
                    let resource = if i % 5 == 4 {
                        orphan_policy(&format!("p-{w}-{i}"))
                    } else {
                        tenant(&format!("t-{w}-{i}"))
                    };
                    outcomes.push((w, i, admin.apply(vec![resource]).await));
                }
                outcomes
            }));
        }
        let mut all = Vec::new();
        for writer in writers {
            all.extend(writer.await.expect("writer task"));
        }
        all
    });

    let mut good = 0;
    for (w, i, outcome) in &outcomes {
        if i % 5 == 4 {
            let err = outcome
                .as_ref()
                .expect_err("a policy of a missing tenant is refused");
            let status = err.downcast_ref::<tonic::Status>().expect("a gRPC status");
            assert_eq!(status.code(), tonic::Code::NotFound, "{status}");
        } else {
            assert!(outcome.is_ok(), "writer {w} write {i}: {outcome:?}");
            good += 1;
        }
    }
    let index = cluster.max_applied();
    cluster.wait_converged(index, Duration::from_secs(20))?;
    for id in [1, 2, 3] {
        for w in 0..WRITERS {
            for i in (0..EACH).filter(|i| i % 5 != 4) {
                assert!(
                    cluster.has_tenant(id, &format!("t-{w}-{i}")),
                    "node {id} lacks t-{w}-{i}"
                );
            }
        }
    }
    let entries = index - before;
    assert!(
        entries < (WRITERS * EACH) as u64,
        "{} writes took {entries} log entries: concurrent writes should share entries",
        WRITERS * EACH
    );
    println!(
        "{} writes ({good} accepted) in {entries} log entries",
        WRITERS * EACH
    );
    Ok(())
}
