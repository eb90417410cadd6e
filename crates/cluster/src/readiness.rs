//! `/readyz`: whether this node should take traffic. Ready means its supervision tree has given
//! up on nothing, it knows a leader, and it has applied the log to within `ready-max-lag`
//! entries of the leader's commit index, so what it reads is not far behind what was written.

use crate::cluster::Cluster;
use gatehouse_actors::Health;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// How long a follower waits for the leader's commit index before calling itself not ready.
const ASK_LEADER_WITHIN: Duration = Duration::from_secs(1);

/// What `/readyz` reads from.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub cluster: Cluster,
    pub health: watch::Receiver<Health>,
    /// The most entries applied may trail the leader's commit index.
    pub max_lag: u64,
    /// Set when the node begins to stop: from then on it is not ready.
    pub stopping: Arc<AtomicBool>,
}

/// The lag rule: ready while `applied` trails `leader_commit` by at most `max_lag` entries.
/// `Err` carries the lag.
pub fn within_lag(applied: u64, leader_commit: u64, max_lag: u64) -> Result<(), u64> {
    let lag = leader_commit.saturating_sub(applied);
    if lag <= max_lag { Ok(()) } else { Err(lag) }
}

impl Readiness {
    /// `Ok` with a line saying why the node is ready, `Err` with a line saying why not.
    pub async fn check(&self) -> Result<String, String> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("not ready: the node is stopping".to_owned());
        }
        if let Health::NotReady { reason } = &*self.health.borrow() {
            return Err(format!("not ready: {reason}"));
        }
        let Some(leader) = self.cluster.raft.current_leader().await else {
            return Err("not ready: no leader".to_owned());
        };
        let leader_commit = self
            .cluster
            .leader_commit(ASK_LEADER_WITHIN)
            .await
            .map_err(|e| format!("not ready: the leader's commit index is unknown: {e}"))?;
        let applied = *self.cluster.applied.borrow();
        match within_lag(applied, leader_commit, self.max_lag) {
            Ok(()) => Ok(format!(
                "ready, leader {leader}, applied {applied} of {leader_commit}"
            )),
            Err(lag) => Err(format!(
                "not ready: applied {applied}, {lag} entries behind the leader's commit index \
                 {leader_commit} (ready-max-lag {})",
                self.max_lag
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_ready_within_the_distance_and_not_beyond_it() {
        assert_eq!(within_lag(100, 100, 0), Ok(()));
        assert_eq!(within_lag(90, 100, 10), Ok(()));
        assert_eq!(within_lag(89, 100, 10), Err(11));
        assert_eq!(within_lag(0, 5_000, 1_000), Err(5_000));
        // Applied ahead of a commit index read a moment earlier is no lag.
        assert_eq!(within_lag(105, 100, 0), Ok(()));
    }
}
