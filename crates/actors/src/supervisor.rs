//! The supervision tree: the root, which owns the node's health, and under it the tenant
//! supervisor, which spawns tenant actors on demand and restarts them after a failure with a
//! growing backoff. ractor has no restart strategy of its own; this is it. A tenant that fails
//! more than the limit within the window is given up on and escalated to the root, which marks
//! the node not ready instead of spinning.

use crate::context::NodeContext;
use crate::handle::{TenantHandle, TenantMsg};
use crate::tenant::{TenantActor, TenantArgs};
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Whether the node can serve: a tenant given up on makes it not ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Ready,
    NotReady { reason: String },
}

#[derive(Debug)]
pub(crate) enum RootMsg {
    Escalate {
        tenant: String,
        failures: usize,
    },
    /// The tenant supervisor under the root.
    Tenants(RpcReplyPort<ActorRef<SupervisorMsg>>),
}

impl RootMsg {
    pub(crate) fn tenants(reply: RpcReplyPort<ActorRef<SupervisorMsg>>) -> Self {
        RootMsg::Tenants(reply)
    }
}

#[derive(Debug)]
pub(crate) struct Root;

pub(crate) struct RootState {
    health: watch::Sender<Health>,
    pub(crate) tenants: ActorRef<SupervisorMsg>,
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = (Arc<NodeContext>, watch::Sender<Health>);

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        (context, health): Self::Arguments,
    ) -> Result<RootState, ActorProcessingErr> {
        let (tenants, _) = Actor::spawn_linked(
            None,
            TenantSupervisor,
            (context, myself.clone()),
            myself.get_cell(),
        )
        .await?;
        Ok(RootState { health, tenants })
    }

    async fn handle(
        &self,
        _myself: ActorRef<RootMsg>,
        message: RootMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RootMsg::Escalate { tenant, failures } => {
                let reason = format!(
                    "tenant {tenant}'s actor failed {failures} times in a row; it is not restarted"
                );
                tracing::error!(%tenant, failures, "restart limit reached: node marked not ready");
                state.health.send_replace(Health::NotReady { reason });
            }
            RootMsg::Tenants(reply) => {
                let _ = reply.send(state.tenants.clone());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        event: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(_, error) = event {
            tracing::error!(%error, "the tenant supervisor failed: node marked not ready");
            state.health.send_replace(Health::NotReady {
                reason: format!("the tenant supervisor failed: {error}"),
            });
            myself.stop(None);
        }
        Ok(())
    }
}

#[derive(Debug)]
pub(crate) enum SupervisorMsg {
    /// The tenant's handle, spawning its actor if it has none.
    Get {
        tenant: String,
        reply: RpcReplyPort<Result<TenantHandle, String>>,
    },
    /// Something changed for the tenant: tell its actor, spawning it first if `spawn`.
    Notify { tenant: String, spawn: bool },
    /// A restart whose backoff has passed.
    Restart { tenant: String },
    /// Stop every tenant actor.
    StopAll { reply: RpcReplyPort<()> },
}

#[derive(Debug)]
pub(crate) struct TenantSupervisor;

#[derive(Default)]
struct Slot {
    actor: Option<ActorRef<TenantMsg>>,
    failures: VecDeque<Instant>,
    given_up: bool,
}

pub(crate) struct SupervisorState {
    context: Arc<NodeContext>,
    root: ActorRef<RootMsg>,
    slots: HashMap<String, Slot>,
    by_actor: HashMap<ActorId, String>,
}

impl Actor for TenantSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = (Arc<NodeContext>, ActorRef<RootMsg>);

    async fn pre_start(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        (context, root): Self::Arguments,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        Ok(SupervisorState {
            context,
            root,
            slots: HashMap::new(),
            by_actor: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        message: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SupervisorMsg::Get { tenant, reply } => {
                let handle = state.ensure(&myself, &tenant).await;
                let _ = reply.send(handle);
            }
            SupervisorMsg::Notify { tenant, spawn } => {
                let running = state.slots.get(&tenant).and_then(|s| s.actor.clone());
                match running {
                    Some(actor) => {
                        let _ = actor.cast(TenantMsg::Changed);
                    }
                    // A fresh actor looks at its queue as soon as it starts.
                    None if spawn => {
                        let _ = state.ensure(&myself, &tenant).await;
                    }
                    None => {}
                }
            }
            SupervisorMsg::Restart { tenant } => {
                let _ = state.ensure(&myself, &tenant).await;
            }
            SupervisorMsg::StopAll { reply } => {
                for slot in state.slots.values_mut() {
                    if let Some(actor) = slot.actor.take() {
                        actor.stop(None);
                    }
                    slot.given_up = true;
                }
                state.forget_handles();
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                let Some(tenant) = state.forget(&cell) else {
                    return Ok(());
                };
                tracing::warn!(%tenant, %error, "tenant actor failed");
                state.failed(&myself, &tenant);
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                // A passivated actor: it is spawned again when it is needed.
                state.forget(&cell);
            }
            SupervisionEvent::ActorStarted(_) | SupervisionEvent::ProcessGroupChanged(_) => {}
        }
        Ok(())
    }
}

impl SupervisorState {
    /// The tenant's handle, spawning its actor when there is none. A start that fails counts as
    /// a failure of the actor.
    async fn ensure(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        tenant: &str,
    ) -> Result<TenantHandle, String> {
        if let Some(handle) = self.context.handle(tenant) {
            return Ok(handle);
        }
        let slot = self.slots.entry(tenant.to_owned()).or_default();
        if slot.given_up {
            return Err(format!(
                "tenant {tenant}'s actor failed too often and is not restarted"
            ));
        }
        // A caller that needs the actor now does not wait out a scheduled restart's backoff,
        // which is there to keep the supervisor from spinning on its own; a start that fails
        // still counts.
        let args = TenantArgs {
            tenant: tenant.to_owned(),
            context: self.context.clone(),
        };
        match Actor::spawn_linked(None, TenantActor, args, myself.get_cell()).await {
            Ok((actor, _)) => {
                let handle = actor
                    .call(TenantMsg::Handle, Some(Duration::from_secs(5)))
                    .await;
                let handle = match handle {
                    Ok(ractor::rpc::CallResult::Success(handle)) => handle,
                    _ => return Err(format!("tenant {tenant}'s actor did not answer")),
                };
                self.by_actor.insert(actor.get_id(), tenant.to_owned());
                self.slots.entry(tenant.to_owned()).or_default().actor = Some(actor);
                self.context
                    .handles
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(tenant.to_owned(), handle.clone());
                Ok(handle)
            }
            Err(e) => {
                tracing::warn!(%tenant, error = %e, "tenant actor failed to start");
                self.failed(myself, tenant);
                Err(format!("tenant {tenant}'s actor failed to start: {e}"))
            }
        }
    }

    fn forget(&mut self, cell: &ActorCell) -> Option<String> {
        let tenant = self.by_actor.remove(&cell.get_id())?;
        if let Some(slot) = self.slots.get_mut(&tenant) {
            slot.actor = None;
        }
        self.context
            .handles
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&tenant);
        Some(tenant)
    }

    fn forget_handles(&mut self) {
        self.by_actor.clear();
        self.context
            .handles
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Counts a failure; schedules a restart after the backoff, or gives up and escalates.
    fn failed(&mut self, myself: &ActorRef<SupervisorMsg>, tenant: &str) {
        let settings = &self.context.settings;
        let slot = self.slots.entry(tenant.to_owned()).or_default();
        let now = Instant::now();
        slot.failures.push_back(now);
        while slot
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > settings.restart_window)
        {
            slot.failures.pop_front();
        }
        let failures = slot.failures.len();
        if failures > settings.restart_limit {
            slot.given_up = true;
            let _ = self.root.cast(RootMsg::Escalate {
                tenant: tenant.to_owned(),
                failures,
            });
            return;
        }
        self.context.restarts.fetch_add(1, Ordering::Relaxed);
        let backoff = settings.restart_backoff * 2u32.saturating_pow(failures as u32 - 1);
        let tenant = tenant.to_owned();
        ractor::time::send_after(backoff, myself.get_cell(), move || SupervisorMsg::Restart {
            tenant,
        });
    }
}
