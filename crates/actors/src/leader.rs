//! The leader's loop: it places tenants on their homes and purges old calls; on other nodes it
//! does nothing.

use crate::clock::now_ms;
use crate::context::NodeContext;
use crate::placement::{TenantView, next_step};
use crate::ports::NewTenantPlacer;
use gatehouse_registry::call::{CallState, NodeId};
use gatehouse_registry::{Command, Registry};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// Most placement steps one review proposes: a bulk load of tenants is placed over several
/// reviews rather than in one flood.
const STEPS_PER_REVIEW: usize = 1024;

pub(crate) async fn lead(context: Arc<NodeContext>, mut stop: watch::Receiver<bool>) {
    let mut review = tokio::time::interval(context.settings.review_every);
    let mut last_purge = now_ms();
    let mut leader_since: Option<Instant> = None;
    let mut last_view: Option<VoterView> = None;
    loop {
        tokio::select! {
            _ = review.tick() => {}
            _ = stop.changed() => {
                context.cluster.place_new_tenants(None);
                return;
            }
        }
        if !context.cluster.is_leader() {
            if leader_since.take().is_some() {
                context.cluster.place_new_tenants(None);
            }
            last_view = None;
            continue;
        }
        let since = *leader_since.get_or_insert_with(|| {
            let now = Instant::now();
            context
                .cluster
                .place_new_tenants(Some(new_tenant_placer(&context, now)));
            now
        });
        let view = voter_view(&context, settled(&context, since));
        let changed = last_view.as_ref() != Some(&view);
        let (steps, looked_at_all) = placement_steps(&context, &view, changed);
        // Proposed together, so the node's batcher writes them as few log entries.
        let results =
            futures::future::join_all(steps.into_iter().map(|step| context.cluster.propose(step)))
                .await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        if failed > 0 {
            tracing::debug!(failed, "placement steps not taken; the next review retries");
        } else if looked_at_all {
            // Cut short or not, a review that saw every placed tenant under this view leaves
            // the rest to the unsettled index: the next one need not look at them again.
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

/// A new leader has heard only from the voters that answered its election; it gives the others
/// one full window before it calls anyone unreachable.
fn settled(context: &NodeContext, leader_since: Instant) -> bool {
    leader_since.elapsed() >= context.settings.home_unreachable_after
}

/// How this leader places the tenants a batch of its node creates: the steps a review would
/// take for them, under the voters and reachability of the moment. A tenant created here is
/// then placed in the entry that creates it, rather than up to a review later by an entry of
/// its own (under the cluster benchmark, a tenant per write, those reviews were the largest
/// work beside the writes). It holds the context weakly: the cluster handle holds the placer.
fn new_tenant_placer(context: &Arc<NodeContext>, leader_since: Instant) -> NewTenantPlacer {
    let context = Arc::downgrade(context);
    Arc::new(move |tenants: &[&str]| {
        let Some(context) = context.upgrade() else {
            return Vec::new();
        };
        let view = voter_view(&context, settled(&context, leader_since));
        tenants
            .iter()
            .filter_map(|tenant| {
                let unplaced = TenantView {
                    tenant,
                    placement: None,
                    busy: false,
                };
                next_step(unplaced, &view.voters, &view.learners, |node| {
                    view.reachable.contains(&node)
                })
            })
            .collect()
    })
}

/// The next step for every tenant that may need one, at most [`STEPS_PER_REVIEW`]: tenants with
/// unfinished calls, every placed tenant when the voters or their reachability changed, then
/// the unsettled ones (no home yet, or moving). While the view stays as it was, a tenant placed
/// at its rightful home is not looked at, so a review costs what is unsettled and busy, not
/// what the registry holds. Also says whether the review looked at every placed tenant that the
/// change may concern (always, when nothing changed).
fn placement_steps(context: &NodeContext, view: &VoterView, changed: bool) -> (Vec<Command>, bool) {
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
    // A placed tenant is one the change may move; one without a home is in the unsettled
    // index, which comes last, and is looked at there.
    let placed = changed.then(|| placed_tenants(&registry));
    let unsettled = registry
        .unsettled_tenants()
        .filter(|tenant| !changed || registry.placement(tenant).is_none());
    collect_steps(&first, placed, unsettled, STEPS_PER_REVIEW, |tenant| {
        let view_of = TenantView {
            tenant,
            placement: registry.placement(tenant),
            busy: busy.contains(tenant),
        };
        next_step(view_of, &view.voters, &view.learners, |node| {
            view.reachable.contains(&node)
        })
    })
}

/// The tenants with a home that still exist. A deleted tenant keeps its placement record, and a
/// step naming it would be refused: the review would count as failed and the next one would
/// look at every placed tenant again, forever.
fn placed_tenants(registry: &Registry) -> impl Iterator<Item = &str> + '_ {
    registry
        .placements()
        .map(|(tenant, _)| tenant)
        .filter(|tenant| registry.tenant_exists(tenant))
}

/// The steps for `first`, then `placed` (when given), then `unsettled`, each tenant once, up to
/// `limit`; and whether it got through `placed`. Lazy, so that a review under the registry's
/// read lock reads no further into a backlog of new tenants than its steps need: a bulk load
/// makes tenants faster than reviews place them, and applies wait for that lock. Getting
/// through `placed` is what lets the next review skip it: a backlog that fills every review
/// must not make each one look at every tenant again.
fn collect_steps<'a>(
    first: &BTreeSet<&'a str>,
    placed: Option<impl Iterator<Item = &'a str>>,
    unsettled: impl Iterator<Item = &'a str>,
    limit: usize,
    mut step: impl FnMut(&'a str) -> Option<Command>,
) -> (Vec<Command>, bool) {
    let mut steps = Vec::new();
    let mut full = |tenant: &'a str| {
        steps.extend(step(tenant));
        steps.len() >= limit
    };
    for &tenant in first {
        if full(tenant) {
            return (steps, placed.is_none());
        }
    }
    if let Some(placed) = placed {
        for tenant in placed.filter(|tenant| !first.contains(tenant)) {
            if full(tenant) {
                return (steps, false);
            }
        }
    }
    for tenant in unsettled.filter(|tenant| !first.contains(tenant)) {
        if full(tenant) {
            break;
        }
    }
    (steps, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A step for every tenant whose name starts with `u` (unplaced) or `m` (misplaced).
    fn step(tenant: &str) -> Option<Command> {
        tenant.starts_with(['u', 'm']).then(|| Command::Place {
            tenant: tenant.to_owned(),
            home: 1,
            epoch: 1,
        })
    }

    fn named(steps: &[Command]) -> Vec<&str> {
        steps
            .iter()
            .map(|s| match s {
                Command::Place { tenant, .. } => tenant.as_str(),
                other => panic!("not a placement: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_unsettled_backlog_is_read_only_as_far_as_steps_are_taken() {
        let backlog: Vec<String> = (0..100_000).map(|i| format!("u{i:06}")).collect();
        let read = Cell::new(0);
        let unsettled = backlog
            .iter()
            .map(String::as_str)
            .inspect(|_| read.set(read.get() + 1));
        let none: Option<std::iter::Empty<&str>> = None;
        let (steps, looked_at_all) =
            collect_steps(&BTreeSet::new(), none, unsettled, STEPS_PER_REVIEW, step);
        assert_eq!(steps.len(), STEPS_PER_REVIEW);
        assert_eq!(read.get(), STEPS_PER_REVIEW);
        assert!(
            looked_at_all,
            "with the voters unchanged there is nothing else to see"
        );
    }

    #[test]
    fn tenants_with_work_come_first_then_the_placed_then_the_unsettled_each_once() {
        let first: BTreeSet<&str> = ["m2", "u4"].into_iter().collect();
        let placed = ["p1", "m2", "m3"].into_iter();
        let unsettled = ["u4", "u5"].into_iter();
        let (steps, looked_at_all) = collect_steps(&first, Some(placed), unsettled, 10, step);
        assert_eq!(named(&steps), ["m2", "u4", "m3", "u5"]);
        assert!(looked_at_all);
    }

    #[test]
    fn a_backlog_past_the_limit_still_lets_a_review_get_through_the_placed_tenants() {
        // After a change of voters: a thousand placed tenants, three of them misplaced, and a
        // backlog of new tenants larger than a review. The placed come before the backlog, so
        // the review sees them all and the next one need not look again.
        let placed: Vec<String> = (0..1_000)
            .map(|i| format!("{}{i:04}", if i % 400 == 7 { 'm' } else { 'p' }))
            .collect();
        let backlog: Vec<String> = (0..5_000).map(|i| format!("u{i:04}")).collect();
        let (steps, looked_at_all) = collect_steps(
            &BTreeSet::new(),
            Some(placed.iter().map(String::as_str)),
            backlog.iter().map(String::as_str),
            STEPS_PER_REVIEW,
            step,
        );
        assert_eq!(steps.len(), STEPS_PER_REVIEW);
        assert_eq!(named(&steps)[..3], ["m0007", "m0407", "m0807"]);
        assert!(
            looked_at_all,
            "cut short in the backlog, not among the placed"
        );
    }

    #[test]
    fn a_deleted_tenant_is_not_among_the_placed_though_its_placement_stays() {
        let mut registry = gatehouse_testkit::yaml::registry(&format!(
            "{}---\n{}",
            gatehouse_testkit::yaml::tenant("kept"),
            gatehouse_testkit::yaml::tenant("gone")
        ));
        let mut index = 1;
        let mut apply = |registry: &mut Registry, command: Command| {
            index += 1;
            let proposal = gatehouse_registry::Proposal {
                request_id: uuid::Uuid::from_u128(index.into()),
                at: 0,
                command,
            };
            registry.apply(index, &proposal).expect("applies");
        };
        for tenant in ["kept", "gone"] {
            apply(
                &mut registry,
                Command::Place {
                    tenant: tenant.to_owned(),
                    home: 1,
                    epoch: 1,
                },
            );
        }
        let gone = gatehouse_registry::ResourceKey {
            kind: gatehouse_registry::Kind::Tenant,
            tenant: None,
            name: "gone".to_owned(),
        };
        apply(&mut registry, Command::Delete { keys: vec![gone] });
        assert!(registry.placement("gone").is_some(), "the record stays");
        let placed: Vec<&str> = placed_tenants(&registry).collect();
        assert_eq!(placed, ["kept"]);
    }

    #[test]
    fn a_review_cut_short_among_the_placed_says_it_did_not_see_them_all() {
        let placed: Vec<String> = (0..50).map(|i| format!("m{i:02}")).collect();
        let (steps, looked_at_all) = collect_steps(
            &BTreeSet::new(),
            Some(placed.iter().map(String::as_str)),
            std::iter::empty(),
            20,
            step,
        );
        assert_eq!(steps.len(), 20);
        assert!(!looked_at_all);
        let first: BTreeSet<&str> = placed.iter().map(String::as_str).collect();
        let (_, looked_at_all) = collect_steps(
            &first,
            Some(std::iter::empty()),
            std::iter::empty(),
            20,
            step,
        );
        assert!(!looked_at_all, "cut short before the placed were reached");
    }
}
