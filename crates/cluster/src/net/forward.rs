//! What a follower sends its leader through `RaftService.Forward`, and what comes back.

use gatehouse_raft_store::ApplyResult;
use gatehouse_registry::Proposal;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Forwarded {
    /// A validated, authorised write, with its request id: a retry is applied once.
    Write(Proposal),
    /// The index a linearizable read must wait for.
    ReadIndex,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ForwardReply {
    /// The answer, and the log index it was committed at.
    Applied(ApplyResult, u64),
    ReadIndex(u64),
    /// The receiver is not the leader; it names the one it knows of.
    NotLeader {
        leader: Option<(u64, String)>,
    },
    Failed(String),
}
