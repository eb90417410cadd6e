//! Concurrent writes through one node share log entries, and each still gets its own answer:
//! a refused write in a batch refuses nothing else. The audit flush the changes of one entry
//! wait on runs once for them all.

use futures::FutureExt;
use gatehouse_cluster::cluster::Flush;
use gatehouse_fronts::services::convert::resource_from;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::Command;
use gatehouse_testkit::wire::resource;
use gatehouse_tests::{TestCluster, tenant};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

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

/// An admin change's audit flush runs beside its write, once for all the changes of one log
/// entry: the changes that queued behind a batch share one run of the flush they name, and a
/// change refused before it is written still has its flush run.
#[test]
fn changes_in_one_batch_share_one_run_of_their_flush() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1])?;
    cluster.leader(Duration::from_secs(10))?;
    let node = cluster.node(1).cluster.clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let (open, opened) = watch::channel(false);
    let flush: Flush = {
        let runs = runs.clone();
        Arc::new(move || {
            runs.fetch_add(1, Ordering::SeqCst);
            let mut opened = opened.clone();
            async move {
                let _ = opened.wait_for(|open| *open).await;
                Ok(())
            }
            .boxed()
        })
    };
    let put = |name: &str| -> anyhow::Result<Command> {
        Ok(Command::Put {
            resources: vec![resource_from(tenant(name)).map_err(|e| anyhow::anyhow!("{e}"))?],
        })
    };

    cluster.block_on(async {
        // The first change goes alone; its batch stays in flight while its flush is held.
        let first = {
            let (node, flush, command) = (node.clone(), flush.clone(), put("first")?);
            tokio::spawn(async move { node.propose_flushed(command, &flush).await })
        };
        until("the first batch to run its flush", || {
            runs.load(Ordering::SeqCst) > 0
        })
        .await?;
        let queued: Vec<_> = ["second", "third", "fourth"]
            .into_iter()
            .map(|name| {
                let (node, flush, command) = (node.clone(), flush.clone(), put(name)?);
                Ok(tokio::spawn(async move {
                    node.propose_flushed(command, &flush).await
                }))
            })
            .collect::<anyhow::Result<_>>()?;
        until("three changes queued behind the first", || {
            node.queued_proposals() == queued.len()
        })
        .await?;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the queued changes wait for the batch"
        );
        open.send(true)?;

        for (name, answer) in ["first", "second", "third", "fourth"]
            .into_iter()
            .zip(std::iter::once(first).chain(queued))
        {
            let (flushed, written) = answer.await?;
            flushed.map_err(|e| anyhow::anyhow!("{name}'s flush: {e}"))?;
            written.map_err(|e| anyhow::anyhow!("{name}'s write: {e}"))?;
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "one run for the first batch, one for the three changes that queued behind it"
        );

        let (flushed, written) = node
            .propose_flushed(Command::Put { resources: vec![] }, &flush)
            .await;
        assert!(written.is_err(), "a put of nothing is refused: {written:?}");
        assert!(flushed.is_ok());
        assert_eq!(
            runs.load(Ordering::SeqCst),
            3,
            "a refused change still flushes"
        );
        anyhow::Ok(())
    })?;
    for name in ["first", "second", "third", "fourth"] {
        assert!(cluster.has_tenant(1, name), "{name} was written");
    }
    Ok(())
}

/// Yields until `done` holds; an error naming `what` if it does not within 10 s.
async fn until(what: &str, done: impl Fn() -> bool) -> anyhow::Result<()> {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::task::yield_now().await;
        }
    });
    waited
        .await
        .map_err(|_| anyhow::anyhow!("waited 10 s for {what}"))
}

/// A flush that fails is reported to every change that waited on it; the write itself stands.
#[test]
fn a_failed_flush_is_told_to_its_change_and_the_write_stands() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1])?;
    cluster.leader(Duration::from_secs(10))?;
    let node = cluster.node(1).cluster.clone();
    let failing: Flush =
        Arc::new(|| async { Err(std::io::Error::other("the audit disk is gone")) }.boxed());
    let command = Command::Put {
        resources: vec![resource_from(tenant("unflushed")).map_err(|e| anyhow::anyhow!("{e}"))?],
    };
    let (flushed, written) = cluster.block_on(node.propose_flushed(command, &failing));
    let error = flushed.expect_err("the flush failed");
    assert!(
        error.to_string().contains("the audit disk is gone"),
        "{error}"
    );
    written.map_err(|e| anyhow::anyhow!("the write: {e}"))?;
    assert!(cluster.has_tenant(1, "unflushed"));
    Ok(())
}
