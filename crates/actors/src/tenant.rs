//! One tenant's actor. It owns the tenant's cascade cache (readers share it through a
//! `TenantHandle`) and, on the tenant's home node, works the approval queue: it asks
//! `decide::home_duties` what to do and carries it out in tracked tasks, never in its handler, so
//! a slow upstream never stalls the tenant.

use crate::clock::now_ms;
use crate::context::NodeContext;
use crate::decide::{Duty, NodeActivity, home_duties};
use crate::handle::{TenantHandle, TenantMsg};
use crate::outcome::outcome_of;
use crate::ports::{Execution, ProposeError};
use gatehouse_registry::cache::CascadeCache;
use gatehouse_registry::call::{Call, CallId, CallState, Outcome};
use gatehouse_registry::{Command, Response};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::task::JoinHandle;

#[derive(Debug)]
pub(crate) struct TenantActor;

pub(crate) struct TenantArgs {
    pub(crate) tenant: String,
    pub(crate) context: Arc<NodeContext>,
}

/// A `send_after` task: the wake-up it will deliver.
type Timer = JoinHandle<Result<(), ractor::MessagingErr<TenantMsg>>>;

pub(crate) struct TenantState {
    tenant: Arc<str>,
    context: Arc<NodeContext>,
    handle: TenantHandle,
    wake: Option<(u64, Timer)>,
    idle_check: JoinHandle<()>,
}

impl Actor for TenantActor {
    type Msg = TenantMsg;
    type State = TenantState;
    type Arguments = TenantArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TenantMsg>,
        args: TenantArgs,
    ) -> Result<TenantState, ActorProcessingErr> {
        if args.context.faults.start_fails(&args.tenant) {
            return Err(format!("fault injected: tenant {} fails to start", args.tenant).into());
        }
        let tenant: Arc<str> = args.tenant.into();
        let context = args.context;
        // Everything else is rebuilt from the registry and the node's duty tracker on the first look.
        let handle = TenantHandle {
            tenant: tenant.clone(),
            cache: CascadeCache::new(context.settings.cache_entries),
            registry: context.registry.clone(),
            last_used: Arc::new(AtomicU64::new(now_ms())),
            actor: myself.clone(),
        };
        let period = (context.settings.passivate_after / 2).max(Duration::from_millis(50));
        let idle_check =
            ractor::time::send_interval(period, myself.get_cell(), || TenantMsg::IdleCheck);
        let _ = myself.cast(TenantMsg::Changed);
        Ok(TenantState {
            tenant,
            context,
            handle,
            wake: None,
            idle_check,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<TenantMsg>,
        state: &mut TenantState,
    ) -> Result<(), ActorProcessingErr> {
        state.idle_check.abort();
        if let Some((_, wake)) = state.wake.take() {
            wake.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<TenantMsg>,
        message: TenantMsg,
        state: &mut TenantState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            TenantMsg::Changed | TenantMsg::Wake => state.look(&myself),
            TenantMsg::IdleCheck => {
                if state.idle() {
                    tracing::debug!(tenant = %state.tenant, "tenant actor passivated");
                    myself.stop(Some("idle".to_owned()));
                }
            }
            TenantMsg::Crash => panic!("fault injected: tenant {} actor panics", state.tenant),
            TenantMsg::Handle(reply) => {
                let _ = reply.send(state.handle.clone());
            }
        }
        Ok(())
    }
}

impl TenantState {
    /// Reads the queue, asks what the home should do, starts it, and sets the next wake-up.
    fn look(&mut self, myself: &ActorRef<TenantMsg>) {
        let context = &self.context;
        let (placement, calls) = {
            let registry = context.registry.read();
            let calls: Vec<Call> = registry
                .unfinished_calls_of(&self.tenant)
                .cloned()
                .collect();
            (registry.placement(&self.tenant), calls)
        };
        let now = now_ms();
        let due = {
            let tracked = context.tracker.lock();
            let never_sent =
                |claim: &gatehouse_registry::call::Claim| context.executor.never_sent(claim);
            let activity = NodeActivity {
                node: context.node,
                live_claims: &tracked.live_claims,
                in_flight: &tracked.in_flight,
                never_sent: &never_sent,
            };
            home_duties(placement, &calls, activity, now)
        };
        for duty in due.duties {
            self.start(duty, myself);
        }
        match due.wake_at {
            Some(at) if self.wake.as_ref().is_none_or(|(w, _)| *w != at) => {
                if let Some((_, old)) = self.wake.take() {
                    old.abort();
                }
                let delay = Duration::from_millis(at.saturating_sub(now) + 1);
                let task = ractor::time::send_after(delay, myself.get_cell(), || TenantMsg::Wake);
                self.wake = Some((at, task));
            }
            Some(_) => {}
            None => {
                if let Some((_, old)) = self.wake.take() {
                    old.abort();
                }
            }
        }
    }

    fn start(&self, duty: Duty, myself: &ActorRef<TenantMsg>) {
        let call = match &duty {
            Duty::Expire { call, .. } | Duty::ClaimAndRun { call, .. } => call.clone(),
            Duty::MarkUnknown { call, .. } => call.clone(),
        };
        let context = self.context.clone();
        if !context.tracker.begin(&call) {
            return;
        }
        let node = context.node;
        let myself = myself.clone();
        let handle = self.handle.clone();
        let task = async move {
            match duty {
                Duty::Expire { call, epoch } => {
                    let command = Command::Expire {
                        call_id: call.clone(),
                        node,
                        epoch,
                    };
                    settle(&context, &call, "expire", command).await;
                }
                Duty::MarkUnknown { call, epoch } => {
                    let command = Command::MarkUnknown {
                        call_id: call.clone(),
                        node,
                        epoch,
                    };
                    settle(&context, &call, "mark unknown", command).await;
                }
                Duty::ClaimAndRun {
                    call,
                    epoch,
                    replaces_unsent,
                } => {
                    claim_and_run(&context, &handle, call, epoch, replaces_unsent).await;
                }
            }
            // The actor may have been restarted or passivated meanwhile; then there is nobody
            // to tell, and the next look starts from the registry anyway.
            let _ = myself.cast(TenantMsg::Changed);
        };
        self.context.tracker.spawn(task);
    }

    /// Idle: unused for the passivation time, and neither home to unfinished calls nor running
    /// an execution here.
    fn idle(&self) -> bool {
        let settings = &self.context.settings;
        let unused = now_ms().saturating_sub(self.handle.last_used.load(Ordering::Relaxed))
            >= settings.passivate_after.as_millis() as u64;
        if !unused || self.context.tracker.executing_for(&self.tenant) {
            return false;
        }
        let registry = self.context.registry.read();
        let home = registry
            .placement(&self.tenant)
            .is_some_and(|p| p.home == self.context.node);
        !(home && registry.unfinished_calls_of(&self.tenant).next().is_some())
    }
}

/// How long a duty that could not be proposed stays in flight before the next look may try it
/// again: a port that refuses at once (an audit log that cannot write) must not spin the actor.
const DUTY_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Proposes a duty's command; one that did not go through keeps the call in flight for a pause.
async fn settle(context: &Arc<NodeContext>, call: &CallId, what: &str, command: Command) {
    let result = context.cluster.propose(command).await;
    let unavailable = matches!(result, Err(ProposeError::Unavailable(_)));
    note(call, what, result);
    if unavailable {
        tokio::time::sleep(DUTY_RETRY_PAUSE).await;
    }
    context.tracker.end(call);
}

fn note(call: &CallId, what: &str, result: Result<Response, ProposeError>) {
    match result {
        Ok(_) => tracing::debug!(%call, what, "proposed"),
        Err(e) => tracing::debug!(%call, what, error = %e, "not proposed"),
    }
}

/// Claims the call and, once the claim is committed, invokes the upstream exactly once under it
/// and reports the outcome until it is recorded.
async fn claim_and_run(
    context: &Arc<NodeContext>,
    handle: &TenantHandle,
    call: CallId,
    epoch: u64,
    replaces_unsent: Option<String>,
) {
    let claim_id = format!("claim_{}", uuid::Uuid::new_v4().simple());
    // Live before it can be seen committed: see `DutyTracker::claim`.
    context.tracker.claim(&claim_id, handle.tenant());
    let claimed = context
        .cluster
        .propose(Command::Claim {
            call_id: call.clone(),
            node: context.node,
            epoch,
            claim_id: claim_id.clone(),
            replaces_unsent,
        })
        .await;
    context.tracker.end(&call);
    if !matches!(claimed, Ok(Response::Call { .. })) {
        note(&call, "claim", claimed);
    }
    // What counts is the record this node applied, not the answer: a claim whose answer was lost
    // may still have committed, and one that committed is ours to run.
    let record = context.registry.read().call(&call).cloned().filter(|r| {
        r.state == CallState::Executing && r.claim.as_ref().is_some_and(|c| c.claim_id == claim_id)
    });
    let Some(record) = record else {
        context.tracker.release(&claim_id);
        return;
    };
    let spec = &record.spec;
    let execution = Execution {
        call_id: call.clone(),
        claim_id: Some(claim_id.clone()),
        tenant: spec.tenant.clone(),
        tool: spec.tool.clone(),
        arguments: spec.arguments.clone(),
        idempotency_key: call.to_string(),
        skill_context: handle.skill_context(&spec.tool, spec.chain.end_user.as_deref()),
        end_user: spec.chain.end_user.clone(),
        retry_safe: spec.retry_safe,
        trace_parent: spec.trace_parent.clone(),
    };
    let outcome = outcome_of(context.executor.execute(execution).await);
    report(context, &call, &claim_id, outcome).await;
    context.tracker.release(&claim_id);
}

/// Proposes `Complete` until it is recorded, or until the claim is no longer this one (an
/// approver resolved the call meanwhile). A node cut off from the leader keeps trying, so the
/// outcome of a claim it held is recorded once it is back.
async fn report(context: &Arc<NodeContext>, call: &CallId, claim_id: &str, outcome: Outcome) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let command = Command::Complete {
            call_id: call.clone(),
            claim_id: claim_id.to_owned(),
            outcome: outcome.clone(),
        };
        match context.cluster.propose(command).await {
            Ok(_) => return,
            Err(ProposeError::Refused(reason)) => {
                tracing::warn!(%call, %reason, "completion refused");
                return;
            }
            Err(ProposeError::Unavailable(reason)) => {
                tracing::debug!(%call, %reason, "completion not recorded yet; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
