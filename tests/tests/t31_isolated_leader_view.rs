//! Issue: a leader that acknowledged calls and their approvals, was cut off while the others
//! claimed, completed and decided them, and came back, listed a queue that had gone back in time
//! at the same applied index as the others (calls missing, a rejected call pending), while its
//! data directory, restarted, listed what the others did.
//!
//! The sequence, a few rounds over one cluster: through the leader, calls proposed and approved
//! twice (N of M = 2) and one rejected; the leader cut off at once, with writes of its own in
//! flight; through the new leader the approved calls claimed and completed at the upstream, one
//! call rejected and one withdrawn; healed. Then every node, at one applied index, lists every
//! call of the tenant through the real `ApprovalService.ListPending`, state by state in pages of
//! two, and each listing must be the others', the node's own registry's, and what a registry
//! rebuilt from the node's state (as at a restart) lists.

use anyhow::{Context, bail, ensure};
use gatehouse_fronts::services::convert::call_record_to;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::{CallState, Registry};
use gatehouse_tests::TestCluster;
use gatehouse_tests::flow::{
    self, ACME, Approvals, BOT, CAROL, DAVE, DROP_TABLE, approve, propose, record_on, table,
};
use std::collections::BTreeMap;
use std::time::Duration;

const ROUNDS: usize = 3;
/// Calls approved through the leader each round, right before it is cut off.
const APPROVED: usize = 5;
/// Small, so that every listing takes several pages.
const PAGE: u32 = 2;
/// Long enough for an election, a lost home's replacement and a claim on a loaded machine.
const FAILOVER: Duration = Duration::from_secs(30);
/// How long a write sent into the cut-off leader is waited for: it cannot commit there.
const IN_FLIGHT: Duration = Duration::from_secs(1);

/// Every state a listing can be asked for; `Unspecified` lists the unfinished calls.
const STATES: [pb::CallState; 10] = [
    pb::CallState::Unspecified,
    pb::CallState::Pending,
    pb::CallState::Approved,
    pb::CallState::Rejected,
    pb::CallState::Cancelled,
    pb::CallState::Expired,
    pb::CallState::Executing,
    pb::CallState::Succeeded,
    pb::CallState::Failed,
    pb::CallState::OutcomeUnknown,
];

/// A node's queue of acme, per state asked for: the records in the order they came.
type Listing = Vec<(pb::CallState, Vec<pb::CallRecord>)>;

#[test]
fn a_leader_cut_off_after_acknowledging_lists_what_the_others_list_once_healed()
-> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let (mut cluster, flow) = flow::start(Approvals {
        required: 2,
        ttl_seconds: None,
    })?;
    // Every call this test finished while a leader was cut off, with the state it ended in.
    let mut finished: BTreeMap<String, CallState> = BTreeMap::new();
    let mut last_cut = 0;
    for round in 0..ROUNDS {
        flow::wait_settled(&cluster, ACME, FAILOVER)?;
        let leader = cluster.leader(FAILOVER)?;
        let others: Vec<u64> = cluster
            .running()
            .into_iter()
            .filter(|id| *id != leader)
            .collect();

        // Acknowledged by the leader: applied there before each answer.
        let mut approved = Vec::new();
        for i in 0..APPROVED {
            let id = propose(
                &cluster,
                leader,
                DROP_TABLE,
                &table(&format!("r{round}-{i}")),
            )?;
            approve(&cluster, leader, CAROL, &id)?;
            let both = approve(&cluster, leader, DAVE, &id)?;
            ensure!(
                both.state != pb::CallState::Pending as i32,
                "two approvals of two left {id} pending: {both:?}"
            );
            approved.push(id);
        }
        let vetoed = propose(
            &cluster,
            leader,
            DROP_TABLE,
            &table(&format!("r{round}-veto")),
        )?;
        let answer = reject(&cluster, leader, CAROL, &vetoed)?;
        ensure!(answer.state == pb::CallState::Rejected as i32, "{answer:?}");
        let waiting = propose(
            &cluster,
            leader,
            DROP_TABLE,
            &table(&format!("r{round}-wait")),
        )?;

        // Cut off at once, with writes of its own in flight that cannot commit there: a
        // decision and a new call. Either may commit after the heal, through the new leader.
        cluster.router().partition(&[leader], &others);
        last_cut = leader;
        let reviewed = flow::get(&cluster, leader, CAROL, &waiting)?;
        let mut carol = flow::approvals(&cluster, leader, CAROL);
        let decided = in_flight(
            &cluster,
            carol.approve(pb::ApproveCallRequest {
                call_id: waiting.clone(),
                args_sha256: reviewed.args_sha256,
                reason: "reviewed".into(),
            }),
        );
        ensure!(
            !matches!(decided, Some(Ok(_))),
            "the cut-off leader committed an approval: {decided:?}"
        );
        let mut bot = flow::gateway(&cluster, leader, BOT);
        let extra = in_flight(
            &cluster,
            bot.call_tool(pb::CallToolRequest {
                tenant: ACME.into(),
                tool: DROP_TABLE.into(),
                arguments_json: table(&format!("r{round}-cut")).to_string(),
                idempotency_key: None,
            }),
        );
        ensure!(
            !matches!(extra, Some(Ok(_))),
            "the cut-off leader committed a call: {extra:?}"
        );

        // Through the new leader: the approved calls claimed and completed at the upstream (a
        // call the cut-off home had claimed ends unknown and is resolved), one call rejected,
        // one withdrawn by its agent.
        let new_leader = leader_among(&cluster, &others)?;
        let answer = reject(&cluster, new_leader, DAVE, &waiting)?;
        ensure!(answer.state == pb::CallState::Rejected as i32, "{answer:?}");
        let withdrawn = propose(
            &cluster,
            new_leader,
            DROP_TABLE,
            &table(&format!("r{round}-w")),
        )?;
        let answer = cancel(&cluster, new_leader, BOT, &withdrawn)?;
        ensure!(
            answer.state == pb::CallState::Cancelled as i32,
            "{answer:?}"
        );
        let settled = |c: &TestCluster, id: &String| {
            record_on(c, new_leader, id)
                .is_some_and(|r| r.state.is_finished() || r.state == CallState::OutcomeUnknown)
        };
        cluster.wait_until("the approved calls ended", FAILOVER, |c| {
            approved.iter().all(|id| settled(c, id))
        })?;
        let mut resolved = 0;
        for id in &approved {
            let call = record_on(&cluster, new_leader, id).context("the call")?;
            if call.state == CallState::OutcomeUnknown {
                resolved += 1;
                flow::resolve(
                    &cluster,
                    new_leader,
                    CAROL,
                    id,
                    pb::ResolveOutcome::Succeeded,
                    "the upstream's log shows it ran",
                )?;
            }
        }
        cluster.wait_until("the approved calls finished", FAILOVER, |c| {
            approved
                .iter()
                .all(|id| record_on(c, new_leader, id).is_some_and(|r| r.state.is_finished()))
        })?;
        for id in approved.iter().chain([&vetoed, &waiting, &withdrawn]) {
            let call = record_on(&cluster, new_leader, id).context("the call")?;
            if call.claim.is_some() {
                flow::wait_invoked(&flow, id, 1, FAILOVER)?;
            }
            finished.insert(id.clone(), call.state);
        }
        ensure!(
            approved
                .iter()
                .all(|id| finished[id] == CallState::Succeeded),
            "every approved call ran: {finished:?}"
        );
        ensure!(finished[&vetoed] == CallState::Rejected);
        ensure!(finished[&waiting] == CallState::Rejected);
        ensure!(finished[&withdrawn] == CallState::Cancelled);
        ensure!(
            record_on(&cluster, leader, &withdrawn).is_none(),
            "the cut-off leader learned of a call proposed after it was cut off"
        );

        cluster.router().heal();
        let (index, calls) = compare_at_one_index(&cluster, &finished)?;
        println!(
            "round {round}: leader {leader} cut off, {new_leader} led ({resolved} call(s) left \
             unknown and resolved); healed, every node lists the same {calls} calls at applied \
             index {index}"
        );
    }

    // The node cut off last, restarted from its data directory, lists what the others list.
    cluster.kill(last_cut);
    cluster.restart(last_cut)?;
    let (index, calls) = compare_at_one_index(&cluster, &finished)?;
    println!("node {last_cut} restarted: every node lists the same {calls} calls at {index}");
    println!("{ROUNDS} rounds in {:?}", started.elapsed());
    Ok(())
}

/// Sends a request the cut-off leader cannot complete and waits `IN_FLIGHT` for it; `None`
/// when it did not answer in time. The node goes on with it after its client gives up.
fn in_flight<T>(
    cluster: &TestCluster,
    request: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Option<Result<T, tonic::Status>> {
    cluster
        .block_on(async { tokio::time::timeout(IN_FLIGHT, request).await })
        .ok()
        .map(|answer| answer.map(tonic::Response::into_inner))
}

/// The leader the nodes of `majority` agree on, one of them.
fn leader_among(cluster: &TestCluster, majority: &[u64]) -> anyhow::Result<u64> {
    let mut agreed = None;
    cluster.wait_until("a leader among the majority", FAILOVER, |c| {
        let views: Vec<Option<u64>> = majority
            .iter()
            .map(|id| c.node(*id).cluster.raft.metrics().borrow().current_leader)
            .collect();
        agreed = views[0].filter(|l| majority.contains(l) && views.iter().all(|v| *v == Some(*l)));
        agreed.is_some()
    })?;
    agreed.context("no leader")
}

fn reject(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
) -> anyhow::Result<pb::CallRecord> {
    let mut client = flow::approvals(cluster, node, key);
    let request = pb::RejectCallRequest {
        call_id: call_id.into(),
        reason: "not now".into(),
    };
    let answer = cluster.block_on(client.reject(request))?.into_inner();
    answer.call.context("a Reject answer without a record")
}

fn cancel(
    cluster: &TestCluster,
    node: u64,
    key: &str,
    call_id: &str,
) -> anyhow::Result<pb::CallRecord> {
    let mut client = flow::approvals(cluster, node, key);
    let request = pb::CancelCallRequest {
        call_id: call_id.into(),
        reason: "asked twice".into(),
    };
    let answer = cluster.block_on(client.cancel(request))?.into_inner();
    answer.call.context("a Cancel answer without a record")
}

/// Every call of acme as `node`'s `ListPending` answers an approver: state by state, every page.
fn listing(cluster: &TestCluster, node: u64) -> anyhow::Result<Listing> {
    let mut client = flow::approvals(cluster, node, CAROL);
    let mut listing = Vec::new();
    for state in STATES {
        let mut records: Vec<pb::CallRecord> = Vec::new();
        let mut token = String::new();
        loop {
            let request = pb::ListCallsRequest {
                tenant: ACME.into(),
                state: state as i32,
                page_size: PAGE,
                page_token: token.clone(),
                tool: String::new(),
                mode: pb::ApprovalMode::Unspecified as i32,
            };
            let page = cluster
                .block_on(client.list_pending(request))
                .with_context(|| format!("listing {state:?} on node {node}"))?
                .into_inner();
            ensure!(page.calls.len() <= PAGE as usize, "a page past its size");
            records.extend(page.calls);
            if page.next_page_token.is_empty() {
                break;
            }
            ensure!(
                page.next_page_token > token,
                "node {node}'s pages of {state:?} go back: {token:?} then {:?}",
                page.next_page_token
            );
            token = page.next_page_token;
        }
        listing.push((state, records));
    }
    Ok(listing)
}

/// What a listing of `registry` holds, state by state, in the service's order (by id).
fn listing_of(registry: &Registry) -> Listing {
    STATES
        .iter()
        .map(|&state| {
            let records = registry
                .calls_of(ACME)
                .filter(|c| {
                    let wire = wire_state(c.state);
                    match state {
                        pb::CallState::Unspecified => !c.state.is_finished(),
                        s => wire == s,
                    }
                })
                .map(call_record_to)
                .collect();
            (state, records)
        })
        .collect()
}

fn wire_state(state: CallState) -> pb::CallState {
    gatehouse_fronts::services::convert::call_state_to(state)
}

fn ids_and_states(listing: &Listing) -> Vec<(pb::CallState, String, i32)> {
    listing
        .iter()
        .flat_map(|(asked, records)| records.iter().map(|r| (*asked, r.call_id.clone(), r.state)))
        .collect()
}

/// What each node has applied.
fn applied(cluster: &TestCluster) -> BTreeMap<u64, u64> {
    cluster
        .running()
        .into_iter()
        .map(|id| (id, cluster.applied(id)))
        .collect()
}

/// Waits until every node has applied the same index with the same digest; then, while no node
/// applies anything more, lists every node's queue and compares the listings with each other,
/// with the node's registry, and with a registry rebuilt from the node's state. Each call in
/// `finished` must be listed in its state everywhere. The index and the number of calls listed.
fn compare_at_one_index(
    cluster: &TestCluster,
    finished: &BTreeMap<String, CallState>,
) -> anyhow::Result<(u64, usize)> {
    let deadline = std::time::Instant::now() + FAILOVER;
    loop {
        cluster.wait_converged(cluster.max_applied(), FAILOVER)?;
        let before = applied(cluster);
        let index = *before.values().next().context("no node runs")?;
        if before.values().any(|a| *a != index) {
            ensure!(
                std::time::Instant::now() < deadline,
                "applied indexes differ: {before:?}"
            );
            continue;
        }
        let mut listings = BTreeMap::new();
        let mut views = BTreeMap::new();
        let mut digests = BTreeMap::new();
        for id in cluster.running() {
            listings.insert(id, listing(cluster, id)?);
            let registry = cluster.node(id).cluster.registry.read();
            let rebuilt = Registry::from_bytes(&registry.to_bytes())?;
            ensure!(
                rebuilt == *registry,
                "node {id}'s registry differs from one rebuilt from its own state at {index}"
            );
            views.insert(id, (listing_of(&registry), listing_of(&rebuilt)));
            digests.insert(id, registry.digest());
        }
        if applied(cluster) != before {
            // Something committed while the nodes were listed: list again at the next index.
            ensure!(
                std::time::Instant::now() < deadline,
                "the nodes never stood still"
            );
            continue;
        }

        let (&first, expected) = listings.iter().next().context("no listing")?;
        for (id, listed) in &listings {
            let (live, rebuilt) = &views[id];
            if listed != live || listed != rebuilt {
                bail!(
                    "node {id} at applied index {index} lists {:?}\nits registry holds {:?}\n\
                     rebuilt from its state {:?}",
                    ids_and_states(listed),
                    ids_and_states(live),
                    ids_and_states(rebuilt)
                );
            }
            if listed != expected {
                bail!(
                    "at applied index {index} node {id} lists {:?}\nnode {first} lists {:?}",
                    ids_and_states(listed),
                    ids_and_states(expected)
                );
            }
            ensure!(
                digests[id] == digests[&first],
                "digests differ at {index}: {digests:?}"
            );
            for (call, state) in finished {
                let asked = wire_state(*state);
                let found = listed
                    .iter()
                    .filter(|(s, _)| *s == asked)
                    .flat_map(|(_, records)| records)
                    .any(|r| r.call_id == *call && r.state == asked as i32);
                ensure!(
                    found,
                    "node {id} does not list {call} as {state:?} at {index}"
                );
            }
        }
        let calls = expected
            .iter()
            .filter(|(s, _)| *s != pb::CallState::Unspecified)
            .map(|(_, records)| records.len())
            .sum();
        return Ok((index, calls));
    }
}
