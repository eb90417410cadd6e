//! `SnapshotService`: a consistent copy of the replicated state for a backup. The registry is
//! copied between two applies after a linearizable read, so the copy is exactly the state at
//! one applied index, and it is streamed in chunks well under the gRPC message limit.

use super::status::answer;
use futures::Stream;
use gatehouse_cluster::backup::{FORMAT, Header};
use gatehouse_cluster::cluster::{Cluster, now_ms};
use gatehouse_gateway::auth::{Authenticator, authenticate_current};
use gatehouse_gateway::pipeline::GatewayError;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::snapshot_service_server::SnapshotService;
use gatehouse_registry::resource::Role;
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The body travels in chunks of this many bytes.
pub const CHUNK_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Snapshots {
    cluster: Cluster,
    auth: Authenticator,
}

impl Snapshots {
    pub fn new(cluster: Cluster, auth: Authenticator) -> Self {
        Snapshots { cluster, auth }
    }

    /// The registry's bytes and applied index, read after every write committed so far.
    async fn read_state(&self) -> Result<(Vec<u8>, u64), GatewayError> {
        self.cluster.linearizable().await?;
        let copy = self.cluster.registry.read().clone();
        // Serialised off the lock and off the async workers: a big registry takes a while.
        tokio::task::spawn_blocking(move || (copy.to_bytes(), copy.applied_index()))
            .await
            .map_err(|e| GatewayError::internal(format!("serialising the registry: {e}")))
    }
}

/// The messages of one backup: the info, then the body's chunks.
pub fn chunks(info: pb::SnapshotInfo, body: Vec<u8>) -> impl Stream<Item = pb::SnapshotChunk> {
    let body = Arc::new(body);
    let count = body.len().div_ceil(CHUNK_BYTES);
    let first = pb::SnapshotChunk {
        info: Some(info),
        data: Vec::new(),
    };
    let rest = (0..count).map(move |i| {
        let end = ((i + 1) * CHUNK_BYTES).min(body.len());
        pb::SnapshotChunk {
            info: None,
            data: body[i * CHUNK_BYTES..end].to_vec(),
        }
    });
    futures::stream::iter(std::iter::once(first).chain(rest))
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<pb::SnapshotChunk, Status>> + Send>>;

/// The wire side of the service: its error goes through the one map to a status.
#[tonic::async_trait]
impl SnapshotService for Snapshots {
    type SaveStream = ChunkStream;

    async fn save(
        &self,
        request: Request<pb::SaveSnapshotRequest>,
    ) -> Result<Response<Self::SaveStream>, Status> {
        answer(self.save_backup(request).await)
    }
}

impl Snapshots {
    async fn save_backup(
        &self,
        request: Request<pb::SaveSnapshotRequest>,
    ) -> Result<ChunkStream, GatewayError> {
        let metadata = request.metadata();
        authenticate_current(&self.cluster, |registry| {
            self.auth.authenticate_grpc(registry, metadata)
        })
        .await?
        .require_cluster(&[Role::Admin])?;
        let (body, index) = self.read_state().await?;
        let term = self.cluster.raft.metrics().borrow().current_term;
        let header = Header::for_body(&body, index, term, self.cluster.id, now_ms());
        let info = pb::SnapshotInfo {
            format: FORMAT,
            index,
            term,
            node_id: self.cluster.id,
            total_bytes: header.body_bytes,
            body_sha256: header.body_sha256,
            created_at_ms: header.created_at_ms,
        };
        tracing::info!(index, bytes = body.len(), "backup served");
        use futures::StreamExt;
        Ok(Box::pin(chunks(info, body).map(Ok)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_body_travels_in_bounded_chunks_after_its_info() {
        let body: Vec<u8> = (0..CHUNK_BYTES * 2 + 10).map(|i| i as u8).collect();
        let messages: Vec<_> = chunks(pb::SnapshotInfo::default(), body.clone())
            .collect()
            .await;
        assert_eq!(messages.len(), 4);
        assert!(messages[0].info.is_some() && messages[0].data.is_empty());
        assert!(messages[1..].iter().all(|m| m.info.is_none()));
        assert!(messages.iter().all(|m| m.data.len() <= CHUNK_BYTES));
        let joined: Vec<u8> = messages.into_iter().flat_map(|m| m.data).collect();
        assert_eq!(joined, body);
    }
}
