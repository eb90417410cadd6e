//! What each node holds once everything is healed, read from the node's own copy over its API
//! (registers, every call of the tenant, paged), and its audit log read from its data directory
//! once it has stopped.

use crate::client::Recorder;
use crate::cluster::Cluster;
use crate::history::{CallView, NodeView};
use crate::setup::{self, CAROL, TENANT};
use gatehouse_proto::v1 as pb;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Waits until every node has applied the same index and no call is approved or executing, within
/// `within`; `Err` says what was still moving.
pub async fn settle(cluster: &Cluster, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let mut applied = BTreeMap::new();
        for id in cluster.channels.ids() {
            let own = cluster.status(id).await.and_then(|s| {
                s.nodes
                    .iter()
                    .find(|n| n.node_id == id)
                    .map(|n| n.applied_index)
            });
            applied.insert(id, own);
        }
        // Approved calls are about to be claimed, executing ones to complete.
        let mut executing = 0;
        if let Some(leader) = cluster.leader().await {
            for state in [pb::CallState::Approved, pb::CallState::Executing] {
                executing += list(cluster, leader, state)
                    .await
                    .map_or(1, |calls| calls.len());
            }
        }
        let indexes: Vec<_> = applied.values().collect();
        let same = indexes.iter().all(|i| i.is_some() && *i == indexes[0]);
        if same && executing == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "not settled within {within:?}: applied {applied:?}, {executing} executing"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every call of the tenant in `state` on node `id`, paged.
async fn list(
    cluster: &Cluster,
    id: u64,
    state: pb::CallState,
) -> anyhow::Result<Vec<pb::CallRecord>> {
    let mut client = cluster.channels.approvals(id, CAROL);
    let mut calls = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_pending(pb::ListCallsRequest {
                tenant: TENANT.into(),
                state: state as i32,
                page_size: 100,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        calls.extend(page.calls);
        if page.next_page_token.is_empty() {
            return Ok(calls);
        }
        page_token = page.next_page_token;
    }
}

/// The states a call can be in, as the checkers name them.
const STATES: [pb::CallState; 9] = [
    pb::CallState::Pending,
    pb::CallState::Approved,
    pb::CallState::Rejected,
    pb::CallState::Cancelled,
    pb::CallState::Expired,
    pb::CallState::Executing,
    pb::CallState::Succeeded,
    pb::CallState::Failed,
    pb::CallState::OutcomeUnknown,
];

fn name_of(state: pb::CallState) -> String {
    state
        .as_str_name()
        .trim_start_matches("CALL_STATE_")
        .to_ascii_lowercase()
}

/// Every node's view, all read at one applied index: a node that applied something while the
/// views were read (a late write finishing) has every view read again.
pub async fn views(
    cluster: &Cluster,
    recorder: &Recorder,
) -> anyhow::Result<std::collections::BTreeMap<u64, NodeView>> {
    for _ in 0..20 {
        settle(cluster, Duration::from_secs(60)).await?;
        let mut views = BTreeMap::new();
        for id in cluster.channels.ids() {
            views.insert(id, view(cluster, id, recorder).await?);
        }
        let mut indexes = views.values().map(|v| v.applied_index);
        let first = indexes.next();
        if first.is_some_and(|first| indexes.all(|i| i == first)) {
            return Ok(views);
        }
    }
    anyhow::bail!("the nodes kept applying while their views were read")
}

/// Node `id`'s own applied index.
async fn applied(cluster: &Cluster, id: u64) -> anyhow::Result<u64> {
    let status = cluster
        .status(id)
        .await
        .ok_or_else(|| anyhow::anyhow!("node {id} does not answer"))?;
    Ok(status
        .nodes
        .iter()
        .find(|n| n.node_id == id)
        .map_or(0, |n| n.applied_index))
}

/// Node `id`'s registry view: its applied index, registers and calls, read with nothing applied
/// in between (else read again).
async fn view(cluster: &Cluster, id: u64, recorder: &Recorder) -> anyhow::Result<NodeView> {
    for _ in 0..50 {
        let before = applied(cluster, id).await?;
        let mut view = read_view(cluster, id, recorder).await?;
        if applied(cluster, id).await? == before {
            view.applied_index = before;
            return Ok(view);
        }
    }
    anyhow::bail!("node {id} kept applying while its view was read")
}

async fn read_view(cluster: &Cluster, id: u64, recorder: &Recorder) -> anyhow::Result<NodeView> {
    let mut view = NodeView::default();
    let mut registry = cluster.channels.registry(id, &cluster.admin);
    for k in 0..setup::REGISTERS {
        let key = setup::register(k);
        let request = pb::GetResourceRequest {
            key: Some(setup::key_of(&key)),
            linearizable: false,
        };
        match registry.get(request).await {
            Ok(found) => {
                if let Some(value) = found
                    .into_inner()
                    .resource
                    .as_ref()
                    .and_then(setup::register_value)
                {
                    view.registers.insert(key, value);
                }
            }
            Err(status) if status.code() == tonic::Code::NotFound => {}
            Err(status) => anyhow::bail!("reading {key} on node {id}: {status}"),
        }
    }
    for state in STATES {
        for call in list(cluster, id, state).await? {
            let claimed_at = call
                .approvals
                .iter()
                .map(|a| recorder.at_unix_ms(a.at_unix_ms.max(0) as u64))
                .max();
            let claim = call.claim.as_ref();
            view.calls.insert(
                call.call_id.clone(),
                CallView {
                    state: name_of(state),
                    idempotency_key: call.idempotency_key.clone(),
                    claimed_by: claim.map(|c| c.node_id),
                    claimed_at: claim.and(claimed_at),
                },
            );
        }
    }
    Ok(view)
}

/// Node `id`'s audit log, from its data directory: whether its chain verifies, and the calls
/// it holds an execution record for. Read once the node has stopped.
pub fn audit(data_dir: &std::path::Path, view: &mut NodeView) {
    let dir = data_dir.join("audit");
    view.audit_verified = gatehouse_audit::verify(&dir)
        .map(drop)
        .map_err(|e| e.to_string());
    match gatehouse_audit::tail(&dir, usize::MAX) {
        Ok(records) => {
            view.audited_executions = records
                .into_iter()
                .filter(|r| r.entry.decision.as_deref() == Some("execute"))
                .filter_map(|r| r.entry.call_id)
                .collect();
        }
        Err(e) => view.audit_verified = Err(format!("reading the audit log: {e}")),
    }
}
