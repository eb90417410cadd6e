//! The adversary's tests for the node-to-node service. Anyone who can reach a node's gRPC port
//! can call `RaftService`; only a caller holding the cluster's peer secret gets past the door.
//! A forged heartbeat from a made-up leader in a far later term is the sharpest attack there:
//! a node that took it would follow the forger and depose its real leader. Each attempt below
//! goes to a real node over a real socket, and the node's term and registry are checked
//! unchanged after it; the last step sends the same forgery with the real secret and shows it
//! would have worked, so the refusals are what protected the cluster.

use futures::StreamExt;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::raft_service_client::RaftServiceClient;
use gatehouse_tests::TestCluster;
use gatehouse_tests::flow::wait_settled;
use serde_json::json;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// A heartbeat from node 9, leading in term 99.
fn forged_heartbeat() -> Vec<u8> {
    let rpc = json!({
        "vote": { "leader_id": { "term": 99, "node_id": 9 }, "committed": true },
        "prev_log_id": null,
        "leader_commit": null,
        "entries": [],
    });
    serde_json::to_vec(&rpc).unwrap()
}

/// A request carrying `bearer` as its credential, or none.
fn with<T>(message: T, bearer: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(bearer) = bearer {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {bearer}").parse().unwrap());
    }
    request
}

/// Every method of the service, called with `bearer`: the status of each. The TimeoutNow names
/// the real leader and term, so a node that let it in would start an election.
async fn call_everything(
    client: &mut RaftServiceClient<Channel>,
    bearer: Option<&str>,
    (leader_id, term): (u64, u64),
) -> Vec<(&'static str, Status)> {
    let payload = forged_heartbeat;
    let mut refused = vec![];
    let mut note = |method, answer: Result<(), Status>| match answer {
        Ok(()) => panic!("{method} answered a caller without the peer secret"),
        Err(status) => refused.push((method, status)),
    };
    let request = pb::AppendEntriesRequest { payload: payload() };
    let answer = client.append_entries(with(request, bearer)).await;
    note("AppendEntries", answer.map(drop));
    let requests = futures::stream::iter([pb::AppendEntriesRequest { payload: payload() }]);
    let answer = match client.append_entries_stream(with(requests, bearer)).await {
        // A stream that opens must still refuse what comes over it.
        Ok(answers) => match answers.into_inner().next().await {
            Some(Ok(_)) => Ok(()),
            Some(Err(status)) => Err(status),
            None => Err(Status::unknown("the stream ended without an answer")),
        },
        Err(status) => Err(status),
    };
    note("AppendEntriesStream", answer);
    let answer = client
        .vote(with(pb::VoteRequest { payload: payload() }, bearer))
        .await;
    note("Vote", answer.map(drop));
    let request = pb::InstallSnapshotRequest { payload: payload() };
    let answer = client.install_snapshot(with(request, bearer)).await;
    note("InstallSnapshot", answer.map(drop));
    let answer = client
        .forward(with(pb::ForwardRequest { payload: payload() }, bearer))
        .await;
    note("Forward", answer.map(drop));
    let request = pb::TimeoutNowRequest { leader_id, term };
    let answer = client.timeout_now(with(request, bearer)).await;
    note("TimeoutNow", answer.map(drop));
    let answer = client
        .pre_vote(with(pb::PreVoteRequest { payload: payload() }, bearer))
        .await;
    note("PreVote", answer.map(drop));
    refused
}

#[test]
fn no_raft_message_gets_in_without_the_peer_secret() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let written = cluster.block_on(cluster.admin(1).put_tenant("acme"))?;
    wait_settled(&cluster, "acme", Duration::from_secs(10))?;
    let follower = 3;
    let before = cluster.term(follower);
    let leader = cluster.leader(Duration::from_secs(5))?;
    let registry_before = cluster.node(follower).cluster.registry.read().to_bytes();
    let secret = cluster
        .node(follower)
        .cluster
        .peers
        .secret()
        .expect("a joined node has the peer secret");
    let admin_key = cluster.admin_key().to_owned();
    let mut client = cluster.block_on(async {
        let channel = Channel::from_shared(format!("http://{}", cluster.addr(follower)))?
            .connect()
            .await?;
        anyhow::Ok(RaftServiceClient::new(channel))
    })?;

    // No credential, a wrong secret, and the cluster admin's key (a client's credential is not
    // a peer's).
    for bearer in [None, Some("peer_not-the-secret"), Some(admin_key.as_str())] {
        let called = call_everything(&mut client, bearer, (leader, before));
        for (method, status) in cluster.block_on(called) {
            assert_eq!(
                status.code(),
                Code::Unauthenticated,
                "{method} with {bearer:?}: {status:?}"
            );
        }
    }
    // An election that a TimeoutNow let in would start after its answer: give one a moment to
    // show in the term.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cluster.term(follower),
        before,
        "a refused message moved the term"
    );
    assert_eq!(
        cluster.node(follower).cluster.registry.read().to_bytes(),
        registry_before,
        "a refused message changed the registry (last write at {written})"
    );

    // With the secret, the same forged heartbeat over the stream is taken: the secret is all
    // that kept the node following its real leader.
    let taken = cluster.block_on(async {
        let requests = futures::stream::iter([pb::AppendEntriesRequest {
            payload: forged_heartbeat(),
        }]);
        let answers = client
            .append_entries_stream(with(requests, Some(&secret)))
            .await?;
        answers.into_inner().next().await.transpose()
    })?;
    assert!(taken.is_some(), "the stream gave no answer");
    // The answer follows the saved vote, but metrics are published after it; and once in term
    // 99 the node refuses its real leader, whose election then lands past 99.
    cluster.wait_until(
        "the forged heartbeat's term taken",
        Duration::from_secs(5),
        |c| c.term(follower) >= 99,
    )?;
    Ok(())
}
