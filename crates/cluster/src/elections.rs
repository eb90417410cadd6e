//! This node's election timer, run in place of openraft's own.
//!
//! openraft 0.9's timer has two habits that keep a dead leader in place for longer than the
//! election timeout promises:
//! - once any vote response showed a node a longer log than its own, the node's next election
//!   waits twice the timeout's upper bound more, and the node forgets that only when it next
//!   stands. A follower that lost one election by log, however long ago, so lags its peers when
//!   the next leader dies; with both followers of a three-node cluster in that state a dead
//!   leader is replaced after lease + timeout + 2 × max (2.1–2.4 s with 300–600 ms timeouts)
//!   instead of lease + timeout (0.9–1.2 s);
//! - it draws each node's timeout once for the life of the process, so two nodes that drew close
//!   timeouts split their votes round after round.
//!
//! This timer keeps openraft's rule otherwise and asks openraft to stand through its trigger:
//! a voter following a leader stands once it has heard nothing from it (no entries, no heartbeat)
//! and granted no vote for the leader lease (the timeout's upper bound, as openraft sets it) plus
//! a timeout drawn from `[min, max]`; a candidate, or a voter that granted its vote, stands again
//! after a drawn timeout alone. The draw is new for each wait. The time of the last contact is
//! openraft's own (the time its vote was last set or renewed), so nothing here second-guesses what
//! counts as hearing from the leader. A node with a shorter log that stands first is refused by
//! the others' logs; the node with the longest log then wins when its own timeout passes,
//! without the penalty.
//!
//! Before it stands, a node asks the other voters whether they would vote for it (Raft's
//! pre-vote, [`canvass`]): a voter says yes only if the asker's log is at least as long as its
//! own and, unless the asker is in a newer term, it neither leads with a quorum heard within the
//! lease nor heard from its leader within the lease ([`answer`]). Only with a quorum of yeses does
//! the node raise the term. Without it, a node with a short log (one that was cut off, or
//! paused) stood again and again at ever higher terms, and each time the others' new leader
//! reached it, its higher term unseated that leader: after a leader's isolation healed, the
//! cluster went seconds without one. A node that answers UNIMPLEMENTED (an older version, during
//! a rolling upgrade) counts as a yes, as it would have voted before pre-votes existed.

use crate::cluster::Cluster;
use crate::net::deliver;
use futures::stream::{FuturesUnordered, StreamExt};
use gatehouse_proto::v1 as pb;
use gatehouse_raft_store::{LogTail, NodeId, Raft};
use openraft::{LogId, ServerState, Vote};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The timer's settings, read from the Raft config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    pub min: Duration,
    pub max: Duration,
    /// How often the timer looks.
    pub tick: Duration,
}

impl Timings {
    pub fn of(config: &openraft::Config) -> Timings {
        Timings {
            min: Duration::from_millis(config.election_timeout_min),
            max: Duration::from_millis(config.election_timeout_max),
            tick: Duration::from_millis(config.heartbeat_interval.max(10)),
        }
    }

    /// How long after its last contact a voter stands, given the timeout it drew: the leader
    /// lease (openraft's: the timeout's upper bound) first while it follows an established
    /// leader, since the others refuse their votes until theirs has run out too.
    pub fn due(&self, following_a_leader: bool, drawn: Duration) -> Duration {
        if following_a_leader {
            self.max + drawn
        } else {
            drawn
        }
    }

    fn draw(&self, rng: &mut impl Rng) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        rng.random_range(self.min..=self.max)
    }
}

/// What the timer needs to know of the node, read each tick.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// A voter that does not lead: the only kind that stands.
    may_stand: bool,
    following_a_leader: bool,
    /// When openraft last set or renewed the vote; `None` if never since the start (or not
    /// read: a node that may not stand).
    contact: Option<Instant>,
}

async fn look(raft: &Raft, id: NodeId) -> Option<Seen> {
    let (may_stand, following_a_leader) = {
        let metrics = raft.metrics();
        let m = metrics.borrow();
        let voter = m
            .membership_config
            .membership()
            .voter_ids()
            .any(|v| v == id);
        (
            voter && m.state != ServerState::Leader,
            m.vote.is_committed(),
        )
    };
    // Only a node that may stand needs the time of its last contact from Raft.
    let contact = if may_stand {
        raft.with_raft_state(|state| state.vote_last_modified())
            .await
            .ok()?
    } else {
        None
    };
    Some(Seen {
        may_stand,
        following_a_leader,
        contact,
    })
}

/// A pre-vote question: who would stand, in which term it is now, and where its log ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVote {
    pub candidate: NodeId,
    /// The asker's current term (0 from a node that did not send it: it is then never newer).
    #[serde(default)]
    pub term: u64,
    pub last_log_id: Option<LogId<NodeId>>,
}

/// A pre-vote answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PreVoteAnswer {
    Yes,
    No(String),
}

/// What this node answers `asked`: yes unless its own log is longer than the asker's (the asker
/// could not win its vote), or, while the asker knows of no newer term than this node's:
/// - it leads and heard from a quorum within the lease, or
/// - it follows a leader it heard from within the lease.
///
/// A leader cut off from the others goes on calling itself leader (openraft has no check of
/// its quorum), and it still does when the connections to it come back. Neither that nor the
/// lease of a leader from an older term holds an election up: the asker's newer term shows that
/// a quorum has moved on, and a leader that hears no quorum leads nobody.
pub async fn answer(raft: &Raft, tail: &LogTail, asked: &PreVote) -> PreVoteAnswer {
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    let (leads, quorum_heard_ms) = {
        let metrics = raft.metrics();
        let m = metrics.borrow();
        (m.state == ServerState::Leader, m.millis_since_quorum_ack)
    };
    let Ok((vote, contact)) = raft
        .with_raft_state(|state| (*state.vote_ref(), state.vote_last_modified()))
        .await
    else {
        return PreVoteAnswer::No("Raft stopped here".to_owned());
    };
    if asked.term <= vote.leader_id().get_term()
        && let Some(why) = held_by_a_leader(leads, quorum_heard_ms, vote, contact, lease)
    {
        return PreVoteAnswer::No(why);
    }
    match tail.last_log_id() {
        Ok(mine) if asked.last_log_id >= mine => PreVoteAnswer::Yes,
        Ok(mine) => PreVoteAnswer::No(format!(
            "node {}'s log ends at {}, this node's at {}",
            asked.candidate,
            show(asked.last_log_id),
            show(mine)
        )),
        Err(e) => PreVoteAnswer::No(format!("this node cannot read its log: {e}")),
    }
}

/// Why a leader of this node's term still holds, if one does: this node leads and a quorum
/// acknowledged it within the lease, or its vote went to a leader (itself included, just
/// elected) within the lease.
fn held_by_a_leader(
    leads: bool,
    quorum_heard_ms: Option<u64>,
    vote: Vote<NodeId>,
    contact: Option<Instant>,
    lease: Duration,
) -> Option<String> {
    if leads && quorum_heard_ms.is_some_and(|ms| u128::from(ms) < lease.as_millis()) {
        return Some("this node leads".to_owned());
    }
    let contact = contact.filter(|_| vote.is_committed())?;
    (contact.elapsed() < lease).then(|| {
        format!(
            "heard from leader {} {} ms ago",
            vote.leader_id().voted_for().unwrap_or_default(),
            contact.elapsed().as_millis()
        )
    })
}

fn show(id: Option<LogId<NodeId>>) -> String {
    id.map_or("the start".to_owned(), |id| id.to_string())
}

/// Whether `granted` holds a majority of every configuration in `configs` (two while the
/// membership changes, one otherwise).
pub fn is_quorum(configs: &[BTreeSet<NodeId>], granted: &HashSet<NodeId>) -> bool {
    !configs.is_empty()
        && configs
            .iter()
            .all(|c| c.iter().filter(|v| granted.contains(v)).count() * 2 > c.len())
}

/// Asks every other voter whether it would vote for this node, for at most the shortest
/// election timeout; `Ok` once a quorum (this node included) said yes, else why not. A voter
/// that does not answer in time, and answered nothing for the lease, has its connection reset
/// ([`crate::net::Peers::reset_if_stalled`]).
pub async fn canvass(cluster: &Cluster, tail: &LogTail, timings: Timings) -> Result<(), String> {
    let within = timings.min;
    let (configs, addrs, term) = {
        let metrics = cluster.raft.metrics();
        let m = metrics.borrow();
        let membership = m.membership_config.membership();
        let addrs: Vec<(NodeId, String)> = membership
            .voter_ids()
            .filter(|v| *v != cluster.id)
            .filter_map(|v| membership.get_node(&v).map(|n| (v, n.addr.clone())))
            .collect();
        (membership.get_joint_config().clone(), addrs, m.current_term)
    };
    let question = PreVote {
        candidate: cluster.id,
        term,
        last_log_id: tail.last_log_id().map_err(|e| e.to_string())?,
    };
    let mut granted = HashSet::from([cluster.id]);
    if is_quorum(&configs, &granted) {
        return Ok(());
    }
    let payload = serde_json::to_vec(&question).map_err(|e| e.to_string())?;
    let mut asks: FuturesUnordered<_> = addrs
        .into_iter()
        .map(|(voter, addr)| {
            let payload = payload.clone();
            async move {
                let answer = tokio::time::timeout(within, ask(cluster, voter, &addr, payload))
                    .await
                    .unwrap_or_else(|_| {
                        cluster.peers.reset_if_stalled(voter, &addr, timings.max);
                        PreVoteAnswer::No("no answer in time".to_owned())
                    });
                (voter, answer)
            }
        })
        .collect();
    let mut refusals = Vec::new();
    while let Some((voter, answer)) = asks.next().await {
        match answer {
            PreVoteAnswer::Yes => {
                granted.insert(voter);
                if is_quorum(&configs, &granted) {
                    return Ok(());
                }
            }
            PreVoteAnswer::No(why) => refusals.push(format!("node {voter}: {why}")),
        }
    }
    Err(refusals.join("; "))
}

async fn ask(cluster: &Cluster, voter: NodeId, addr: &str, payload: Vec<u8>) -> PreVoteAnswer {
    let asked = async {
        deliver(&*cluster.filter, cluster.id, voter).await?;
        let mut client = cluster.peers.client(addr)?;
        let reply = client
            .pre_vote(cluster.peers.request(pb::PreVoteRequest { payload }))
            .await;
        deliver(&*cluster.filter, voter, cluster.id).await?;
        match reply {
            Ok(reply) => {
                cluster.peers.note_answer(voter);
                Ok(serde_json::from_slice(&reply.into_inner().payload)?)
            }
            // A node from before pre-votes votes as it always did.
            Err(status) if status.code() == tonic::Code::Unimplemented => Ok(PreVoteAnswer::Yes),
            Err(status) => Err(anyhow::anyhow!("{}", status.message())),
        }
    };
    asked
        .await
        .unwrap_or_else(|e: anyhow::Error| PreVoteAnswer::No(format!("unreachable: {e}")))
}

/// Turns openraft's election timer off and runs this one until Raft stops or `stopped` is set.
pub fn spawn(
    cluster: Cluster,
    tail: LogTail,
    mut stopped: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let raft = cluster.raft.clone();
    let id = cluster.id;
    let timings = Timings::of(raft.config());
    raft.runtime_config().elect(false);
    tokio::spawn(async move {
        let started = Instant::now();
        let mut rng = rand::rngs::StdRng::from_os_rng();
        // The contact the current draw was made for: a new contact, a new draw. A pre-vote that
        // failed also draws anew, counted from its end.
        let mut drawn: Option<(Instant, Duration)> = None;
        let mut not_before = started;
        loop {
            tokio::select! {
                () = tokio::time::sleep(timings.tick) => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
            let Some(seen) = look(&raft, id).await else {
                return;
            };
            if !seen.may_stand {
                drawn = None;
                continue;
            }
            let contact = seen.contact.unwrap_or(started);
            let wait = match drawn {
                Some((at, wait)) if at == contact => wait,
                _ => {
                    let wait = timings.draw(&mut rng);
                    drawn = Some((contact, wait));
                    wait
                }
            };
            if contact.elapsed() < timings.due(seen.following_a_leader, wait)
                || Instant::now() < not_before
            {
                continue;
            }
            if let Err(why) = canvass(&cluster, &tail, timings).await {
                tracing::debug!(node = id, "not standing for election: {why}");
                not_before = Instant::now() + timings.draw(&mut rng);
                continue;
            }
            tracing::info!(
                node = id,
                silent_ms = contact.elapsed().as_millis() as u64,
                "no word from a leader in time and a quorum would vote for this node: standing"
            );
            if raft.trigger().elect().await.is_err() {
                return;
            }
            // Standing sets the vote, so the next look sees a new contact and draws again.
        }
    })
}

#[cfg(test)]
mod tests {
    use super::Timings;
    use std::time::Duration;

    const MS: Duration = Duration::from_millis(1);

    fn timings() -> Timings {
        Timings {
            min: 300 * MS,
            max: 600 * MS,
            tick: 50 * MS,
        }
    }

    #[test]
    fn a_follower_waits_out_the_lease_first_and_a_candidate_does_not() {
        let t = timings();
        assert_eq!(t.due(true, 350 * MS), 950 * MS);
        assert_eq!(t.due(false, 350 * MS), 350 * MS);
    }

    #[test]
    fn each_draw_is_within_the_bounds_and_they_differ() {
        let t = timings();
        let mut rng = rand::rng();
        let draws: Vec<Duration> = (0..200).map(|_| t.draw(&mut rng)).collect();
        assert!(draws.iter().all(|d| (300 * MS..=600 * MS).contains(d)));
        let first = draws[0];
        assert!(
            draws.iter().any(|d| *d != first),
            "every draw was {first:?}"
        );
    }

    #[test]
    fn a_quorum_is_a_majority_of_every_configuration() {
        use super::is_quorum;
        use std::collections::{BTreeSet, HashSet};
        let three = BTreeSet::from([1, 2, 3]);
        let granted = |ids: &[u64]| ids.iter().copied().collect::<HashSet<u64>>();
        assert!(!is_quorum(std::slice::from_ref(&three), &granted(&[1])));
        assert!(is_quorum(std::slice::from_ref(&three), &granted(&[1, 3])));
        // While 1, 2, 3 become 3, 4, 5: a majority of each.
        let joint = [three.clone(), BTreeSet::from([3, 4, 5])];
        assert!(!is_quorum(&joint, &granted(&[1, 2, 3])));
        assert!(is_quorum(&joint, &granted(&[1, 3, 4])));
        assert!(is_quorum(&[BTreeSet::from([1])], &granted(&[1])));
        assert!(!is_quorum(&[], &granted(&[1])));
    }

    #[test]
    fn equal_bounds_draw_the_bound() {
        let t = Timings {
            min: 400 * MS,
            max: 400 * MS,
            tick: 50 * MS,
        };
        assert_eq!(t.draw(&mut rand::rng()), 400 * MS);
    }

    #[test]
    fn a_leader_holds_only_while_a_quorum_hears_it_or_it_was_just_elected() {
        use super::held_by_a_leader;
        use openraft::Vote;
        use tokio::time::Instant;
        let lease = 600 * MS;
        let led = Vote::new_committed(4, 1);
        let long_ago = Instant::now().checked_sub(5 * lease);
        // Elected long ago, a quorum heard it just now: it holds.
        assert_eq!(
            held_by_a_leader(true, Some(50), led, long_ago, lease).as_deref(),
            Some("this node leads")
        );
        // Cut off: no quorum for longer than the lease, elected long ago. It leads nobody.
        assert_eq!(
            held_by_a_leader(true, Some(4000), led, long_ago, lease),
            None
        );
        // Just elected, no quorum acknowledgement yet: its fresh vote holds.
        assert!(held_by_a_leader(true, None, led, Some(Instant::now()), lease).is_some());
        // A follower that heard its leader just now holds; one that did not, or whose vote was
        // never committed (a candidate's), does not.
        let followed = Vote::new_committed(4, 2);
        assert!(held_by_a_leader(false, None, followed, Some(Instant::now()), lease).is_some());
        assert_eq!(
            held_by_a_leader(false, None, followed, long_ago, lease),
            None
        );
        let asked_for = Vote::new(5, 3);
        assert_eq!(
            held_by_a_leader(false, None, asked_for, Some(Instant::now()), lease),
            None
        );
    }

    #[test]
    fn a_question_without_a_term_reads_as_term_zero() {
        let old: super::PreVote =
            serde_json::from_str(r#"{"candidate":2,"last_log_id":null}"#).expect("decodes");
        assert_eq!(old.term, 0);
        assert_eq!(old.candidate, 2);
    }
}
