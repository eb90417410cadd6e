//! A leader that freezes (SIGSTOP: its sockets open, nothing answered) must not hold writes
//! sent through its followers for longer than an election. A follower forwards a write to the
//! leader it knows; once it learns of a new leader it gives the old one up and writes through
//! the new one, under the same request id. Writes that arrive meanwhile, queued behind the
//! batch in flight, go on with it.

use std::time::Duration;

mod common;

use common::{cli, three_voters, until};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::resource;
use serde_json::{Value, json};

/// What a client of the frozen cluster allows a write: more than an election with this suite's
/// timings (300–600 ms) and its detection, well under the 5 s a forward may wait for a leader
/// that is still the leader.
const DEADLINE: Duration = Duration::from_secs(4);
/// Writes at once, through both followers: most queue behind the first batch each one forwards.
const WRITES: usize = 12;

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_followers_go_on_within_an_election_when_the_leader_freezes() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, token) = tokio::task::block_in_place(|| three_voters(dir.path(), &[]));
    let leader = tokio::task::block_in_place(|| {
        until("a leader", Duration::from_secs(30), || {
            let out = cli(&nodes[0].grpc, &token, &["-o", "json", "cluster", "status"]);
            let status: Value = serde_json::from_slice(&out.stdout).ok()?;
            status["leader"].as_u64()
        })
    });
    let frozen = nodes.iter().find(|n| n.id == leader).expect("the leader");
    let followers: Vec<String> = nodes
        .iter()
        .filter(|n| n.id != leader)
        .map(|n| n.grpc.clone())
        .collect();

    signal(frozen.child.id(), "STOP");
    let writes = (0..WRITES).map(|i| {
        let addr = followers[i % followers.len()].clone();
        let token = token.clone();
        tokio::spawn(async move {
            let mut client = RegistryServiceClient::connect(format!("http://{addr}"))
                .await
                .expect("the follower answers");
            let mut request = tonic::Request::new(pb::ApplyRequest {
                resources: vec![resource("Tenant", &format!("frozen-{i}"), None, json!({}))],
            });
            request.set_timeout(DEADLINE);
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {token}").parse().expect("ASCII"),
            );
            client.apply(request).await
        })
    });
    let answers = futures_join(writes).await;
    signal(frozen.child.id(), "CONT");

    for (i, answer) in answers.into_iter().enumerate() {
        let reply = answer.unwrap_or_else(|status| {
            panic!("write {i} through a follower of the frozen leader: {status:?}")
        });
        assert_eq!(reply.into_inner().results.len(), 1);
    }
    // The old leader, thawed, follows the new one and holds every write.
    tokio::task::block_in_place(|| {
        until(
            "the thawed node holds every write",
            Duration::from_secs(30),
            || {
                let out = cli(&frozen.grpc, &token, &["list", "tenants"]);
                let listed = String::from_utf8_lossy(&out.stdout).into_owned();
                (0..WRITES)
                    .all(|i| {
                        listed.contains(&format!("Tenant/frozen-{i} "))
                            || listed.lines().any(|l| {
                                l.split_whitespace().next() == Some(&format!("Tenant/frozen-{i}"))
                            })
                    })
                    .then_some(())
            },
        )
    });
}

async fn futures_join<T>(handles: impl Iterator<Item = tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.expect("the write task"));
    }
    out
}
