//! Approvers decide calls over `ApprovalService` from any node: approvals land on every node,
//! the registry's guards refuse self-approval, stale arguments and decided calls, another
//! tenant's calls do not exist, and N-of-M needs N distinct approvers. Watch streams from any node
//! see each change of a tenant's unfinished calls once, in log order, across a leader change.
//!
//! Calls are proposed straight through a node's cluster handle, as the gateway's pipeline would
//! after planning them.

use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_registry::call::PrincipalChain;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::{ApprovalMode, CallId, Command, NewCall};
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::TestCluster;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Code;
use tonic::transport::Channel;

const BOT: &str = "gate_bot-key-00000000000000000000000";
const ALICE: &str = "gate_alice-key-0000000000000000000000";
const BOB: &str = "gate_bob-key-00000000000000000000000";
const JOHN: &str = "gate_john-key-0000000000000000000000";
const SLY: &str = "gate_sly-key-00000000000000000000000";
const GINA: &str = "gate_gina-key-0000000000000000000000";

/// Tenants acme and globex. In acme: the agent `bot` acting for the user john; approvers alice
/// and bob; `john`, an approver who is that same user; `sly`, an agent who is also an approver.
/// In globex: the approver gina.
fn setup(ids: &[u64]) -> anyhow::Result<TestCluster> {
    let cluster = TestCluster::new(ids)?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let index = cluster.block_on(cluster.admin(leader).apply(vec![
        resource("Tenant", "acme", None, serde_json::json!({})),
        resource("Tenant", "globex", None, serde_json::json!({})),
        principal(
            "bot",
            BOT,
            serde_json::json!({"acme": ["agent"]}),
            Some("john"),
        ),
        principal(
            "alice",
            ALICE,
            serde_json::json!({"acme": ["approver"]}),
            None,
        ),
        principal("bob", BOB, serde_json::json!({"acme": ["approver"]}), None),
        principal(
            "john",
            JOHN,
            serde_json::json!({"acme": ["approver"]}),
            Some("john"),
        ),
        principal(
            "sly",
            SLY,
            serde_json::json!({"acme": ["agent", "approver"]}),
            None,
        ),
        principal(
            "gina",
            GINA,
            serde_json::json!({"globex": ["approver"]}),
            None,
        ),
    ]))?;
    cluster.wait_converged(index, Duration::from_secs(10))?;
    Ok(cluster)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A call as the pipeline would propose it: `required` approvals, an hour to get them.
fn new_call(
    agent: &str,
    end_user: Option<&str>,
    args: serde_json::Value,
    required: u32,
) -> NewCall {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let arguments = args.to_string();
    NewCall {
        id: CallId::from_random(((now_ms() as u128) << 32) | n as u128),
        tenant: "acme".into(),
        tool: "billing.refund".into(),
        args_sha256: sha256_hex(arguments.as_bytes()),
        arguments,
        chain: PrincipalChain {
            people: Vec::new(),
            end_user: end_user.map(str::to_owned),
            agent: agent.into(),
            a2a_peer: None,
        },
        requested_mode: None,
        effective_mode: ApprovalMode::Destructive,
        highest_mode: ApprovalMode::Destructive,
        policy_decision_id: "pd_t80".into(),
        tool_generation: 0,
        policy_generation: 0,
        idempotency_key: None,
        retry_safe: false,
        required_approvals: required,
        expires_at: now_ms() + 3_600_000,
        approval_valid_ms: 3_600_000,
        context_id: None,
        trace_parent: None,
    }
}

/// Proposes a call through node `via`; its id and the log index it was committed at, once every
/// running node has applied it.
fn propose(cluster: &TestCluster, via: u64, call: NewCall) -> anyhow::Result<(String, u64)> {
    let (id, index) = propose_through(cluster, via, call)?;
    for node in cluster.running() {
        cluster.wait_for_applied(node, index, Duration::from_secs(10))?;
    }
    Ok((id, index))
}

/// Proposes a call through node `via`; its id and the log index it was committed at.
fn propose_through(
    cluster: &TestCluster,
    via: u64,
    call: NewCall,
) -> anyhow::Result<(String, u64)> {
    let id = call.id.0.clone();
    let handle = cluster.node(via).cluster.clone();
    let (_, index) = cluster.block_on(handle.propose(Command::Propose {
        call: Box::new(call),
    }))?;
    Ok((id, index))
}

/// A bot's call for john with arguments `{"amount": amount}`.
fn bot_call(cluster: &TestCluster, via: u64, amount: u32, required: u32) -> anyhow::Result<String> {
    let call = new_call(
        "bot",
        Some("john"),
        serde_json::json!({"amount": amount}),
        required,
    );
    Ok(propose(cluster, via, call)?.0)
}

/// One principal's approval client on one node.
#[derive(Clone)]
struct Approver {
    client: ApprovalServiceClient<Channel>,
    key: String,
}

impl Approver {
    fn on(cluster: &TestCluster, node: u64, key: &str) -> anyhow::Result<Self> {
        let channel = cluster
            .block_on(Channel::from_shared(format!("http://{}", cluster.addr(node)))?.connect())?;
        Ok(Approver {
            client: ApprovalServiceClient::new(channel),
            key: key.to_owned(),
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {}", self.key).parse().expect("ascii key"),
        );
        request
    }

    async fn get(&self, id: &str) -> Result<pb::CallRecord, tonic::Status> {
        let request = self.request(pb::GetCallRecordRequest { call_id: id.into() });
        let answer = self.client.clone().get(request).await?.into_inner();
        Ok(answer.call.expect("a record"))
    }

    async fn approve(
        &self,
        id: &str,
        args_sha256: &str,
    ) -> Result<(pb::CallRecord, u64), tonic::Status> {
        let request = self.request(pb::ApproveCallRequest {
            call_id: id.into(),
            args_sha256: args_sha256.into(),
            reason: "reviewed".into(),
        });
        let answer = self.client.clone().approve(request).await?.into_inner();
        Ok((answer.call.expect("a record"), answer.log_index))
    }

    /// Approves the arguments the call has now.
    async fn approve_current(&self, id: &str) -> Result<(pb::CallRecord, u64), tonic::Status> {
        let seen = self.get(id).await?;
        self.approve(id, &seen.args_sha256).await
    }

    async fn reject(&self, id: &str, reason: &str) -> Result<(pb::CallRecord, u64), tonic::Status> {
        let request = self.request(pb::RejectCallRequest {
            call_id: id.into(),
            reason: reason.into(),
        });
        let answer = self.client.clone().reject(request).await?.into_inner();
        Ok((answer.call.expect("a record"), answer.log_index))
    }

    async fn cancel(&self, id: &str, reason: &str) -> Result<(pb::CallRecord, u64), tonic::Status> {
        let request = self.request(pb::CancelCallRequest {
            call_id: id.into(),
            reason: reason.into(),
        });
        let answer = self.client.clone().cancel(request).await?.into_inner();
        Ok((answer.call.expect("a record"), answer.log_index))
    }

    async fn resolve(
        &self,
        id: &str,
        outcome: pb::ResolveOutcome,
    ) -> Result<pb::CallRecord, tonic::Status> {
        let request = self.request(pb::ResolveCallRequest {
            call_id: id.into(),
            outcome: outcome as i32,
            reason: "checked the ledger".into(),
        });
        Ok(self
            .client
            .clone()
            .resolve(request)
            .await?
            .into_inner()
            .call
            .expect("a record"))
    }

    async fn list(
        &self,
        tenant: &str,
        state: pb::CallState,
        page_size: u32,
        page_token: &str,
    ) -> Result<pb::ListCallsResponse, tonic::Status> {
        let request = self.request(pb::ListCallsRequest {
            tenant: tenant.into(),
            state: state as i32,
            page_size,
            page_token: page_token.into(),
            tool: String::new(),
            mode: pb::ApprovalMode::Unspecified as i32,
        });
        Ok(self
            .client
            .clone()
            .list_pending(request)
            .await?
            .into_inner())
    }

    /// Every page of a listing, by call id.
    async fn list_all(
        &self,
        tenant: &str,
        state: pb::CallState,
        page_size: u32,
    ) -> Result<Vec<String>, tonic::Status> {
        let mut ids = Vec::new();
        let mut token = String::new();
        loop {
            let page = self.list(tenant, state, page_size, &token).await?;
            ids.extend(page.calls.into_iter().map(|c| c.call_id));
            if page.next_page_token.is_empty() {
                return Ok(ids);
            }
            token = page.next_page_token;
        }
    }

    async fn watch(
        &self,
        tenant: &str,
        from_index: u64,
    ) -> Result<tonic::Streaming<pb::ApprovalEvent>, tonic::Status> {
        let request = self.request(pb::WatchCallsRequest {
            tenant: tenant.into(),
            from_index,
        });
        Ok(self
            .client
            .clone()
            .watch_pending(request)
            .await?
            .into_inner())
    }
}

fn code<T: std::fmt::Debug>(result: Result<T, tonic::Status>) -> Code {
    result.expect_err("refused").code()
}

fn state(call: &pb::CallRecord) -> pb::CallState {
    pb::CallState::try_from(call.state).expect("a known state")
}

fn approvers(call: &pb::CallRecord) -> Vec<&str> {
    call.approvals
        .iter()
        .map(|a| a.principal.as_str())
        .collect()
}

#[test]
fn an_approval_through_a_follower_is_recorded_on_every_node() -> anyhow::Result<()> {
    let cluster = setup(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let follower = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let id = bot_call(&cluster, leader, 120, 1)?;
    cluster.wait_converged(cluster.max_applied(), Duration::from_secs(10))?;

    let alice = Approver::on(&cluster, follower, ALICE)?;
    let (call, index) = cluster.block_on(async {
        let seen = alice.get(&id).await?;
        assert_eq!(state(&seen), pb::CallState::Pending);
        assert_eq!(seen.args_json, r#"{"amount":120}"#);
        alice.approve(&id, &seen.args_sha256).await
    })?;
    assert_eq!(approvers(&call), ["alice"]);
    // Approved at once; the tenant's home may already have claimed it.
    assert_ne!(state(&call), pb::CallState::Pending);
    assert!(call.approval_valid_until_unix_ms.is_some());

    cluster.wait_converged(index, Duration::from_secs(10))?;
    for node in [1, 2, 3] {
        let record = cluster.block_on(Approver::on(&cluster, node, ALICE)?.get(&id))?;
        assert_eq!(approvers(&record), ["alice"], "node {node}");
        assert_eq!(record.approvals[0].reason, "reviewed");
        assert_ne!(state(&record), pb::CallState::Pending, "node {node}");
    }
    Ok(())
}

#[test]
fn guards_refuse_self_approval_stale_arguments_and_decided_calls() -> anyhow::Result<()> {
    let cluster = setup(&[1])?;
    let id = bot_call(&cluster, 1, 5, 1)?;
    let sly_call = new_call("sly", None, serde_json::json!({"amount": 6}), 1);
    let (sly_id, _) = propose(&cluster, 1, sly_call)?;
    let [alice, bob, john, sly, bot, admin] = [ALICE, BOB, JOHN, SLY, BOT, cluster.admin_key()]
        .map(|key| Approver::on(&cluster, 1, key).expect("a client"));

    cluster.block_on(async {
        let args = alice.get(&id).await.unwrap().args_sha256;
        // The agent of a call, and the user it acts for, cannot approve it.
        assert_eq!(
            code(sly.approve_current(&sly_id).await),
            Code::PermissionDenied
        );
        assert_eq!(code(john.approve(&id, &args).await), Code::PermissionDenied);
        // An agent is no approver; a cluster admin reads, but only approvers decide.
        assert_eq!(code(bot.approve(&id, &args).await), Code::PermissionDenied);
        assert_eq!(code(bot.get(&id).await), Code::PermissionDenied);
        assert_eq!(admin.get(&id).await.unwrap().call_id, id);
        assert_eq!(
            code(admin.approve(&id, &args).await),
            Code::PermissionDenied
        );
        // An approval names the arguments reviewed.
        assert_eq!(code(alice.approve(&id, "").await), Code::InvalidArgument);
        let other = sha256_hex(br#"{"amount":5000}"#);
        assert_eq!(
            code(alice.approve(&id, &other).await),
            Code::FailedPrecondition
        );
        // Nothing was decided by the refusals.
        let unchanged = alice.get(&id).await.unwrap();
        assert_eq!(state(&unchanged), pb::CallState::Pending);
        assert!(unchanged.approvals.is_empty());

        // A rejection needs a reason, and is final.
        assert_eq!(code(bob.reject(&id, " ").await), Code::InvalidArgument);
        let (rejected, _) = bob.reject(&id, "not this quarter").await.unwrap();
        assert_eq!(state(&rejected), pb::CallState::Rejected);
        assert_eq!(rejected.rejections[0].principal, "bob");
        assert_eq!(rejected.rejections[0].reason, "not this quarter");
        assert_eq!(
            code(alice.approve(&id, &args).await),
            Code::FailedPrecondition
        );
        assert_eq!(
            code(alice.reject(&id, "again").await),
            Code::FailedPrecondition
        );

        // Only an outcome-unknown call is resolved, and only as succeeded or failed.
        let unspecified = alice
            .resolve(&sly_id, pb::ResolveOutcome::Unspecified)
            .await;
        assert_eq!(code(unspecified), Code::InvalidArgument);
        let pending = alice.resolve(&sly_id, pb::ResolveOutcome::Failed).await;
        assert_eq!(code(pending), Code::FailedPrecondition);

        // Only the call's own chain withdraws it.
        assert_eq!(
            code(alice.cancel(&sly_id, "tidy").await),
            Code::PermissionDenied
        );
        let (cancelled, _) = sly.cancel(&sly_id, "wrong account").await.unwrap();
        assert_eq!(state(&cancelled), pb::CallState::Cancelled);
        let by = cancelled.cancellation.expect("who cancelled");
        assert_eq!(
            (by.principal.as_str(), by.reason.as_str()),
            ("sly", "wrong account")
        );
    });
    Ok(())
}

#[test]
fn another_tenants_calls_do_not_exist() -> anyhow::Result<()> {
    let cluster = setup(&[1])?;
    let id = bot_call(&cluster, 1, 7, 1)?;
    let gina = Approver::on(&cluster, 1, GINA)?;
    let alice = Approver::on(&cluster, 1, ALICE)?;
    let missing = "call_00000000000000000000000000000000";
    cluster.block_on(async {
        let args = alice.get(&id).await.unwrap().args_sha256;
        // Refused exactly as a missing call is: same code, same words but the id.
        let hidden = [
            gina.get(&id).await.map(|_| ()),
            gina.approve(&id, &args).await.map(|_| ()),
            gina.reject(&id, "mine now").await.map(|_| ()),
            gina.cancel(&id, "mine now").await.map(|_| ()),
        ];
        let absent = [
            gina.get(missing).await.map(|_| ()),
            gina.approve(missing, &args).await.map(|_| ()),
            gina.reject(missing, "mine now").await.map(|_| ()),
            gina.cancel(missing, "mine now").await.map(|_| ()),
        ];
        for (hidden, absent) in hidden.into_iter().zip(absent) {
            let (hidden, absent) = (hidden.unwrap_err(), absent.unwrap_err());
            assert_eq!(hidden.code(), Code::NotFound);
            assert_eq!(absent.code(), Code::NotFound);
            assert_eq!(
                hidden.message().replace(&id, "ID"),
                absent.message().replace(missing, "ID")
            );
        }
        // Nor does the tenant, to list or to watch.
        let listed = gina
            .list("acme", pb::CallState::Unspecified, 0, "")
            .await
            .unwrap_err();
        let nowhere = gina
            .list("nowhere", pb::CallState::Unspecified, 0, "")
            .await
            .unwrap_err();
        assert_eq!(listed.code(), Code::NotFound);
        assert_eq!(
            listed.message().replace("acme", "T"),
            nowhere.message().replace("nowhere", "T")
        );
        assert_eq!(code(gina.watch("acme", 0).await), Code::NotFound);
        // And the call is untouched.
        assert_eq!(
            state(&alice.get(&id).await.unwrap()),
            pb::CallState::Pending
        );
    });
    Ok(())
}

#[test]
fn n_of_m_needs_n_distinct_approvers() -> anyhow::Result<()> {
    let cluster = setup(&[1])?;
    let id = bot_call(&cluster, 1, 900, 2)?;
    let alice = Approver::on(&cluster, 1, ALICE)?;
    let bob = Approver::on(&cluster, 1, BOB)?;
    cluster.block_on(async {
        let (first, _) = alice.approve_current(&id).await.unwrap();
        assert_eq!(state(&first), pb::CallState::Pending, "one of two");
        assert_eq!(approvers(&first), ["alice"]);
        assert_eq!(first.required_approvals, 2);
        assert!(first.approval_valid_until_unix_ms.is_none());
        // The same approver twice is still one approval.
        assert_eq!(code(alice.approve_current(&id).await), Code::AlreadyExists);
        let (second, _) = bob.approve_current(&id).await.unwrap();
        assert_ne!(state(&second), pb::CallState::Pending, "two of two");
        assert_eq!(approvers(&second), ["alice", "bob"]);
        assert!(second.approval_valid_until_unix_ms.is_some());
    });
    Ok(())
}

#[test]
fn listing_filters_by_state_and_pages_by_call_id() -> anyhow::Result<()> {
    let cluster = setup(&[1])?;
    let mut ids: Vec<String> = (0..5)
        .map(|i| bot_call(&cluster, 1, i, 1))
        .collect::<anyhow::Result<_>>()?;
    ids.sort();
    let alice = Approver::on(&cluster, 1, ALICE)?;
    cluster.block_on(async {
        alice.reject(&ids[1], "no").await.unwrap();
        let unfinished = alice
            .list_all("acme", pb::CallState::Unspecified, 2)
            .await
            .unwrap();
        let expected: Vec<String> = ids.iter().filter(|id| **id != ids[1]).cloned().collect();
        assert_eq!(
            unfinished, expected,
            "every unfinished call once, in id order"
        );
        let rejected = alice
            .list_all("acme", pb::CallState::Rejected, 0)
            .await
            .unwrap();
        assert_eq!(rejected, [ids[1].clone()]);
        let pages = alice
            .list("acme", pb::CallState::Pending, 2, "")
            .await
            .unwrap();
        assert_eq!(pages.calls.len(), 2);
        assert_eq!(pages.next_page_token, pages.calls[1].call_id);
        assert_eq!(
            code(alice.list("", pb::CallState::Unspecified, 0, "").await),
            Code::InvalidArgument
        );
    });
    Ok(())
}

/// An event as the test compares it: what happened to which call, or a resync of n calls.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Change(pb::ChangeKind, String, pb::CallState),
    Resync(u64),
}

fn seen(event: &pb::ApprovalEvent) -> Seen {
    use pb::approval_event::Event;
    match event.event.as_ref().expect("an event") {
        Event::Change(change) => {
            let call = change.call.as_ref().expect("a record");
            Seen::Change(
                pb::ChangeKind::try_from(change.kind).expect("a known kind"),
                call.call_id.clone(),
                state(call),
            )
        }
        Event::Resync(resync) => Seen::Resync(resync.calls),
    }
}

/// The next `n` events, each with its index.
async fn events(
    stream: &mut tonic::Streaming<pb::ApprovalEvent>,
    n: usize,
) -> anyhow::Result<Vec<(u64, Seen)>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let event = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .map_err(|_| anyhow::anyhow!("no event within 20 s after {out:?}"))??
            .ok_or_else(|| anyhow::anyhow!("the stream ended after {out:?}"))?;
        out.push((event.index, seen(&event)));
    }
    Ok(out)
}

/// Nothing more arrives for a while.
async fn quiet(stream: &mut tonic::Streaming<pb::ApprovalEvent>) {
    let more = tokio::time::timeout(Duration::from_millis(500), stream.message()).await;
    assert!(more.is_err(), "unexpected: {more:?}");
}

fn without_index(events: &[(u64, Seen)]) -> Vec<Seen> {
    events.iter().map(|(_, s)| s.clone()).collect()
}

#[test]
fn watchers_see_every_change_once_across_a_leader_change() -> anyhow::Result<()> {
    use pb::CallState::{Cancelled, Pending, Rejected};
    use pb::ChangeKind::{Added, Changed, Removed};
    let mut cluster = setup(&[1, 2, 3])?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != leader).collect();
    let (watched, spare) = (others[0], others[1]);
    let alice = Approver::on(&cluster, watched, ALICE)?;
    let bob = Approver::on(&cluster, spare, BOB)?;
    let bot = Approver::on(&cluster, watched, BOT)?;

    // A watch from 0 on a follower starts with the pending set and the resync marker.
    let early = bot_call(&cluster, leader, 1, 2)?;
    cluster.wait_converged(cluster.max_applied(), Duration::from_secs(10))?;
    let mut first = cluster.block_on(alice.watch("acme", 0))?;
    let start = cluster.block_on(events(&mut first, 2))?;
    assert_eq!(
        without_index(&start),
        [Seen::Change(Added, early.clone(), Pending), Seen::Resync(1)]
    );
    assert_eq!(
        start[0].0, start[1].0,
        "the resend is as of the marker's index"
    );

    // Added, changed, removed, as they commit, at their log indices.
    let (c1, c1_at) = propose(
        &cluster,
        leader,
        new_call("bot", Some("john"), serde_json::json!({"n": 1}), 2),
    )?;
    let (_, approved_at) = cluster.block_on(alice.approve_current(&c1))?;
    let (_, rejected_at) = cluster.block_on(bob.reject(&c1, "duplicate"))?;
    let (c2, c2_at) = propose(
        &cluster,
        watched,
        new_call("bot", Some("john"), serde_json::json!({"n": 2}), 2),
    )?;
    let (_, cancelled_at) = cluster.block_on(bot.cancel(&early, "superseded"))?;
    let live = cluster.block_on(events(&mut first, 5))?;
    assert_eq!(
        live,
        [
            (c1_at, Seen::Change(Added, c1.clone(), Pending)),
            (approved_at, Seen::Change(Changed, c1.clone(), Pending)),
            (rejected_at, Seen::Change(Removed, c1.clone(), Rejected)),
            (c2_at, Seen::Change(Added, c2.clone(), Pending)),
            (
                cancelled_at,
                Seen::Change(Removed, early.clone(), Cancelled)
            ),
        ]
    );
    cluster.block_on(quiet(&mut first));
    let last = cancelled_at;
    drop(first);

    // One watcher stays connected through the leader change; the others resume afterwards.
    let mut through = cluster.block_on(alice.watch("acme", last))?;
    cluster.kill(leader);
    let new_leader = cluster.leader(Duration::from_secs(10))?;
    assert_ne!(new_leader, leader);
    let (c3, c3_at) = propose(
        &cluster,
        spare,
        new_call("bot", Some("john"), serde_json::json!({"n": 3}), 2),
    )?;
    let (_, approved_at) = cluster.block_on(alice.approve_current(&c2))?;
    let (_, c2_cancelled_at) = cluster.block_on(bot.cancel(&c2, "done by hand"))?;
    let (_, c3_rejected_at) = cluster.block_on(bob.reject(&c3, "no"))?;
    let expected = vec![
        (c3_at, Seen::Change(Added, c3.clone(), Pending)),
        (approved_at, Seen::Change(Changed, c2.clone(), Pending)),
        (
            c2_cancelled_at,
            Seen::Change(Removed, c2.clone(), Cancelled),
        ),
        (c3_rejected_at, Seen::Change(Removed, c3.clone(), Rejected)),
    ];
    assert_eq!(cluster.block_on(events(&mut through, 4))?, expected);
    cluster.block_on(quiet(&mut through));

    cluster.wait_converged(c3_rejected_at, Duration::from_secs(10))?;
    for node in [watched, spare] {
        let mut resumed =
            cluster.block_on(Approver::on(&cluster, node, BOB)?.watch("acme", last))?;
        assert_eq!(
            cluster.block_on(events(&mut resumed, 4))?,
            expected,
            "resumed on node {node}"
        );
        cluster.block_on(quiet(&mut resumed));
    }
    // From 0 again: nothing waits, and the marker says so.
    let mut fresh = cluster.block_on(bob.watch("acme", 0))?;
    let resync = cluster.block_on(events(&mut fresh, 1))?;
    assert_eq!(without_index(&resync), [Seen::Resync(0)]);
    Ok(())
}

#[test]
fn a_watcher_on_a_node_that_installs_a_snapshot_resyncs() -> anyhow::Result<()> {
    use pb::CallState::{Cancelled, Pending};
    use pb::ChangeKind::{Added, Removed};
    // Snapshots every 10 entries, no log kept behind them: a follower cut off while 30 entries
    // commit can only catch up from a snapshot, which applies without events.
    let timings = gatehouse_node::config::RaftTimings {
        logs_kept_after_snapshot: 0,
        ..gatehouse_tests::fast_timings(10)
    };
    let cluster = TestCluster::with_timings(&[1, 2, 3], timings)?;
    let leader = cluster.leader(Duration::from_secs(10))?;
    let admin = cluster.admin(leader);
    let index = cluster.block_on(admin.apply(vec![
        resource("Tenant", "acme", None, serde_json::json!({})),
        // bot acts for john, as the calls `bot_call` makes say.
        principal(
            "bot",
            BOT,
            serde_json::json!({"acme": ["agent"]}),
            Some("john"),
        ),
        principal(
            "alice",
            ALICE,
            serde_json::json!({"acme": ["approver"]}),
            None,
        ),
    ]))?;
    cluster.wait_converged(index, Duration::from_secs(10))?;
    let cut = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let rest: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != cut).collect();

    let k1 = bot_call(&cluster, leader, 1, 1)?;
    cluster.wait_converged(cluster.max_applied(), Duration::from_secs(10))?;
    let alice = Approver::on(&cluster, cut, ALICE)?;
    let mut stream = cluster.block_on(alice.watch("acme", 0))?;
    let start = cluster.block_on(events(&mut stream, 2))?;
    assert_eq!(
        without_index(&start),
        [Seen::Change(Added, k1.clone(), Pending), Seen::Resync(1)]
    );

    cluster.router().partition(&[cut], &rest);
    let bot = Approver::on(&cluster, leader, BOT)?;
    cluster.block_on(bot.cancel(&k1, "superseded"))?;
    let call = new_call("bot", None, serde_json::json!({"amount": 2}), 1);
    let (k2, _) = propose_through(&cluster, leader, call)?;
    for i in 0..30 {
        cluster.block_on(admin.put_tenant(&format!("filler-{i}")))?;
    }
    cluster.wait_until("the leader purges its log", Duration::from_secs(10), |c| {
        c.purged_index(leader).is_some_and(|p| p > index + 2)
    })?;
    cluster.router().heal();
    let now = cluster.block_on(admin.put_tenant("after-heal"))?;
    cluster.wait_converged(now, Duration::from_secs(20))?;

    // The watcher learns what it missed as a resync: what finished, then what waits.
    let resync = cluster.block_on(events(&mut stream, 3))?;
    assert_eq!(
        without_index(&resync),
        [
            Seen::Change(Removed, k1, Cancelled),
            Seen::Change(Added, k2, Pending),
            Seen::Resync(1),
        ]
    );
    assert!(resync.iter().all(|(i, _)| *i == resync[2].0));
    cluster.block_on(quiet(&mut stream));
    Ok(())
}

#[test]
fn a_watcher_whose_approver_role_is_taken_away_is_cut_off() -> anyhow::Result<()> {
    let cluster = setup(&[1])?;
    let bob = Approver::on(&cluster, 1, BOB)?;
    let mut stream = cluster.block_on(bob.watch("acme", 0))?;
    cluster.block_on(events(&mut stream, 1))?; // the (empty) resync marker

    let index = cluster.block_on(cluster.admin(1).apply(vec![principal(
        "bob",
        BOB,
        serde_json::json!({"acme": ["agent"]}),
        None,
    )]))?;
    cluster.wait_for_applied(1, index, Duration::from_secs(10))?;
    bot_call(&cluster, 1, 1, 1)?;
    let cut = cluster.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), stream.message()).await
    })?;
    assert_eq!(
        cut.expect_err("the stream ends").code(),
        Code::PermissionDenied
    );
    Ok(())
}

/// A node behind the cluster (cut off while a call was proposed) never answers that the call
/// does not exist: cut off, it says to retry (UNAVAILABLE); healed, the same request to the same
/// node catches up and answers, with no NOT_FOUND on the way; and it decides the call.
#[test]
fn a_leader_cut_off_never_says_a_call_made_after_it_does_not_exist() -> anyhow::Result<()> {
    let cluster = setup(&[1, 2, 3])?;
    let old = cluster.leader(Duration::from_secs(10))?;
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != old).collect();
    cluster.router().partition(&[old], &others);
    // The others elect a leader and take a call the old one never hears of, while it still
    // takes itself for the leader.
    let new = cluster.wait_until(
        "a new leader among the others",
        Duration::from_secs(20),
        |c| {
            others.iter().all(|id| {
                let leader = c.node(*id).cluster.raft.metrics().borrow().current_leader;
                leader.is_some_and(|l| l != old)
            })
        },
    );
    new?;
    let leader = cluster
        .node(others[0])
        .cluster
        .raft
        .metrics()
        .borrow()
        .current_leader;
    let leader = leader.expect("a new leader");
    let call = new_call("bot", Some("john"), serde_json::json!({"amount": 9}), 1);
    let (id, _) = propose_through(&cluster, leader, call)?;

    let alice = Approver::on(&cluster, old, ALICE)?;
    let stale = cluster
        .block_on(alice.get(&id))
        .expect_err("the old leader does not hold the call");
    assert_eq!(stale.code(), Code::Unavailable, "{stale:?}");
    cluster.router().heal();
    Ok(())
}

/// A three-node cluster's leader, one follower cut off from the others, and the others.
struct CutOff {
    leader: u64,
    behind: u64,
    others: Vec<u64>,
}

fn cut_off_a_follower(cluster: &TestCluster) -> anyhow::Result<CutOff> {
    let leader = cluster.leader(Duration::from_secs(10))?;
    let behind = [1, 2, 3]
        .into_iter()
        .find(|id| *id != leader)
        .expect("a follower");
    let others: Vec<u64> = [1, 2, 3].into_iter().filter(|id| *id != behind).collect();
    cluster.router().partition(&[behind], &others);
    Ok(CutOff {
        leader,
        behind,
        others,
    })
}

#[test]
fn a_node_behind_never_says_an_existing_call_does_not_exist() -> anyhow::Result<()> {
    let cluster = setup(&[1, 2, 3])?;
    let CutOff {
        leader,
        behind,
        others,
    } = cut_off_a_follower(&cluster)?;
    let call = new_call("bot", Some("john"), serde_json::json!({"amount": 7}), 1);
    let (id, index) = propose_through(&cluster, leader, call)?;
    for node in &others {
        cluster.wait_for_applied(*node, index, Duration::from_secs(10))?;
    }

    let alice = Approver::on(&cluster, behind, ALICE)?;
    let cut_off = cluster
        .block_on(alice.get(&id))
        .expect_err("the node does not hold the call");
    assert_eq!(cut_off.code(), Code::Unavailable, "{cut_off:?}");
    assert!(cut_off.message().contains("retry"), "{cut_off:?}");
    let refused = cluster
        .block_on(alice.approve(&id, &sha256_hex(br#"{"amount":7}"#)))
        .expect_err("nor can it decide it");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    cluster.router().heal();
    let mut answers = Vec::new();
    cluster.wait_until(
        "the healed node answers for the call",
        Duration::from_secs(20),
        |c| {
            let answer = c.block_on(alice.get(&id)).map(|call| call.call_id);
            let done = answer.is_ok();
            answers.push(answer.map_err(|status| status.code()));
            done
        },
    )?;
    assert!(
        answers.iter().all(|a| *a != Err(Code::NotFound)),
        "{answers:?}"
    );
    let (call, _) = cluster.block_on(alice.approve_current(&id))?;
    assert_eq!(approvers(&call), ["alice"]);
    // A call that exists nowhere is still NOT_FOUND, once the node has caught up.
    assert_eq!(
        code(cluster.block_on(alice.get("call_nowhere"))),
        Code::NotFound
    );
    Ok(())
}

/// A principal declared while a node was cut off is not "unknown" there: cut off, the node says
/// to retry (UNAVAILABLE), since the key may well be good; healed, the same request to the same
/// node catches up and is authenticated, with no UNAUTHENTICATED on the way. A key that exists
/// nowhere is still UNAUTHENTICATED on a node that can check.
#[test]
fn a_node_behind_never_calls_a_key_declared_elsewhere_unknown() -> anyhow::Result<()> {
    const DORA: &str = "gate_dora-key-00000000000000000000000";
    const EVE: &str = "gate_eve-key-000000000000000000000000";
    let cluster = setup(&[1, 2, 3])?;
    let CutOff {
        leader,
        behind,
        others,
    } = cut_off_a_follower(&cluster)?;
    let index = cluster.block_on(cluster.admin(leader).apply(vec![
        principal(
            "dora",
            DORA,
            serde_json::json!({"acme": ["approver"]}),
            None,
        ),
        principal("eve", EVE, serde_json::json!({"acme": ["agent"]}), None),
    ]))?;
    for node in &others {
        cluster.wait_for_applied(*node, index, Duration::from_secs(10))?;
    }

    let dora = Approver::on(&cluster, behind, DORA)?;
    let cut_off = cluster
        .block_on(dora.get("call_nowhere"))
        .expect_err("the node cannot check the key");
    assert_eq!(cut_off.code(), Code::Unavailable, "{cut_off:?}");
    assert!(cut_off.message().contains("retry"), "{cut_off:?}");
    // The A2A gRPC binding's door says the same to an A2A peer.
    let a2a_cut_off = cluster
        .block_on(a2a_get_task(&cluster, behind, EVE, "call_nowhere"))
        .expect_err("the node cannot check the key");
    assert_eq!(a2a_cut_off.code(), Code::Unavailable, "{a2a_cut_off:?}");
    assert!(a2a_cut_off.message().contains("retry"), "{a2a_cut_off:?}");

    cluster.router().heal();
    let mut answers = Vec::new();
    cluster.wait_until(
        "the healed node authenticates the key",
        Duration::from_secs(20),
        |c| {
            let code = code(c.block_on(dora.get("call_nowhere")));
            answers.push(code);
            // Authenticated: the call it asked for does not exist.
            code == Code::NotFound
        },
    )?;
    assert!(
        answers.iter().all(|code| *code != Code::Unauthenticated),
        "{answers:?}"
    );
    let stranger = Approver::on(&cluster, behind, "gate_nobody-key-000000000000000000000")?;
    assert_eq!(
        code(cluster.block_on(stranger.get("call_nowhere"))),
        Code::Unauthenticated
    );
    // Healed and caught up: the peer is let in, and told there is no such task.
    let after = cluster.block_on(a2a_get_task(&cluster, behind, EVE, "call_nowhere"));
    assert_eq!(code(after.clone()), Code::NotFound, "{after:?}");
    assert_eq!(
        code(cluster.block_on(a2a_get_task(
            &cluster,
            behind,
            "gate_nobody-key-000000000000000000000",
            "call_nowhere"
        ))),
        Code::Unauthenticated
    );
    Ok(())
}

/// `lf.a2a.v1.A2AService/GetTask` on `node`, as the principal holding `key`.
async fn a2a_get_task(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    task: &str,
) -> Result<a2a_pb::proto::Task, tonic::Status> {
    let channel = Channel::from_shared(format!("http://{}", cluster.addr(node)))
        .expect("a URL")
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = a2a_pb::proto::a2a_service_client::A2aServiceClient::new(channel);
    let mut request = tonic::Request::new(a2a_pb::proto::GetTaskRequest {
        id: task.to_owned(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {key}").parse().expect("ascii key"),
    );
    request
        .metadata_mut()
        .insert("a2a-version", "1.0".parse().expect("ascii"));
    client
        .get_task(request)
        .await
        .map(tonic::Response::into_inner)
}
