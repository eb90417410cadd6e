//! Node-to-node transport: Raft RPCs and forwarded writes over tonic (plain or TLS), with a hook
//! that lets a test harness cut, drop or delay the traffic between chosen nodes.

mod clients;
mod commit_hold;
mod forward;
mod raft_network;
mod reachability;
mod transport;

pub use clients::{MAX_RAFT_MESSAGE, Peers};
pub use commit_hold::CommitHold;
pub use forward::{ForwardReply, Forwarded};
pub use raft_network::NetworkFactory;
pub use reachability::{NOT_JOINED, Reachability};
pub use transport::PeerTransport;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What happens to one message from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// Lost, as on a partitioned link: the sender sees the peer as unreachable.
    Drop,
    /// Delivered after this long.
    Delay(Duration),
}

/// Decides the fate of each message between nodes. Production passes everything; the test
/// harness partitions, drops and delays.
pub trait PeerFilter: Send + Sync + 'static {
    fn verdict(&self, from: u64, to: u64) -> Verdict;
}

/// Passes every message.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenNetwork;

impl PeerFilter for OpenNetwork {
    fn verdict(&self, _from: u64, _to: u64) -> Verdict {
        Verdict::Pass
    }
}

pub type SharedFilter = Arc<dyn PeerFilter>;

/// Applies a verdict: `Err` for a dropped message, after sleeping out a delay otherwise.
pub(crate) async fn deliver(filter: &dyn PeerFilter, from: u64, to: u64) -> Result<(), Dropped> {
    match filter.verdict(from, to) {
        Verdict::Pass => Ok(()),
        Verdict::Drop => Err(Dropped { from, to }),
        Verdict::Delay(d) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
    }
}

#[derive(Debug)]
pub struct Dropped {
    pub from: u64,
    pub to: u64,
}

impl fmt::Display for Dropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "message from node {} to node {} was dropped",
            self.from, self.to
        )
    }
}

impl std::error::Error for Dropped {}
