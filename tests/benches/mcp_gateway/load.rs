//! The load generator: `sessions` clients, each with its own keep-alive connection, sending
//! stateless 2026-07-28 `tools/call`s one after another until `calls` have been sent in all.

use anyhow::{Context, bail};
use gatehouse_tests::mcp_wire::RawMcp;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What to call, and where.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    pub key: Option<String>,
    pub tool: String,
    pub arguments: Value,
}

/// One run's measurements.
pub struct Run {
    pub latencies: Vec<Duration>,
    pub elapsed: Duration,
}

impl Run {
    pub fn calls_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Opens `sessions` clients and makes one call on each, so every connection is open before a
/// run's clock starts.
pub async fn connect(target: &Target, sessions: usize) -> anyhow::Result<Vec<Arc<RawMcp>>> {
    let clients: Vec<Arc<RawMcp>> = (0..sessions)
        .map(|_| Arc::new(RawMcp::new(&target.url, target.key.as_deref())))
        .collect();
    for client in &clients {
        call(client, target).await?;
    }
    Ok(clients)
}

/// Sends `calls` calls over the clients at once, each client one call after another; fails on
/// the first call that did not answer a successful result.
pub async fn run(clients: &[Arc<RawMcp>], target: &Target, calls: usize) -> anyhow::Result<Run> {
    let left = Arc::new(AtomicUsize::new(calls));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(clients.len());
    for client in clients {
        let (client, left, target) = (client.clone(), left.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                let at = Instant::now();
                call(&client, &target).await?;
                latencies.push(at.elapsed());
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(calls);
    for task in tasks {
        latencies.extend(task.await??);
    }
    Ok(Run {
        latencies,
        elapsed: started.elapsed(),
    })
}

/// Longest one call may take before the bench gives up on it.
const CALL_DEADLINE: Duration = Duration::from_secs(10);

async fn call(client: &RawMcp, target: &Target) -> anyhow::Result<()> {
    let answer = tokio::time::timeout(
        CALL_DEADLINE,
        client.call_tool(&target.tool, target.arguments.clone()),
    )
    .await
    .with_context(|| format!("a call to {} took over {CALL_DEADLINE:?}", target.url))??;
    let result = answer.result()?;
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        bail!("{} answered an error result: {}", target.url, answer.text);
    }
    Ok(())
}

/// The `q` quantile (0..=1) of sorted latencies.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}
