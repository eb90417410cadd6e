//! `gatehouse cluster status|add-learner|promote|remove`.

use super::client::{self, explain};
use crate::cli::{ClusterCommand, Output, Remote};
use gatehouse_proto::v1 as pb;
use serde_json::json;
use std::process::ExitCode;

pub async fn run(remote: &Remote, command: ClusterCommand) -> anyhow::Result<ExitCode> {
    let mut cluster = client::cluster(remote).await?;
    let (log_index, voters, learners) = match command {
        ClusterCommand::Status => {
            let status = cluster
                .status(pb::ClusterStatusRequest {})
                .await
                .map_err(explain)?
                .into_inner();
            print_status(remote.output, &status);
            return Ok(ExitCode::SUCCESS);
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
        Output::Json => println!(
            "{}",
            json!({"log_index": log_index, "voters": voters, "learners": learners})
        ),
        Output::Text => {
            println!("done at log index {log_index}: voters {voters:?}, learners {learners:?}")
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(output: Output, s: &pb::ClusterStatusResponse) {
    match output {
        Output::Json => {
            let nodes: Vec<_> = s
                .nodes
                .iter()
                .map(|n| {
                    json!({"node_id": n.node_id, "grpc_addr": n.grpc_addr, "applied_index": n.applied_index,
                           "lag": n.lag, "reachable": n.reachable,
                           "voter": s.voters.contains(&n.node_id)})
                })
                .collect();
            println!(
                "{}",
                json!({"leader": s.leader_id, "term": s.term, "voters": s.voters, "learners": s.learners, "nodes": nodes})
            );
        }
        Output::Text => {
            let leader = s.leader_id.map_or("none".to_owned(), |l| l.to_string());
            println!("leader {leader}, term {}", s.term);
            println!("voters {:?}, learners {:?}", s.voters, s.learners);
            println!(
                "{:>6}  {:<22} {:<8} {:>10} {:>8}  reachable",
                "node", "grpc", "role", "applied", "lag"
            );
            for n in &s.nodes {
                let role = if s.voters.contains(&n.node_id) {
                    "voter"
                } else {
                    "learner"
                };
                println!(
                    "{:>6}  {:<22} {:<8} {:>10} {:>8}  {}",
                    n.node_id,
                    n.grpc_addr,
                    role,
                    n.applied_index,
                    n.lag,
                    if n.reachable { "yes" } else { "no" }
                );
            }
        }
    }
}
