//! `CallFeed`: this node's feed of changes to unfinished calls, which approvers' watch streams
//! are served from, leader or not.
//!
//! It follows the state machine's applied entries and keeps, under one lock, every tenant's
//! unfinished calls as of the last entry it took, a bounded ring of recent changes, and a
//! broadcast of new ones. A watcher resumes from the applied index it last saw: from the ring if
//! the ring reaches back that far, else with the tenant's whole unfinished set and a resync
//! marker. Both are taken under the lock the feed publishes under, so a watcher sees every change
//! once, in log order.
//!
//! Every entry that carries a command is broadcast, so the feed knows what it missed: a lagging
//! broadcast, or an index the registry reached without its entry coming (a snapshot was
//! installed). Then it re-reads the registry and forgets its ring; watchers resync.

use futures::Stream;
use gatehouse_raft_store::{AppliedEntry, SharedRegistry};
use gatehouse_registry::{Call, CallId, Registry};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLockReadGuard};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio::time::MissedTickBehavior;
use watcher::Watcher;

/// Changes the ring keeps for watchers that resume.
pub const RING_CHANGES: usize = 10_000;
/// Entries a live watcher may fall behind before it resumes from the ring instead.
const LIVE_ENTRIES: usize = 1_024;
/// How often an idle feed asks whether the registry moved without it.
const IDLE_CHECK: Duration = Duration::from_secs(1);
/// Idle checks an index the registry reached may go without its entry before the feed concludes
/// that a snapshot took the registry there.
const MISSING_CHECKS: u32 = 3;

/// What happened to a call, as the set of unfinished calls sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The call joined the set: proposed, or part of a resync.
    Added,
    /// The call changed and is still unfinished.
    Changed,
    /// The call finished; its record says how.
    Removed,
}

/// One call's change, with its whole record after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: ChangeKind,
    pub call: Arc<Call>,
}

/// What a watcher is sent.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    Change {
        index: u64,
        change: Change,
    },
    /// The calls added since the stream began (or since the previous marker) are the tenant's
    /// whole unfinished set as of `index`.
    Resync {
        index: u64,
        calls: u64,
    },
}

/// The changes one applied entry made to unfinished calls.
#[derive(Debug)]
struct Entry {
    index: u64,
    changes: Vec<Change>,
}

#[derive(Debug, Clone)]
enum Live {
    Entry(Arc<Entry>),
    /// The feed re-read the registry: every watcher resumes, and resyncs.
    Reset,
}

/// Tenant to its unfinished calls, by id. A tenant with none has no entry.
type Unfinished = HashMap<String, BTreeMap<CallId, Arc<Call>>>;

/// An index the registry was seen at, which the feed expects an entry for.
#[derive(Debug)]
struct Expected {
    index: u64,
    /// The unfinished calls there, to compare with once the feed reaches it.
    calls: Option<Unfinished>,
    idle_checks: u32,
}

#[derive(Debug)]
struct State {
    last_index: u64,
    /// The ring holds every change after this index: a watcher resuming here or later replays.
    held_after: u64,
    unfinished: Unfinished,
    ring: VecDeque<Arc<Entry>>,
    ring_changes: usize,
    capacity: usize,
    expected: Option<Expected>,
    /// `None` once the feed has stopped.
    live: Option<broadcast::Sender<Live>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    registry: SharedRegistry,
}

/// A cheap handle on the node's feed.
#[derive(Clone)]
pub struct CallFeed {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CallFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Without the lock: this may be printed while it is held.
        f.debug_struct("CallFeed").finish_non_exhaustive()
    }
}

fn read(registry: &SharedRegistry) -> RwLockReadGuard<'_, Registry> {
    registry.read()
}

impl CallFeed {
    /// Starts following `applied` (subscribed before Raft could apply anything) from the
    /// registry's current state. It stops when `stop` turns true or its sender goes, or when the
    /// state machine goes; its watchers' streams end then.
    pub fn start(
        applied: broadcast::Receiver<AppliedEntry>,
        registry: SharedRegistry,
        stop: watch::Receiver<bool>,
    ) -> CallFeed {
        Self::start_with(applied, registry, stop, RING_CHANGES, IDLE_CHECK)
    }

    fn start_with(
        applied: broadcast::Receiver<AppliedEntry>,
        registry: SharedRegistry,
        stop: watch::Receiver<bool>,
        capacity: usize,
        idle_check: Duration,
    ) -> CallFeed {
        let (live, _) = broadcast::channel(LIVE_ENTRIES);
        let mut state = State {
            last_index: 0,
            held_after: 0,
            unfinished: Unfinished::new(),
            ring: VecDeque::new(),
            ring_changes: 0,
            capacity,
            expected: None,
            live: Some(live),
        };
        {
            let registry = read(&registry);
            state.restore(registry.applied_index(), unfinished_of(&registry));
        }
        let feed = CallFeed {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                registry,
            }),
        };
        tokio::spawn(feed.clone().follow(applied, stop, idle_check));
        feed
    }

    /// The applied index the feed's set of unfinished calls is at.
    pub fn last_index(&self) -> u64 {
        self.lock().last_index
    }

    /// A tenant's changes after `from_index`, then live, until the feed stops. An index of 0,
    /// or one older than the ring reaches, starts with the tenant's unfinished calls and a
    /// resync marker. A watcher that falls behind resumes by the same rule from the last index
    /// it was sent.
    pub fn watch(
        &self,
        tenant: &str,
        from_index: u64,
    ) -> impl Stream<Item = WatchEvent> + Send + 'static {
        let watcher = Watcher {
            feed: self.clone(),
            tenant: tenant.to_owned(),
            last: from_index,
            queue: VecDeque::new(),
            live: None,
            known: BTreeMap::new(),
        };
        futures::stream::unfold(watcher, |mut watcher| async move {
            let event = watcher.next().await?;
            Some((event, watcher))
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn follow(
        self,
        mut applied: broadcast::Receiver<AppliedEntry>,
        mut stop: watch::Receiver<bool>,
        idle_check: Duration,
    ) {
        let mut idle = tokio::time::interval(idle_check);
        idle.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                received = applied.recv() => match received {
                    Ok(entry) => self.take(&entry),
                    Err(RecvError::Lagged(missed)) => {
                        let mut state = self.lock();
                        let registry = read(&self.shared.registry);
                        state.reset(&registry, &format!("missed {missed} applied entries"));
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = idle.tick() => self.idle_check(applied.is_empty()),
                _ = stopped(&mut stop) => break,
            }
        }
        self.lock().live = None;
    }

    fn take(&self, applied: &AppliedEntry) {
        let mut state = self.lock();
        let index = applied.index;
        if index <= state.last_index {
            return;
        }
        let registry = &self.shared.registry;
        if state.expected.as_ref().is_some_and(|e| e.index < index) {
            return state.reset(&read(registry), "a snapshot was installed");
        }
        // Blank entries of a new leader and membership changes carry no command and leave gaps
        // too; only a comparison with the registry, once the feed gets where it is now, tells.
        if index > state.last_index + 1 && state.expected.as_ref().is_none_or(|e| e.calls.is_none())
        {
            let registry = read(registry);
            state.expected = Some(Expected {
                index: registry.applied_index(),
                calls: Some(unfinished_of(&registry)),
                idle_checks: 0,
            });
        }
        let entry = state.apply(index, &applied.calls);
        if let Some(expected) = state.expected.take_if(|e| e.index == index)
            && let Some(calls) = expected.calls
            && calls != state.unfinished
        {
            tracing::warn!(
                index,
                "call feed missed changes (snapshot installed); watchers resync"
            );
            return state.restore(index, calls);
        }
        state.publish(entry);
    }

    /// With no entry waiting: a registry ahead of the feed should be followed by its entry soon;
    /// if it is not, a snapshot moved the registry.
    fn idle_check(&self, quiet: bool) {
        if !quiet {
            return;
        }
        let mut state = self.lock();
        let registry = read(&self.shared.registry);
        let last_index = state.last_index;
        match &mut state.expected {
            Some(expected) => {
                expected.idle_checks += 1;
                if expected.idle_checks >= MISSING_CHECKS {
                    state.reset(&registry, "the registry moved without entries");
                }
            }
            None if registry.applied_index() > last_index => {
                state.expected = Some(Expected {
                    index: registry.applied_index(),
                    calls: None,
                    idle_checks: 0,
                });
            }
            None => {}
        }
    }

    /// Under the feed's lock: queues what a watcher resuming after its last index must be sent
    /// before live entries, and subscribes it to those. `None` once the feed has stopped.
    fn resume(&self, watcher: &mut Watcher) -> Option<broadcast::Receiver<Live>> {
        let state = self.lock();
        let live = state.live.as_ref()?.subscribe();
        if watcher.last > 0 && watcher.last >= state.held_after {
            for entry in &state.ring {
                watcher.take(entry);
            }
            watcher.last = watcher.last.max(state.last_index);
            return Some(live);
        }
        let index = state.last_index;
        let current = state.unfinished.get(&watcher.tenant);
        // Calls this stream reported that finished while it was not following.
        let gone: Vec<CallId> = watcher
            .known
            .keys()
            .filter(|id| !current.is_some_and(|c| c.contains_key(id)))
            .cloned()
            .collect();
        if !gone.is_empty() {
            let registry = read(&self.shared.registry);
            for id in gone {
                let Some(known) = watcher.known.get(&id).cloned() else {
                    continue;
                };
                let call = match registry.call(&id) {
                    Some(call) if call.state.is_finished() => Arc::new(call.clone()),
                    _ => known,
                };
                watcher.send(index, ChangeKind::Removed, call);
            }
        }
        let calls: Vec<Arc<Call>> = current
            .into_iter()
            .flat_map(|c| c.values())
            .cloned()
            .collect();
        let count = calls.len() as u64;
        for call in calls {
            watcher.send(index, ChangeKind::Added, call);
        }
        watcher.queue.push_back(WatchEvent::Resync {
            index,
            calls: count,
        });
        watcher.last = index;
        Some(live)
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn unfinished_of(registry: &Registry) -> Unfinished {
    let mut calls = Unfinished::new();
    for call in registry.unfinished_calls() {
        calls
            .entry(call.spec.tenant.clone())
            .or_default()
            .insert(call.id().clone(), Arc::new(call.clone()));
    }
    calls
}

impl State {
    /// Takes one entry's call records into the set; the changes they make.
    fn apply(&mut self, index: u64, calls: &[Call]) -> Entry {
        self.last_index = index;
        let mut changes = Vec::new();
        // A batch may touch a call twice; each copy is the record after the whole entry.
        let mut seen = HashSet::new();
        for call in calls.iter().filter(|c| seen.insert(c.id())) {
            let tenant = &call.spec.tenant;
            let held = self.unfinished.get(tenant).and_then(|c| c.get(call.id()));
            let kind = match (held, call.state.is_finished()) {
                (Some(old), false) if **old == *call => continue,
                (Some(_), false) => ChangeKind::Changed,
                (None, false) => ChangeKind::Added,
                (Some(_), true) => ChangeKind::Removed,
                // Proposed and finished within the entry, or a repeat: never unfinished here.
                (None, true) => continue,
            };
            let record = Arc::new(call.clone());
            let of_tenant = self.unfinished.entry(tenant.clone()).or_default();
            if kind == ChangeKind::Removed {
                of_tenant.remove(call.id());
                if of_tenant.is_empty() {
                    self.unfinished.remove(tenant);
                }
            } else {
                of_tenant.insert(call.id().clone(), record.clone());
            }
            changes.push(Change { kind, call: record });
        }
        Entry { index, changes }
    }

    fn publish(&mut self, entry: Entry) {
        if entry.changes.is_empty() {
            return;
        }
        let entry = Arc::new(entry);
        self.ring_changes += entry.changes.len();
        self.ring.push_back(entry.clone());
        while self.ring_changes > self.capacity && self.ring.len() > 1 {
            if let Some(old) = self.ring.pop_front() {
                self.ring_changes -= old.changes.len();
                self.held_after = old.index;
            }
        }
        if let Some(live) = &self.live {
            // No watcher is fine.
            let _ = live.send(Live::Entry(entry));
        }
    }

    fn reset(&mut self, registry: &Registry, why: &str) {
        tracing::warn!(
            why,
            index = registry.applied_index(),
            "call feed re-read the registry; watchers resync"
        );
        self.restore(registry.applied_index(), unfinished_of(registry));
    }

    /// Starts over from a known set at `index`: the ring is forgotten and watchers resync.
    fn restore(&mut self, index: u64, calls: Unfinished) {
        self.unfinished = calls;
        self.last_index = index;
        self.held_after = index;
        self.ring.clear();
        self.ring_changes = 0;
        self.expected = None;
        if let Some(live) = &self.live {
            let _ = live.send(Live::Reset);
        }
    }
}

mod watcher;

#[cfg(test)]
mod tests;
