//! What the operator hears of a peer's Raft RPCs failing. openraft reports every failed RPC,
//! several lines each at WARN and ERROR (the node's log filter drops those, see
//! `gatehouse_gateway::telemetry`); this says it once per outage instead: a blip shorter than
//! [`WARN_AFTER`] stays at DEBUG, a longer silence is one WARN, the recovery one INFO. A node
//! that has not finished joining (it refuses Raft until its join returns the peer secret) is
//! normal and said once at INFO.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a peer may fail every Raft RPC before it is worth a WARN.
pub const WARN_AFTER: Duration = Duration::from_secs(2);

/// How long a node may stay joining (up, but refusing Raft) before that is worth a WARN.
pub const JOINING_WARN_AFTER: Duration = Duration::from_secs(30);

/// The words a node's Raft service answers with until its join has completed.
pub const NOT_JOINED: &str = "this node has not joined a cluster yet";

/// One peer's run of failed RPCs.
#[derive(Debug, Clone, Copy)]
struct Streak {
    since: Instant,
    failures: u64,
    warned: bool,
    joining: bool,
}

/// What one call to [`Reachability`] decided to say; returned so tests can read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Nothing,
    Joining,
    Unreachable,
    Recovered { failures: u64 },
}

/// Failure streaks per peer, shared by every Raft client of the node.
#[derive(Debug, Clone, Default)]
pub struct Reachability {
    streaks: Arc<Mutex<HashMap<u64, Streak>>>,
}

impl Reachability {
    /// `peer` answered: ends its streak, saying so if the streak was worth a WARN.
    pub fn answered(&self, peer: u64) -> Said {
        let ended = self
            .streaks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&peer);
        match ended {
            Some(s) if s.warned => {
                tracing::info!(
                    peer,
                    failures = s.failures,
                    after = ?s.since.elapsed(),
                    "peer {peer} answers Raft again"
                );
                Said::Recovered {
                    failures: s.failures,
                }
            }
            Some(s) if s.joining => {
                tracing::debug!(peer, "peer {peer} has joined and answers Raft");
                Said::Nothing
            }
            _ => Said::Nothing,
        }
    }

    /// A Raft RPC to `peer` failed with `error`.
    pub fn failed(&self, peer: u64, error: &str) -> Said {
        self.failed_at(peer, error, Instant::now())
    }

    fn failed_at(&self, peer: u64, error: &str, now: Instant) -> Said {
        let mut streaks = self.streaks.lock().unwrap_or_else(PoisonError::into_inner);
        let streak = streaks.entry(peer).or_insert(Streak {
            since: now,
            failures: 0,
            warned: false,
            joining: false,
        });
        streak.failures += 1;
        tracing::debug!(peer, failures = streak.failures, error, "a Raft RPC failed");
        let joining = error.contains(NOT_JOINED);
        if joining && !streak.joining {
            streak.joining = true;
            tracing::info!(
                peer,
                "node {peer} is still joining: it takes Raft messages once its join completes"
            );
            return Said::Joining;
        }
        let patience = if joining {
            JOINING_WARN_AFTER
        } else {
            WARN_AFTER
        };
        if streak.warned || now.duration_since(streak.since) < patience {
            return Said::Nothing;
        }
        streak.warned = true;
        tracing::warn!(
            peer,
            failures = streak.failures,
            error,
            "peer {peer} has not answered Raft for {:?}",
            now.duration_since(streak.since)
        );
        Said::Unreachable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blip_shorter_than_the_warning_time_says_nothing() {
        let r = Reachability::default();
        let t0 = Instant::now();
        assert_eq!(r.failed_at(2, "timeout after 200ms", t0), Said::Nothing);
        assert_eq!(
            r.failed_at(2, "deadline has elapsed", t0 + WARN_AFTER / 2),
            Said::Nothing
        );
        assert_eq!(r.answered(2), Said::Nothing);
    }

    #[test]
    fn a_long_silence_warns_once_and_its_end_is_said() {
        let r = Reachability::default();
        let t0 = Instant::now();
        assert_eq!(r.failed_at(3, "connection refused", t0), Said::Nothing);
        assert_eq!(
            r.failed_at(3, "connection refused", t0 + WARN_AFTER),
            Said::Unreachable
        );
        assert_eq!(
            r.failed_at(3, "connection refused", t0 + WARN_AFTER * 3),
            Said::Nothing
        );
        assert_eq!(r.answered(3), Said::Recovered { failures: 3 });
        // A new streak starts from nothing.
        assert_eq!(
            r.failed_at(3, "connection refused", t0 + WARN_AFTER * 4),
            Said::Nothing
        );
    }

    #[test]
    fn a_joining_node_is_said_once_and_warned_about_only_when_its_join_drags() {
        let r = Reachability::default();
        let t0 = Instant::now();
        let refusal = format!("status: Unavailable, message: \"{NOT_JOINED}\"");
        assert_eq!(r.failed_at(4, &refusal, t0), Said::Joining);
        assert_eq!(r.failed_at(4, &refusal, t0 + WARN_AFTER * 5), Said::Nothing);
        assert_eq!(r.answered(4), Said::Nothing);
        assert_eq!(r.failed_at(5, &refusal, t0), Said::Joining);
        assert_eq!(
            r.failed_at(5, &refusal, t0 + JOINING_WARN_AFTER),
            Said::Unreachable
        );
    }

    #[test]
    fn streaks_are_per_peer() {
        let r = Reachability::default();
        let t0 = Instant::now();
        r.failed_at(2, "refused", t0);
        assert_eq!(
            r.failed_at(3, "refused", t0 + WARN_AFTER),
            Said::Nothing,
            "node 3's streak began just now"
        );
        assert_eq!(
            r.failed_at(2, "refused", t0 + WARN_AFTER),
            Said::Unreachable
        );
    }
}
