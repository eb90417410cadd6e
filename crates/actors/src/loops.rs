//! The node's two background loops. The listener turns applied entries into notes to the tenant
//! actors they concern (starting the home's actor when a tenant moves here or a call of it is
//! approved) and sweeps now and then for anything missed. The leader's loop places tenants and
//! purges old calls; on other nodes it does nothing.

use crate::placement::{TenantView, next_step};
use crate::shared::{Shared, now_ms};
use crate::supervisor::SupervisorMsg;
use gatehouse_raft_store::Applied;
use gatehouse_registry::Command;
use gatehouse_registry::call::CallState;
use ractor::ActorRef;
use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, PoisonError};
use tokio::sync::{broadcast, watch};

pub(crate) async fn listen(
    shared: Arc<Shared>,
    supervisor: ActorRef<SupervisorMsg>,
    mut events: broadcast::Receiver<Applied>,
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
fn route(shared: &Shared, supervisor: &ActorRef<SupervisorMsg>, applied: &Applied) {
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

pub(crate) async fn lead(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut review = tokio::time::interval(shared.settings.review_every);
    let mut last_purge = now_ms();
    let mut leader_since: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = review.tick() => {}
            _ = stop.changed() => return,
        }
        if !shared.cluster.is_leader() {
            leader_since = None;
            continue;
        }
        // A new leader has heard only from the voters that answered its election; it gives the
        // others one full window before it calls anyone unreachable.
        let since = *leader_since.get_or_insert_with(std::time::Instant::now);
        let settled = since.elapsed() >= shared.settings.home_unreachable_after;
        for command in placement_steps(&shared, settled) {
            if let Err(e) = shared.cluster.propose(command).await {
                tracing::debug!(error = %e, "placement step not taken");
            }
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

fn placement_steps(shared: &Shared, settled: bool) -> Vec<Command> {
    let voters = shared.cluster.voters();
    let window = shared.settings.home_unreachable_after;
    let registry = shared
        .registry
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    let busy: HashSet<&str> = registry
        .unfinished_calls()
        .filter(|c| c.state == CallState::Executing)
        .filter(|c| {
            let current = registry.placement(&c.spec.tenant).map(|p| p.epoch);
            c.claim.as_ref().map(|claim| claim.epoch) == current
        })
        .map(|c| c.spec.tenant.as_str())
        .collect();
    registry
        .tenants()
        .filter_map(|tenant| {
            let view = TenantView {
                tenant,
                placement: registry.placement(tenant),
                busy: busy.contains(tenant),
            };
            next_step(view, &voters, |node| {
                !settled || shared.cluster.reachable(node, window)
            })
        })
        .collect()
}
