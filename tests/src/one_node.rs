//! One node on the caller's runtime, for async tests that hold its handle themselves (stop it,
//! read its registry): bootstrapped, configured as a `TestCluster`'s nodes are, its data under
//! `node-1` of a temporary directory, gRPC and HTTP on loopback ports of its own.

use crate::{NodeOptions, capture_logs};
use gatehouse_cluster::net::OpenNetwork;
use gatehouse_node::config::Start;
use gatehouse_node::server::{self, NodeHandle};
use std::sync::Arc;

/// Starts node 1 with `options`; its handle, and the directory that holds its data.
pub async fn one_node(options: NodeOptions) -> anyhow::Result<(NodeHandle, tempfile::TempDir)> {
    capture_logs();
    let dir = tempfile::tempdir()?;
    let config = options.serve_config(
        1,
        dir.path().join("node-1"),
        Start::Bootstrap,
        Arc::new(OpenNetwork),
    );
    Ok((server::start(config).await?, dir))
}
