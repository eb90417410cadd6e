//! The leader's loop: it places tenants on their homes and purges old calls; on other nodes it
//! does nothing.

use crate::clock::now_ms;
use crate::context::NodeContext;
use crate::placement::{TenantView, next_step};
use gatehouse_registry::Command;
use gatehouse_registry::call::{CallState, NodeId};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use tokio::sync::watch;

/// Most placement steps one review proposes: a bulk load of tenants is placed over several
/// reviews rather than in one flood.
const STEPS_PER_REVIEW: usize = 1024;

pub(crate) async fn lead(context: Arc<NodeContext>, mut stop: watch::Receiver<bool>) {
    let mut review = tokio::time::interval(context.settings.review_every);
    let mut last_purge = now_ms();
    let mut leader_since: Option<std::time::Instant> = None;
    let mut last_view: Option<VoterView> = None;
    loop {
        tokio::select! {
            _ = review.tick() => {}
            _ = stop.changed() => return,
        }
        if !context.cluster.is_leader() {
            leader_since = None;
            last_view = None;
            continue;
        }
        // A new leader has heard only from the voters that answered its election; it gives the
        // others one full window before it calls anyone unreachable.
        let since = *leader_since.get_or_insert_with(std::time::Instant::now);
        let settled = since.elapsed() >= context.settings.home_unreachable_after;
        let view = voter_view(&context, settled);
        let changed = last_view.as_ref() != Some(&view);
        let steps = placement_steps(&context, &view, changed);
        // A review cut short by the step limit looks at everything again next time.
        let complete = steps.len() < STEPS_PER_REVIEW;
        // Proposed together, so the node's batcher writes them as few log entries.
        let results =
            futures::future::join_all(steps.into_iter().map(|step| context.cluster.propose(step)))
                .await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        if failed > 0 {
            tracing::debug!(failed, "placement steps not taken; the next review retries");
        } else if complete {
            last_view = Some(view);
        }
        let now = now_ms();
        if now.saturating_sub(last_purge) >= context.settings.purge_every.as_millis() as u64 {
            last_purge = now;
            let before = now.saturating_sub(context.settings.retention.as_millis() as u64);
            match context.cluster.propose(Command::Purge { before }).await {
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
    /// Learners: a voter being removed is one while its tenants move away.
    learners: Vec<NodeId>,
    reachable: Vec<NodeId>,
}

fn voter_view(context: &NodeContext, settled: bool) -> VoterView {
    let window = context.settings.home_unreachable_after;
    let voters = context.cluster.voters();
    let learners = context.cluster.learners();
    let reachable = voters
        .iter()
        .chain(&learners)
        .copied()
        .filter(|n| !settled || context.cluster.reachable(*n, window))
        .collect();
    VoterView {
        voters,
        learners,
        reachable,
    }
}

/// The next step for every tenant that may need one: unplaced tenants, tenants with unfinished
/// calls or a move under way, and every tenant when the voters or their reachability changed.
/// While they stay as they were, a tenant placed at its rightful home is not looked at, so a
/// review costs what is unsettled, not what the registry holds.
fn placement_steps(context: &NodeContext, view: &VoterView, changed: bool) -> Vec<Command> {
    let registry = context.registry.read();
    let mut busy: HashSet<&str> = HashSet::new();
    let mut first: BTreeSet<&str> = BTreeSet::new();
    for call in registry.unfinished_calls() {
        let tenant = call.spec.tenant.as_str();
        // A tenant with unfinished calls cannot be deleted; the check keeps a step from
        // naming one that is not there whatever the calls say.
        if registry.tenant_exists(tenant) {
            first.insert(tenant);
        }
        let current = registry.placement(tenant).map(|p| p.epoch);
        if call.state == CallState::Executing && call.claim.as_ref().map(|c| c.epoch) == current {
            busy.insert(tenant);
        }
    }
    if changed {
        first.extend(registry.tenants());
    }
    candidates(&first, registry.unsettled_tenants())
        .filter_map(|tenant| {
            let view_of = TenantView {
                tenant,
                placement: registry.placement(tenant),
                busy: busy.contains(tenant),
            };
            next_step(view_of, &view.voters, &view.learners, |node| {
                view.reachable.contains(&node)
            })
        })
        .take(STEPS_PER_REVIEW)
        .collect()
}

/// The tenants a review looks at: `first` (those with unfinished calls, or every tenant when the
/// voters changed), then the unsettled ones, each once. Lazy, so that a review under the
/// registry's read lock reads no further into a backlog of new tenants than its steps need: a
/// bulk load makes tenants faster than reviews place them, and applies wait for that lock.
fn candidates<'a>(
    first: &'a BTreeSet<&'a str>,
    unsettled: impl Iterator<Item = &'a str> + 'a,
) -> impl Iterator<Item = &'a str> + 'a {
    first
        .iter()
        .copied()
        .chain(unsettled.filter(move |tenant| !first.contains(tenant)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_unsettled_backlog_is_read_only_as_far_as_candidates_are_taken() {
        let backlog: Vec<String> = (0..100_000).map(|i| format!("t{i:06}")).collect();
        let read = Cell::new(0);
        let unsettled = backlog
            .iter()
            .map(String::as_str)
            .inspect(|_| read.set(read.get() + 1));
        let first = BTreeSet::new();
        let taken: Vec<&str> = candidates(&first, unsettled)
            .take(STEPS_PER_REVIEW)
            .collect();
        assert_eq!(taken.len(), STEPS_PER_REVIEW);
        assert_eq!(read.get(), STEPS_PER_REVIEW);
    }

    #[test]
    fn tenants_with_work_come_first_and_each_tenant_once() {
        let first: BTreeSet<&str> = ["b", "d"].into_iter().collect();
        let unsettled = ["a", "b", "c", "d", "e"].into_iter();
        let all: Vec<&str> = candidates(&first, unsettled).collect();
        assert_eq!(all, ["b", "d", "a", "c", "e"]);
    }
}
