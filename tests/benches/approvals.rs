//! The approval-flow benchmark on a durable three-node loopback cluster:
//! - propose -> the watch event on another node (an approver's stream sees the new call),
//! - approve -> the result visible on the proposer's node (claim, execute, complete, applied),
//! - calls per second through the whole flow with an automatic approver.
//!
//! It prints figures and asserts nothing about them. Everything listens on 127.0.0.1; every loop
//! is bounded in count and in time. `--help` lists the settings.

#[path = "approvals/watch.rs"]
mod watch;

use gatehouse_proto::v1 as pb;
use gatehouse_tests::flow::{self, ACME, Approvals, BOT, CAROL, DROP_TABLE};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use watch::Watcher;

const HELP: &str = "usage: approvals [--samples N] [--clients N] [--seconds S]
  --samples N   calls timed one at a time for the two latencies (default 200)
  --clients N   agents calling at once in the throughput run (default 16)
  --seconds S   length of the throughput run (default 5)";

/// Longest any one call may take before the bench reports it as lost.
const CALL_DEADLINE: Duration = Duration::from_secs(20);

struct Settings {
    samples: usize,
    clients: usize,
    seconds: f64,
}

fn parse() -> anyhow::Result<Option<Settings>> {
    let mut s = Settings {
        samples: 200,
        clients: 16,
        seconds: 5.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--samples" => s.samples = value()?.parse()?,
            "--clients" => s.clients = value()?.parse()?,
            "--seconds" => s.seconds = value()?.parse()?,
            "--help" | "-h" => return Ok(None),
            // cargo bench passes --bench to every harness.
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other}\n{HELP}"),
        }
    }
    if s.samples == 0 || s.clients == 0 || s.seconds <= 0.0 {
        anyhow::bail!("--samples, --clients and --seconds must be above 0");
    }
    Ok(Some(s))
}

/// The nodes run in this process: they get the allocator the `gatehouse` binary ships with.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let Some(settings) = parse()? else {
        println!("{HELP}");
        return Ok(());
    };
    // Errors only unless RUST_LOG says otherwise, and not openraft's line per failed RPC
    // (a learner joining, nodes stopping at the end), as a node logs.
    gatehouse_gateway::telemetry::install_stderr_logs("error");
    let (cluster, _flow) = flow::start(Approvals::default())?;
    let roles = flow::roles(&cluster)?;
    // The agent reaches a node that neither leads nor is home; approvers watch from the home.
    let (proposer, watcher) = (roles.follower, roles.home);
    println!(
        "approvals bench: 3 durable nodes on loopback; leader {}, acme's home {}, agents call node {}",
        roles.leader, roles.home, proposer
    );

    let agent = flow::gateway(&cluster, proposer, BOT);
    let approver = flow::approvals(&cluster, watcher, CAROL);
    let there = cluster.block_on(Watcher::start(flow::approvals(&cluster, watcher, CAROL)))?;
    let here = cluster.block_on(Watcher::start(flow::approvals(&cluster, proposer, CAROL)))?;

    let (to_event, to_result) = cluster.block_on(async {
        let mut to_event = Vec::with_capacity(settings.samples);
        let mut to_result = Vec::with_capacity(settings.samples);
        for i in 0..settings.samples {
            let mut agent = agent.clone();
            let started = Instant::now();
            let id = propose(&mut agent, i as u64).await?;
            there.wait_added(&id, CALL_DEADLINE).await?;
            to_event.push(started.elapsed());

            let record = there
                .record(&id)
                .ok_or_else(|| anyhow::anyhow!("no record"))?;
            let started = Instant::now();
            approve(&mut approver.clone(), &record).await?;
            here.wait_finished(&id, CALL_DEADLINE).await?;
            to_result.push(started.elapsed());
        }
        anyhow::Ok((to_event, to_result))
    })?;
    report("propose -> watch event on another node", to_event);
    report("approve -> result on the proposer's node", to_result);

    let run = Duration::from_secs_f64(settings.seconds);
    let (done, latencies, elapsed) = cluster.block_on(async {
        let approving = tokio::spawn(there.clone().approve_all(approver.clone()));
        let next = Arc::new(AtomicU64::new(1_000_000));
        let started = Instant::now();
        let mut agents = Vec::new();
        for _ in 0..settings.clients {
            let (mut agent, here, next) = (agent.clone(), here.clone(), next.clone());
            agents.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                while started.elapsed() < run {
                    let at = Instant::now();
                    let id = propose(&mut agent, next.fetch_add(1, Ordering::Relaxed)).await?;
                    here.wait_finished(&id, CALL_DEADLINE).await?;
                    latencies.push(at.elapsed());
                }
                anyhow::Ok(latencies)
            }));
        }
        let mut latencies = Vec::new();
        for agent in agents {
            latencies.extend(agent.await??);
        }
        let elapsed = started.elapsed();
        approving.abort();
        anyhow::Ok((latencies.len(), latencies, elapsed))
    })?;
    println!(
        "whole flow, {} agents, automatic approver: {:.0} calls/s ({} calls in {:.2} s)",
        settings.clients,
        done as f64 / elapsed.as_secs_f64(),
        done,
        elapsed.as_secs_f64()
    );
    report("  one call, propose to result", latencies);
    Ok(())
}

async fn propose(
    agent: &mut pb::gateway_service_client::GatewayServiceClient<flow::Authed>,
    n: u64,
) -> anyhow::Result<String> {
    let request = pb::CallToolRequest {
        tenant: ACME.into(),
        tool: DROP_TABLE.into(),
        arguments_json: flow::table(&format!("t{n}")).to_string(),
        idempotency_key: None,
    };
    let envelope = agent
        .call_tool(request)
        .await?
        .into_inner()
        .envelope
        .ok_or_else(|| anyhow::anyhow!("no envelope"))?;
    Ok(envelope.call_id)
}

async fn approve(
    approver: &mut pb::approval_service_client::ApprovalServiceClient<flow::Authed>,
    record: &pb::CallRecord,
) -> anyhow::Result<()> {
    approver
        .approve(pb::ApproveCallRequest {
            call_id: record.call_id.clone(),
            args_sha256: record.args_sha256.clone(),
            reason: "bench".into(),
        })
        .await?;
    Ok(())
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| {
        let rank = (p / 100.0 * samples.len() as f64).ceil() as usize;
        samples
            .get(rank.clamp(1, samples.len().max(1)) - 1)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "{what}: p50 {:.2} ms  p99 {:.2} ms  (n = {})",
        at(50.0).as_secs_f64() * 1e3,
        at(99.0).as_secs_f64() * 1e3,
        samples.len()
    );
}
