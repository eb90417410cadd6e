//! The node's listener on applied entries: it turns them into notes to the tenant actors they
//! concern (starting the home's actor when a tenant moves here or a call of it is approved) and
//! sweeps now and then for anything missed.

use crate::context::NodeContext;
use crate::supervisor::SupervisorMsg;
use gatehouse_raft_store::AppliedEntry;
use gatehouse_registry::Command;
use ractor::ActorRef;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};

pub(crate) async fn listen(
    context: Arc<NodeContext>,
    supervisor: ActorRef<SupervisorMsg>,
    mut events: broadcast::Receiver<AppliedEntry>,
    mut stop: watch::Receiver<bool>,
) {
    let mut sweep = tokio::time::interval(context.settings.review_every);
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(applied) => route(&context, &supervisor, &applied),
                Err(broadcast::error::RecvError::Lagged(_)) => sweep_homes(&context, &supervisor),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = sweep.tick() => sweep_homes(&context, &supervisor),
            _ = stop.changed() => return,
        }
    }
}

/// The tenants an applied entry concerns: those of the calls it changed and those it placed.
/// The home's actor is started for a call, and for a placement only when the tenant has
/// unfinished calls to take over: a tenant with nothing queued gets its actor on first use.
/// A tenant with no actor here and none to start is told nothing: an actor that starts later
/// reads the registry as it is then, this entry included. (A new tenant is placed in the entry
/// that creates it, so without this every tenant put would be a message to the supervisor on
/// every node.)
fn route(context: &NodeContext, supervisor: &ActorRef<SupervisorMsg>, applied: &AppliedEntry) {
    let called: BTreeSet<&str> = applied
        .calls
        .iter()
        .map(|c| c.spec.tenant.as_str())
        .collect();
    let mut moved = BTreeSet::new();
    placed(&applied.proposal.command, &mut moved);
    if called.is_empty() && moved.is_empty() {
        return;
    }
    let registry = context.registry.read();
    for tenant in called.union(&moved) {
        let home = registry
            .placement(tenant)
            .is_some_and(|p| p.home == context.node);
        let queued =
            || called.contains(tenant) || registry.unfinished_calls_of(tenant).next().is_some();
        let spawn = home && queued();
        if spawn || context.handle(tenant).is_some() {
            let _ = supervisor.cast(SupervisorMsg::Notify {
                tenant: (*tenant).to_owned(),
                spawn,
            });
        }
    }
}

fn placed<'a>(command: &'a Command, into: &mut BTreeSet<&'a str>) {
    match command {
        Command::Place { tenant, .. } | Command::StartMove { tenant, .. } => {
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
/// a lagging listener, and an installed snapshot, none of which come as events. It reads the
/// unfinished calls, not every placement.
fn sweep_homes(context: &NodeContext, supervisor: &ActorRef<SupervisorMsg>) {
    let registry = context.registry.read();
    let busy: BTreeSet<&str> = registry
        .unfinished_calls()
        .map(|c| c.spec.tenant.as_str())
        .collect();
    for tenant in busy {
        if registry
            .placement(tenant)
            .is_some_and(|p| p.home == context.node)
        {
            let _ = supervisor.cast(SupervisorMsg::Notify {
                tenant: tenant.to_owned(),
                spawn: true,
            });
        }
    }
}
