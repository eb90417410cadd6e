//! Three nodes seen from outside over HTTP: the leader's metrics show each follower's
//! replication lag, a follower's readiness asks the leader for its commit index, and a follower
//! cut off from the others stops being ready.

use gatehouse_tests::TestCluster;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(10);

fn get(cluster: &TestCluster, id: u64, path: &str) -> anyhow::Result<(u16, String)> {
    let url = format!("http://{}{path}", cluster.node(id).http_addr);
    cluster.block_on(async {
        let response = reqwest::get(url).await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    })
}

/// The value of the one sample named exactly `series`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[test]
fn followers_lag_is_measured_on_the_leader_and_readiness_follows_the_leader() -> anyhow::Result<()>
{
    let cluster = TestCluster::new(&[1, 2, 3])?;
    let leader = cluster.leader(DEADLINE)?;
    let followers: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let index = cluster.block_on(cluster.admin(leader).put_tenant("acme"))?;
    cluster.wait_converged(index, DEADLINE)?;

    // Every follower has the write: once the leader has heard so, its lag for each is 0.
    cluster.wait_until("the leader sees its followers caught up", DEADLINE, |c| {
        let Ok((_, text)) = get(c, leader, "/metrics") else {
            return false;
        };
        followers.iter().all(|f| {
            let series = format!("gatehouse_raft_replication_lag_entries{{follower=\"{f}\"}}");
            sample(&text, &series) == Some(0.0)
        })
    })?;
    let (_, text) = get(&cluster, leader, "/metrics")?;
    assert_eq!(
        sample(
            &text,
            &format!("gatehouse_raft_replication_lag_entries{{follower=\"{leader}\"}}")
        ),
        None,
        "the leader is no follower of its own"
    );

    // A follower reports the leader and no replication of its own, and is ready: its applied
    // index is close to the commit index the leader gave it.
    let follower = followers[0];
    let (_, text) = get(&cluster, follower, "/metrics")?;
    assert_eq!(
        sample(&text, "gatehouse_raft_leader_id"),
        Some(leader as f64)
    );
    assert!(
        !text.contains("gatehouse_raft_replication_lag_entries{"),
        "{text}"
    );
    let (status, body) = get(&cluster, follower, "/readyz")?;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(&format!("ready, leader {leader}, applied ")),
        "{body}"
    );

    // Cut off, it can reach no leader: not ready, with the reason.
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != follower).collect();
    cluster.router().partition(&[follower], &others);
    cluster.wait_until("the cut-off follower is not ready", DEADLINE, |c| {
        matches!(get(c, follower, "/readyz"), Ok((503, _)))
    })?;
    let (_, body) = get(&cluster, follower, "/readyz")?;
    assert!(body.starts_with("not ready: "), "{body}");
    // The others still are.
    let (status, body) = get(&cluster, leader, "/readyz")?;
    assert_eq!(status, 200, "{body}");

    cluster.router().heal();
    cluster.wait_until("the follower is ready again", DEADLINE, |c| {
        matches!(get(c, follower, "/readyz"), Ok((200, _)))
    })?;
    Ok(())
}
