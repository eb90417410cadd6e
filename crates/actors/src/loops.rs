//! The node's two background loops. The listener turns applied entries into notes to the tenant
//! actors they concern (starting the home's actor when a tenant moves here or a call of it is
//! approved) and sweeps now and then for anything missed. The leader's loop places tenants and
//! purges old calls; on other nodes it does nothing.

use crate::clock::now_ms;
use crate::placement::{TenantView, next_step};
use crate::shared::Shared;
use crate::supervisor::SupervisorMsg;
use gatehouse_raft_store::AppliedEntry;
use gatehouse_registry::Command;
use gatehouse_registry::call::{CallState, NodeId};
use ractor::ActorRef;
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, PoisonError};
use tokio::sync::{broadcast, watch};

pub(crate) async fn listen(
    shared: Arc<Shared>,
    supervisor: ActorRef<SupervisorMsg>,
    mut events: broadcast::Receiver<AppliedEntry>,
    mut stop: watch::Receiver<bool>,
) {
    let mut sweep = tokio::time::interval(shared.settings.review_every);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(applied) => route(&shared, &supervisor, &applied),
                Err(broadcast::error::RecvError::Lagged(_)) => sweep_homes(&shared, &supervisor),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sweep.tick() => sweep_homes(&shared, &supervisor),
            _ = stop.changed() => return,
        }
    }
}

/// The tenants an applied entry concerns: those of the calls it changed and those it placed.
fn route(shared: &Shared, supervisor: &ActorRef<SupervisorMsg>, applied: &AppliedEntry) {
    let mut tenants: BTreeSet<&str> = applied
        .calls
        .iter()
        .map(|c| c.spec.tenant.as_str())
        .collect();
    placed(&applied.proposal.command, &mut tenants);
    if tenants.is_empty() {
        return;
    }
    let registry = shared
        .registry
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    for tenant in tenants {
        let home = registry
            .placement(tenant)
            .is_some_and(|p| p.home == shared.node);
        let _ = supervisor.cast(SupervisorMsg::Notify {
            tenant: tenant.to_owned(),
            spawn: home,
        });
    }
}

fn placed<'a>(command: &'a Command, into: &mut BTreeSet<&'a str>) {
    match command {
        Command::Place { tenant, .. } | Command::Handover { tenant, .. } => {
            into.insert(tenant);
        }
        Command::Batch { proposals } => {
            for p in proposals {
                placed(&p.command, into);
            }
        }
        _ => {}
    }
}

/// Every tenant this node is home to that has unfinished calls gets a look: covers a restart,
/// a lagging listener, and an installed snapshot, none of which come as events.
fn sweep_homes(shared: &Shared, supervisor: &ActorRef<SupervisorMsg>) {
    let registry = shared
        .registry
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    let busy: HashSet<&str> = registry
        .unfinished_calls()
        .map(|c| c.spec.tenant.as_str())
        .collect();
    for (tenant, placement) in registry.placements() {
        if placement.home == shared.node && busy.contains(tenant) {
            let _ = supervisor.cast(SupervisorMsg::Notify {
                tenant: tenant.to_owned(),
                spawn: true,
            });
        }
    }
}

/// Most placement steps one review proposes: a bulk load of tenants is placed over several
/// reviews rather than in one flood.
const STEPS_PER_REVIEW: usize = 1024;

pub(crate) async fn lead(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut review = tokio::time::interval(shared.settings.review_every);
    let mut last_purge = now_ms();
    let mut leader_since: Option<std::time::Instant> = None;
    let mut last_view: Option<VoterView> = None;
    loop {
        tokio::select! {
            _ = review.tick() => {}
            _ = stop.changed() => return,
        }
        if !shared.cluster.is_leader() {
            leader_since = None;
            last_view = None;
            continue;
        }
        // A new leader has heard only from the voters that answered its election; it gives the
        // others one full window before it calls anyone unreachable.
        let since = *leader_since.get_or_insert_with(std::time::Instant::now);
        let settled = since.elapsed() >= shared.settings.home_unreachable_after;
        let view = voter_view(&shared, settled);
        let changed = last_view.as_ref() != Some(&view);
        let steps = placement_steps(&shared, &view, changed);
        // A review cut short by the step limit looks at everything again next time.
        let complete = steps.len() < STEPS_PER_REVIEW;
        // Proposed together, so the node's batcher writes them as few log entries.
        let results =
            futures::future::join_all(steps.into_iter().map(|step| shared.cluster.propose(step)))
                .await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        if failed > 0 {
            tracing::debug!(failed, "placement steps not taken; the next review retries");
        } else if complete {
            last_view = Some(view);
        }
        let now = now_ms();
        if now.saturating_sub(last_purge) >= shared.settings.purge_every.as_millis() as u64 {
            last_purge = now;
            let before = now.saturating_sub(shared.settings.retention.as_millis() as u64);
            match shared.cluster.propose(Command::Purge { before }).await {
                Ok(response) => tracing::info!(?response, "purged"),
                Err(e) => tracing::warn!(error = %e, "purge not taken"),
            }
        }
    }
}

/// The voters and which of them the leader counts as reachable: while it is unchanged, a tenant
/// placed at its rightful home stays there, and only tenants with work need a look.
#[derive(Debug, Clone, PartialEq, Eq)]
struct VoterView {
    voters: Vec<NodeId>,
    reachable: Vec<NodeId>,
}

fn voter_view(shared: &Shared, settled: bool) -> VoterView {
    let window = shared.settings.home_unreachable_after;
    let voters = shared.cluster.voters();
    let reachable = voters
        .iter()
        .copied()
        .filter(|n| !settled || shared.cluster.reachable(*n, window))
        .collect();
    VoterView { voters, reachable }
}

/// The next step for every tenant that may need one: unplaced tenants, tenants with unfinished
/// calls or a move under way, and every tenant when the voters or their reachability changed.
fn placement_steps(shared: &Shared, view: &VoterView, changed: bool) -> Vec<Command> {
    let registry = shared
        .registry
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    let mut busy: HashSet<&str> = HashSet::new();
    let mut working: HashSet<&str> = HashSet::new();
    for call in registry.unfinished_calls() {
        let tenant = call.spec.tenant.as_str();
        working.insert(tenant);
        let current = registry.placement(tenant).map(|p| p.epoch);
        if call.state == CallState::Executing && call.claim.as_ref().map(|c| c.epoch) == current {
            busy.insert(tenant);
        }
    }
    registry
        .tenants()
        .filter_map(|tenant| {
            let placement = registry.placement(tenant);
            let look = changed
                || placement.is_none_or(|p| p.moving_to.is_some())
                || working.contains(tenant);
            if !look {
                return None;
            }
            let view_of = TenantView {
                tenant,
                placement,
                busy: busy.contains(tenant),
            };
            next_step(view_of, &view.voters, |node| view.reachable.contains(&node))
        })
        .take(STEPS_PER_REVIEW)
        .collect()
}
