use super::*;
use futures::StreamExt;
use gatehouse_raft_store::ApplyResult;
use gatehouse_registry::call::PrincipalChain;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::{
    ApprovalMode, CallState, Command, NewCall, Proposal, Response, documents,
};
use std::pin::Pin;

const FIXTURE: &str = r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: globex}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {name: alice}
spec:
  apiKeySha256: "0000000000000000000000000000000000000000000000000000000000000002"
  roles: {acme: [approver], globex: [approver]}
"#;

/// A state machine without Raft: applies commands to a registry and broadcasts them as the
/// store does.
struct Log {
    registry: SharedRegistry,
    events: broadcast::Sender<AppliedEntry>,
    index: u64,
    calls: u128,
}

impl Log {
    fn new(capacity: usize) -> Self {
        let (events, _) = broadcast::channel(capacity);
        let mut log = Log {
            registry: SharedRegistry::new(Registry::new()),
            events,
            index: 0,
            calls: 0,
        };
        let resources = documents::parse("fixture.yaml", FIXTURE).into_resources();
        log.run(Command::Put { resources });
        log
    }

    fn feed(&self, capacity: usize) -> (CallFeed, watch::Sender<bool>) {
        let (stop, stopped) = watch::channel(false);
        let feed = CallFeed::start_with(
            self.events.subscribe(),
            self.registry.clone(),
            stopped,
            capacity,
            Duration::from_millis(20),
        );
        (feed, stop)
    }

    /// Applies a command at the next index, without telling anyone: what a snapshot install
    /// looks like from outside.
    fn apply(&mut self, command: Command) -> (AppliedEntry, u64) {
        self.index += 1;
        let proposal = Proposal {
            request_id: uuid::Uuid::new_v4(),
            at: 1_000 + self.index,
            command,
        };
        let mut registry = self.registry.write().unwrap();
        let result: ApplyResult = registry.apply(self.index, &proposal);
        let calls = match &result {
            Ok(Response::Call { call_id, .. }) => {
                registry.call(call_id).cloned().into_iter().collect()
            }
            _ => vec![],
        };
        let applied = AppliedEntry {
            index: self.index,
            proposal: Arc::new(proposal),
            result,
            calls: Arc::new(calls),
        };
        (applied, self.index)
    }

    fn run(&mut self, command: Command) -> u64 {
        let (applied, index) = self.apply(command);
        assert!(applied.result.is_ok(), "{:?}", applied.result);
        let _ = self.events.send(applied);
        index
    }

    fn propose(&mut self, tenant: &str, required_approvals: u32) -> (CallId, u64) {
        self.calls += 1;
        let id = CallId::from_random(self.calls);
        let arguments = format!("{{\"n\":{}}}", self.calls);
        let call = NewCall {
            id: id.clone(),
            tenant: tenant.into(),
            tool: "billing.refund".into(),
            args_sha256: sha256_hex(arguments.as_bytes()),
            arguments,
            chain: PrincipalChain {
                people: Vec::new(),
                end_user: None,
                agent: "bot".into(),
                a2a_peer: None,
            },
            requested_mode: None,
            effective_mode: ApprovalMode::Destructive,
            highest_mode: ApprovalMode::Destructive,
            policy_decision_id: "pd".into(),
            tool_generation: 1,
            policy_generation: 0,
            idempotency_key: None,
            retry_safe: false,
            required_approvals,
            expires_at: u64::MAX,
            approval_valid_ms: 60_000,
            context_id: None,
            trace_parent: None,
        };
        let index = self.run(Command::Propose {
            call: Box::new(call),
        });
        (id, index)
    }

    fn approve(&mut self, id: &CallId) -> u64 {
        let hash = self
            .registry
            .read()
            .call(id)
            .unwrap()
            .spec
            .args_sha256
            .clone();
        self.run(Command::Approve {
            user: None,
            call_id: id.clone(),
            approver: "alice".into(),
            args_sha256: hash,
            note: String::new(),
        })
    }

    fn cancel_command(id: &CallId) -> Command {
        Command::Cancel {
            user: None,
            call_id: id.clone(),
            principal: "bot".into(),
            reason: "changed my mind".into(),
        }
    }

    fn cancel(&mut self, id: &CallId) -> u64 {
        self.run(Self::cancel_command(id))
    }
}

type Events = Pin<Box<dyn Stream<Item = WatchEvent> + Send>>;

fn watch(feed: &CallFeed, tenant: &str, from: u64) -> Events {
    Box::pin(feed.watch(tenant, from))
}

/// (index, kind, call id, state), or a resync as (index, None, count).
#[derive(Debug, PartialEq)]
enum Seen {
    Change(u64, ChangeKind, CallId, CallState),
    Resync(u64, u64),
}

fn seen(event: WatchEvent) -> Seen {
    match event {
        WatchEvent::Change { index, change } => Seen::Change(
            index,
            change.kind,
            change.call.id().clone(),
            change.call.state,
        ),
        WatchEvent::Resync { index, calls } => Seen::Resync(index, calls),
    }
}

async fn next(events: &mut Events) -> Seen {
    let event = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream goes on");
    seen(event)
}

async fn take(events: &mut Events, n: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next(events).await);
    }
    out
}

/// Nothing more arrives for a while.
async fn quiet(events: &mut Events) {
    let more = tokio::time::timeout(Duration::from_millis(150), events.next()).await;
    assert!(
        more.is_err(),
        "unexpected event: {:?}",
        more.ok().flatten().map(seen)
    );
}

async fn caught_up(feed: &CallFeed, index: u64) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while feed.last_index() < index {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the feed catches up");
}

use ChangeKind::{Added, Changed, Removed};
use Seen::{Change as C, Resync as R};

#[tokio::test]
async fn replay_from_a_held_index_gives_each_later_change_once() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let (a, i1) = log.propose("acme", 2);
    let (_, _) = log.propose("globex", 1);
    let i3 = log.approve(&a);
    let (b, i4) = log.propose("acme", 1);
    let i5 = log.cancel(&a);
    caught_up(&feed, i5).await;

    let mut events = watch(&feed, "acme", i1);
    assert_eq!(
        take(&mut events, 3).await,
        [
            C(i3, Changed, a.clone(), CallState::Pending),
            C(i4, Added, b.clone(), CallState::Pending),
            C(i5, Removed, a.clone(), CallState::Cancelled),
        ]
    );
    quiet(&mut events).await;
    // Then live, once.
    let i6 = log.cancel(&b);
    assert_eq!(
        next(&mut events).await,
        C(i6, Removed, b, CallState::Cancelled)
    );
    quiet(&mut events).await;

    // Resuming at the newest index replays nothing.
    let mut events = watch(&feed, "acme", i6);
    quiet(&mut events).await;
}

#[tokio::test]
async fn zero_or_an_index_the_ring_no_longer_holds_starts_with_a_resync() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(2);
    let (a, i1) = log.propose("acme", 1);
    let (b, _) = log.propose("acme", 1);
    let (c, _) = log.propose("acme", 1);
    let i4 = log.cancel(&b);
    caught_up(&feed, i4).await;

    for from in [0, i1] {
        let mut events = watch(&feed, "acme", from);
        assert_eq!(
            take(&mut events, 3).await,
            [
                C(i4, Added, a.clone(), CallState::Pending),
                C(i4, Added, c.clone(), CallState::Pending),
                R(i4, 2),
            ],
            "from {from}"
        );
        quiet(&mut events).await;
    }

    let mut events = watch(&feed, "acme", 0);
    take(&mut events, 3).await;
    let i5 = log.cancel(&a);
    assert_eq!(
        next(&mut events).await,
        C(i5, Removed, a, CallState::Cancelled)
    );
}

#[tokio::test]
async fn a_watcher_sees_only_its_tenant() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let mut acme = watch(&feed, "acme", 0);
    let mut globex = watch(&feed, "globex", 0);
    assert_eq!(next(&mut acme).await, R(1, 0));
    assert_eq!(next(&mut globex).await, R(1, 0));
    let (a, i2) = log.propose("acme", 1);
    let (g, i3) = log.propose("globex", 1);
    let i4 = log.cancel(&g);
    assert_eq!(next(&mut acme).await, C(i2, Added, a, CallState::Pending));
    quiet(&mut acme).await;
    assert_eq!(
        take(&mut globex, 2).await,
        [
            C(i3, Added, g.clone(), CallState::Pending),
            C(i4, Removed, g, CallState::Cancelled),
        ]
    );
    quiet(&mut globex).await;
}

#[tokio::test]
async fn a_slow_watcher_resumes_from_the_ring_without_a_gap() {
    let mut log = Log::new(4_096);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let mut events = watch(&feed, "acme", 0);
    assert_eq!(next(&mut events).await, R(1, 0));
    // More entries than the live broadcast holds, while the watcher reads nothing.
    let mut expected = Vec::new();
    for _ in 0..(LIVE_ENTRIES + 200) {
        let (id, index) = log.propose("acme", 1);
        expected.push(C(index, Added, id, CallState::Pending));
    }
    assert_eq!(take(&mut events, expected.len()).await, expected);
    quiet(&mut events).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_feed_that_misses_entries_rereads_the_registry_and_watchers_resync() {
    let mut log = Log::new(4);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let (a, i2) = log.propose("acme", 1);
    caught_up(&feed, i2).await;
    let mut events = watch(&feed, "acme", 0);
    assert_eq!(
        take(&mut events, 2).await,
        [C(i2, Added, a.clone(), CallState::Pending), R(i2, 1)]
    );
    // The feed runs on this thread: it sees none of these until the loop yields, and then the
    // broadcast has dropped the first of them.
    let mut proposed = Vec::new();
    for _ in 0..10 {
        proposed.push(log.propose("acme", 1).0);
    }
    let i12 = log.cancel(&a);
    let mut resync = take(&mut events, 12).await;
    assert_eq!(resync.remove(0), C(i12, Removed, a, CallState::Cancelled));
    let expected: Vec<Seen> = proposed
        .into_iter()
        .map(|id| C(i12, Added, id, CallState::Pending))
        .chain([R(i12, 10)])
        .collect();
    assert_eq!(resync, expected);
    quiet(&mut events).await;
}

#[tokio::test]
async fn a_snapshot_jump_is_noticed_at_the_next_entry() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let (a, _) = log.propose("acme", 1);
    let (b, i3) = log.propose("acme", 1);
    caught_up(&feed, i3).await;
    let mut events = watch(&feed, "acme", 0);
    assert_eq!(
        take(&mut events, 3).await,
        [
            C(i3, Added, a.clone(), CallState::Pending),
            C(i3, Added, b.clone(), CallState::Pending),
            R(i3, 2),
        ]
    );
    // Applied without an event, as a snapshot install does; then an ordinary entry.
    let _ = log.apply(Log::cancel_command(&a));
    let (c, i5) = log.propose("acme", 1);
    assert_eq!(
        take(&mut events, 4).await,
        [
            C(i5, Removed, a, CallState::Cancelled),
            C(i5, Added, b, CallState::Pending),
            C(i5, Added, c, CallState::Pending),
            R(i5, 2),
        ]
    );
    quiet(&mut events).await;
}

#[tokio::test]
async fn a_snapshot_jump_with_nothing_after_it_is_noticed_when_idle() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let (a, i2) = log.propose("acme", 1);
    caught_up(&feed, i2).await;
    let mut events = watch(&feed, "acme", 0);
    assert_eq!(
        take(&mut events, 2).await,
        [C(i2, Added, a.clone(), CallState::Pending), R(i2, 1)]
    );
    let (_, i3) = log.apply(Log::cancel_command(&a));
    assert_eq!(
        take(&mut events, 2).await,
        [C(i3, Removed, a, CallState::Cancelled), R(i3, 0)]
    );
}

#[tokio::test]
async fn a_gap_of_entries_without_commands_needs_no_resync() {
    let mut log = Log::new(64);
    let (feed, _stop) = log.feed(RING_CHANGES);
    let (a, i2) = log.propose("acme", 1);
    caught_up(&feed, i2).await;
    let mut events = watch(&feed, "acme", i2);
    // A new leader's blank entry: an index with no command, so no event.
    log.index += 1;
    let i4 = log.cancel(&a);
    assert_eq!(
        next(&mut events).await,
        C(i4, Removed, a, CallState::Cancelled)
    );
    quiet(&mut events).await;
}

#[tokio::test]
async fn watch_streams_end_when_the_feed_stops() {
    let log = Log::new(64);
    let (feed, stop) = log.feed(RING_CHANGES);
    let mut events = watch(&feed, "acme", 0);
    assert_eq!(next(&mut events).await, R(1, 0));
    stop.send_replace(true);
    let end = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert_eq!(end.expect("the stream ends").map(seen), None);
}
