//! The cluster grows from three voters to five and shrinks back to three while a writer keeps
//! writing; every acknowledged write survives on every remaining node.

use gatehouse_tests::TestCluster;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[test]
fn grow_to_five_and_shrink_to_three_under_writes() -> anyhow::Result<()> {
    let mut cluster = TestCluster::new(&[1, 2, 3])?;
    let writer_addr = cluster.admin(1);
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));

    // A writer on its own thread: bounded by count and by the stop flag.
    let writer = {
        let stop = stop.clone();
        let acked = acked.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            for i in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let name = format!("w-{i}");
                if rt.block_on(writer_addr.put_tenant(&name)).is_ok() {
                    acked.lock().expect("acked").push(name);
                }
            }
        })
    };

    cluster.add_voter(4)?;
    cluster.add_voter(5)?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let (voters, _) = cluster.membership(leader);
    assert_eq!(voters, [1, 2, 3, 4, 5]);

    // Shrink by two nodes other than node 1, which the writer talks to.
    for gone in [2, 3] {
        cluster.remove(gone)?;
        cluster.kill(gone);
    }
    let leader = cluster.leader(Duration::from_secs(10))?;
    let (voters, learners) = cluster.membership(leader);
    assert_eq!(voters, [1, 4, 5]);
    assert!(learners.is_empty());

    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer thread");
    let acked = acked.lock().expect("acked").clone();
    assert!(
        acked.len() >= 5,
        "the writer should have kept writing; it acked {}",
        acked.len()
    );

    let index = cluster.max_applied();
    cluster.wait_converged(index, Duration::from_secs(20))?;
    for id in [1, 4, 5] {
        for name in &acked {
            assert!(cluster.has_tenant(id, name), "node {id} lost {name}");
        }
    }
    Ok(())
}

#[test]
fn a_node_id_is_never_reused() -> anyhow::Result<()> {
    let mut cluster = TestCluster::new(&[1, 2, 3])?;
    cluster.remove(3)?;
    cluster.kill(3);
    let err = cluster
        .block_on(cluster.admin(1).add_learner(3, "127.0.0.1:1".into()))
        .expect_err("a removed node's id comes back");
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err}");
    Ok(())
}

#[test]
fn removing_a_voter_that_would_leave_no_quorum_is_refused() -> anyhow::Result<()> {
    let mut cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    // One follower down: removing the other would leave {leader, down}: 1 of 2 reachable.
    cluster.kill(others[0]);
    // Wait until the leader no longer hears from it.
    let down = others[0];
    cluster.wait_until(
        "the killed node counts as unreachable",
        Duration::from_secs(10),
        |c| {
            c.block_on(c.admin(leader).status())
                .is_ok_and(|s| s.nodes.iter().any(|n| n.node_id == down && !n.reachable))
        },
    )?;
    let err = cluster.block_on(async {
        let admin = cluster.admin(leader);
        admin.remove(others[1]).await
    });
    let err = err.expect_err("the removal leaves no reachable majority");
    let status = err.downcast_ref::<tonic::Status>().expect("a gRPC status");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    assert!(status.message().contains("reachable"), "{status}");
    let (voters, _) = cluster.membership(leader);
    assert_eq!(voters.len(), 3, "membership unchanged");
    Ok(())
}
