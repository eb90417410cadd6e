//! The first start of a node restored from a backup. A restore runs offline, before the node
//! has bound its gRPC port, so the membership it writes names the node at a placeholder address
//! and the registry admits no node. Once the node leads its one-voter cluster, it records its
//! real address in the membership and admits itself, then forgets the restore.

use crate::cluster::{Cluster, WriteError};
use crate::node_files::NodeFiles;
use anyhow::Context;
use gatehouse_registry::{ApplyError, Command};
use openraft::{BasicNode, ChangeMembers};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a restored node waits to lead its one-voter cluster.
const LEAD_WITHIN: Duration = Duration::from_secs(30);

/// Refuses to start a restored data directory as another node than the one it was restored for
/// (that node would hold a membership it is not in, and never lead). Call before anything is
/// written to the directory.
pub fn check_restored_for(files: &NodeFiles, node_id: u64) -> anyhow::Result<()> {
    match files.restore_marker()? {
        Some(restore) if restore.node_id != node_id => anyhow::bail!(
            "this data directory was restored for node {}, not node {node_id}: start it with --node-id {}",
            restore.node_id,
            restore.node_id
        ),
        _ => Ok(()),
    }
}

/// Finishes a restore on the node's first start after it; does nothing on any other start.
pub async fn finish_restore(
    cluster: &Cluster,
    files: &NodeFiles,
    grpc: &str,
) -> anyhow::Result<()> {
    let Some(restore) = files.restore_marker()? else {
        return Ok(());
    };
    let raft = &cluster.raft;
    raft.wait(Some(LEAD_WITHIN))
        .current_leader(cluster.id, "restored: become leader")
        .await
        .context("the restored node did not become the leader of its one-voter cluster")?;
    let addr = grpc.to_owned();
    let recorded = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .get_node(&cluster.id)
        .map(|node| node.addr.clone());
    if recorded.as_deref() != Some(addr.as_str()) {
        let nodes = BTreeMap::from([(cluster.id, BasicNode { addr: addr.clone() })]);
        raft.change_membership(ChangeMembers::SetNodes(nodes), false)
            .await
            .context("recording the restored node's address in the membership")?;
    }
    match cluster
        .propose(Command::AdmitNode {
            node: cluster.id,
            addr,
        })
        .await
    {
        // A crash after the admission and before the marker went leaves it admitted already.
        Ok(_) | Err(WriteError::Rejected(ApplyError::AlreadyExists { .. })) => {}
        Err(e) => return Err(e).context("admitting the restored node"),
    }
    files.remove_restore_marker()?;
    tracing::info!(
        index = restore.index,
        source_node = restore.source_node,
        "restored cluster adopted this node's address"
    );
    Ok(())
}
