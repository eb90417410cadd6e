//! `gatehouse cluster status|placement|add-learner|promote|remove|wait-caught-up`.

use super::Output;
use super::client::Remote;
use super::client::{self, explain};
use crate::exit::{Exit, Usage};
use clap::Subcommand;
use gatehouse_proto::v1 as pb;
use serde_json::json;
use std::time::{Duration, Instant};

/// How often `wait-caught-up` asks for the cluster's status.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often it reports progress that has not changed.
const REPORT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Leader, term, voters, learners, and each node's applied index, lag and tenants.
    Status,
    /// Where each tenant lives: its home node, epoch, open calls and any move under way.
    Placement,
    /// Add a node as a learner (it receives the log but does not vote).
    AddLearner {
        /// The new node's id (its `serve --node-id`).
        #[arg(long)]
        node_id: u64,
        /// The new node's gRPC address, as the other nodes reach it.
        #[arg(long, value_name = "HOST:PORT")]
        grpc: String,
    },
    /// Make a learner a voter.
    Promote {
        /// The learner's node id.
        node_id: u64,
    },
    /// Take a node out of the cluster.
    Remove {
        /// The node's id.
        node_id: u64,
    },
    /// Wait until a node has every log entry the leader has, printing its progress.
    WaitCaughtUp {
        /// The node's id.
        node_id: u64,
        /// Give up after this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0)]
        timeout: f64,
    },
}

pub async fn run(remote: &Remote, command: ClusterCommand) -> anyhow::Result<Exit> {
    let mut cluster = client::cluster(remote).await?;
    let (log_index, voters, learners) = match command {
        ClusterCommand::Status | ClusterCommand::Placement => {
            let status = cluster
                .status(pb::ClusterStatusRequest {})
                .await
                .map_err(explain)?
                .into_inner();
            if matches!(command, ClusterCommand::Placement) {
                print_placement(remote.output, &status);
            } else {
                print_status(remote.output, &status);
            }
            return Ok(Exit::Done);
        }
        ClusterCommand::WaitCaughtUp { node_id, timeout } => {
            if !(timeout.is_finite() && timeout > 0.0) {
                return Err(Usage("--timeout takes a number of seconds above 0".into()).into());
            }
            return wait_caught_up(&mut cluster, node_id, Duration::from_secs_f64(timeout)).await;
        }
        ClusterCommand::AddLearner { node_id, grpc } => {
            let r = cluster
                .add_learner(pb::AddLearnerRequest {
                    node_id,
                    grpc_addr: grpc,
                })
                .await
                .map_err(explain)?
                .into_inner();
            (r.log_index, r.voters, r.learners)
        }
        ClusterCommand::Promote { node_id } => {
            let r = cluster
                .promote(pb::PromoteRequest { node_id })
                .await
                .map_err(explain)?
                .into_inner();
            (r.log_index, r.voters, r.learners)
        }
        ClusterCommand::Remove { node_id } => {
            let r = cluster
                .remove(pb::RemoveRequest { node_id })
                .await
                .map_err(explain)?
                .into_inner();
            (r.log_index, r.voters, r.learners)
        }
    };
    match remote.output {
        Output::Json | Output::Jsonl => remote
            .output
            .print_one(&json!({"log_index": log_index, "voters": voters, "learners": learners})),
        Output::Text => {
            println!("done at log index {log_index}: voters {voters:?}, learners {learners:?}")
        }
    }
    Ok(Exit::Done)
}

fn print_status(output: Output, s: &pb::ClusterStatusResponse) {
    match output {
        Output::Json | Output::Jsonl => {
            let nodes: Vec<_> = s
                .nodes
                .iter()
                .map(|n| {
                    json!({"node_id": n.node_id, "grpc_addr": n.grpc_addr, "applied_index": n.applied_index,
                           "lag": n.lag, "reachable": n.reachable,
                           "voter": s.voters.contains(&n.node_id), "tenants_homed": n.tenants_homed})
                })
                .collect();
            output.print_one(&json!({"leader": s.leader_id, "term": s.term, "voters": s.voters,
                                     "learners": s.learners, "nodes": nodes,
                                     "tenants": s.tenants.iter().map(placement_json).collect::<Vec<_>>()}));
        }
        Output::Text => {
            let leader = s.leader_id.map_or("none".to_owned(), |l| l.to_string());
            println!("leader {leader}, term {}", s.term);
            println!("voters {:?}, learners {:?}", s.voters, s.learners);
            println!(
                "{:>6}  {:<22} {:<8} {:>10} {:>8} {:>8}  reachable",
                "node", "grpc", "role", "applied", "lag", "tenants"
            );
            for n in &s.nodes {
                let role = if s.voters.contains(&n.node_id) {
                    "voter"
                } else {
                    "learner"
                };
                println!(
                    "{:>6}  {:<22} {:<8} {:>10} {:>8} {:>8}  {}",
                    n.node_id,
                    n.grpc_addr,
                    role,
                    n.applied_index,
                    n.lag,
                    n.tenants_homed,
                    if n.reachable { "yes" } else { "no" }
                );
            }
            let moving = s.tenants.iter().filter(|t| t.moving_to.is_some()).count();
            let unplaced = s.tenants.iter().filter(|t| t.home.is_none()).count();
            println!(
                "{} tenant(s), {moving} moving, {unplaced} not placed yet (`gatehouse cluster placement` lists them)",
                s.tenants.len()
            );
        }
    }
}

/// Each tenant's home, epoch, open calls and any move under way.
fn print_placement(output: Output, s: &pb::ClusterStatusResponse) {
    match output {
        Output::Text => {
            println!(
                "{:<24} {:>6} {:>7} {:>6}  moving",
                "tenant", "home", "epoch", "open"
            );
            for t in &s.tenants {
                let home = t.home.map_or("-".to_owned(), |h| h.to_string());
                let moving = t
                    .moving_to
                    .map_or("-".to_owned(), |to| format!("to node {to}"));
                println!(
                    "{:<24} {home:>6} {:>7} {:>6}  {moving}",
                    t.tenant, t.epoch, t.open_calls
                );
            }
        }
        json => json.print_list(s.tenants.iter().map(placement_json).collect()),
    }
}

fn placement_json(t: &pb::TenantPlacement) -> serde_json::Value {
    json!({"tenant": t.tenant, "home": t.home, "epoch": t.epoch, "moving_to": t.moving_to,
           "open_calls": t.open_calls})
}

/// Where a node stands against the leader's log: (entries it has, entries the leader has).
fn position(status: &pb::ClusterStatusResponse, node: u64) -> Option<(u64, u64)> {
    status
        .nodes
        .iter()
        .find(|n| n.node_id == node)
        .map(|n| (n.applied_index, n.applied_index + n.lag))
}

/// Whether a node that has `has` of the leader's `of` entries has caught up: it has them all, or
/// it has reached `earlier`, where the leader's log ended one poll before. Under a steady stream
/// of writes a healthy learner always trails by the entries in flight, and would never be seen
/// with all of them.
fn caught_up(has: u64, of: u64, earlier: Option<u64>) -> bool {
    has >= of || earlier.is_some_and(|earlier| has >= earlier)
}

/// Polls the leader's view until `node` has caught up ([`caught_up`]), printing `node N: X/Y entries` on
/// stderr as it moves (and about once a second while it does not).
async fn wait_caught_up(
    cluster: &mut pb::cluster_service_client::ClusterServiceClient<client::Authed>,
    node: u64,
    timeout: Duration,
) -> anyhow::Result<Exit> {
    let deadline = Instant::now() + timeout;
    let mut last: Option<(Option<(u64, u64)>, Instant)> = None;
    let mut earlier = None;
    loop {
        let status = cluster
            .status(pb::ClusterStatusRequest {})
            .await
            .map_err(explain)?
            .into_inner();
        let now = position(&status, node);
        if let Some((has, of)) = now
            && caught_up(has, of, earlier)
        {
            println!("node {node} caught up: {has}/{of} entries");
            return Ok(Exit::Done);
        }
        earlier = now.map(|(_, of)| of);
        let report = last.is_none_or(|(seen, at)| seen != now || at.elapsed() >= REPORT_EVERY);
        if report {
            match now {
                Some((has, of)) => eprintln!("node {node}: {has}/{of} entries"),
                None => eprintln!("node {node}: not a member yet"),
            }
            last = Some((now, Instant::now()));
        }
        if Instant::now() >= deadline {
            let at = now.map_or("not a member".to_owned(), |(has, of)| {
                format!("at {has}/{of} entries")
            });
            anyhow::bail!(
                "node {node} did not catch up within {timeout:?}: {at} (see `gatehouse cluster status` and the node's log)"
            );
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_position_is_what_it_has_of_the_leaders_log() {
        let status = pb::ClusterStatusResponse {
            nodes: vec![pb::NodeStatus {
                node_id: 8,
                applied_index: 1200,
                lag: 3800,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(position(&status, 8), Some((1200, 5000)));
        assert_eq!(position(&status, 9), None);
    }

    #[test]
    fn a_learner_trailing_a_moving_log_by_what_is_in_flight_has_caught_up() {
        // All of it, at once.
        assert!(caught_up(5000, 5000, None));
        // Behind, at the first look: not yet.
        assert!(!caught_up(4990, 5000, None));
        // Where the leader was a poll ago, while the leader moved on: caught up.
        assert!(caught_up(5000, 5012, Some(5000)));
        // Still short of where the leader was a poll ago: not yet.
        assert!(!caught_up(4200, 5012, Some(5000)));
    }
}
