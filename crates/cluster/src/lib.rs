//! What makes several `gatehouse` processes one cluster: the handle every write goes through
//! (`cluster`) and when its batcher waits for more (`gather`), the Raft network and forwarding
//! between nodes (`net`), TLS (`tls`), the feed of applied changes (`feed`), leadership handover
//! on shutdown (`handover`), readiness, backups, the node's own files, its election timer
//! (`elections`), and the operator's grants that every proposal is checked against (`grants`).
//!
//! It knows nothing of calls, tools or protocols: the gateway and the fronts build on it.

pub mod actor_port;
pub mod backup;
pub mod cluster;
pub mod elections;
pub mod feed;
pub mod gather;
pub mod grants;
pub mod handover;
pub mod net;
pub mod node_files;
pub mod readiness;
pub mod tls;

/// The prefix of the environment variables that configure `gatehouse serve`: `GATEHOUSE_` and the
/// setting's name in upper case with `_` for `-` (`GATEHOUSE_HEARTBEAT_MS`,
/// `GATEHOUSE_MCP_ALLOWED_ORIGINS=https://a.example,https://b.example`).
pub const ENV_PREFIX: &str = "GATEHOUSE_";
