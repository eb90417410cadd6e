//! Webhooks: a tenant's `Webhook` resources are told when one of its calls starts waiting for
//! approval, is decided, expires or ends with an unknown outcome.
//!
//! Once per cluster, at least: only the tenant's home node sends, and a notice counts as given
//! only when a `Notified` mark for it is committed. Until then it is the home's to send: a home
//! that is lost, or a tenant that moves, leaves its unmarked notices to the next home, which
//! finds them in the registry (a receiver may see one twice then, with the same
//! `Gatehouse-Event-Id`; it never sees none). Which notices a call calls for is read off its
//! record (`gatehouse_registry::notify::notices`), so every home finds the same ones.
//!
//! Each webhook has a worker on the home: one task follows the tenant's calls on the node's
//! [`CallFeed`] (a resync re-reads every call of the tenant, finished ones too) and queues what
//! is due; another sends the queue in order, retrying with a doubling pause, audits every
//! attempt, and marks each notice once it was delivered, refused for good, or given up on.
//!
//! A webhook's secret is an operator's credential granted to its tenant, read at each attempt,
//! so a rotated secret signs the next notice. Redirects are not followed and answers are not
//! read. The body carries the call's summary and a console link, never its arguments.

mod body;
mod worker;

pub use body::{
    EVENT_HEADER, EVENT_ID_HEADER, Notice, SIGNATURE_HEADER, TIMESTAMP_HEADER, console_link,
    event_id, signature, slack_escape,
};

use crate::executor::EnvSource;
use gatehouse_audit::AuditLog;
use gatehouse_cluster::cluster::Cluster;
use gatehouse_cluster::feed::CallFeed;
use gatehouse_cluster::grants::Grants;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use worker::{Worker, WorkerHandle};

/// How notices are sent.
#[derive(Debug, Clone)]
pub struct NotifySettings {
    /// The pause before the first retry; it doubles up to `max_pause`.
    pub first_pause: Duration,
    pub max_pause: Duration,
    /// A notice not delivered this long after its moment is given up on (audited, and marked).
    pub give_up_after: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            first_pause: Duration::from_millis(500),
            max_pause: Duration::from_secs(300),
            give_up_after: Duration::from_secs(24 * 60 * 60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The shortest time between two looks at which webhooks this node is home for: a burst of
/// applied entries is looked at once.
const RECONCILE_PAUSE: Duration = Duration::from_millis(100);

/// What every worker of the node shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub cluster: Cluster,
    pub feed: CallFeed,
    pub grants: Arc<Grants>,
    pub env: Arc<dyn EnvSource>,
    pub audit: AuditLog,
    pub http: reqwest::Client,
    /// Where this node's console is, for webhooks that name no `consoleUrl`.
    pub console: String,
    pub settings: NotifySettings,
}

/// The node's notifier: it runs a worker for each webhook of each tenant this node is home to.
pub struct Notifier {
    shared: Shared,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("node", &self.shared.cluster.id)
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(
        cluster: Cluster,
        feed: CallFeed,
        audit: AuditLog,
        env: Arc<dyn EnvSource>,
        console: String,
        settings: NotifySettings,
    ) -> Self {
        let http = reqwest::Client::builder()
            // A redirect would send the signed notice somewhere the tenant's admin did not name.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("a client without TLS settings always builds");
        Notifier {
            shared: Shared {
                grants: cluster.grants().clone(),
                cluster,
                feed,
                env,
                audit,
                http,
                console,
                settings,
            },
        }
    }

    /// Runs until `stop` turns true; the workers stop with it.
    pub fn spawn(self, stop: watch::Receiver<bool>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut applied = self.shared.cluster.applied.clone();
        let mut workers: HashMap<(String, String), WorkerHandle> = HashMap::new();
        loop {
            self.reconcile(&mut workers);
            tokio::select! {
                changed = applied.changed() => if changed.is_err() { break },
                _ = stop.wait_for(|s| *s) => break,
            }
            tokio::time::sleep(RECONCILE_PAUSE).await;
        }
    }

    /// Starts a worker for every webhook whose tenant this node is home to, restarts those whose
    /// webhook changed, and stops the rest (a stopped worker's unmarked notices are the next
    /// home's).
    fn reconcile(&self, workers: &mut HashMap<(String, String), WorkerHandle>) {
        let me = self.shared.cluster.id;
        let registry = self.shared.cluster.registry.read();
        let wanted: HashMap<(String, String), Worker> = registry
            .webhooks()
            .filter(|w| registry.placement(w.tenant).is_some_and(|p| p.home == me))
            .map(|w| {
                let worker = Worker {
                    tenant: w.tenant.to_owned(),
                    name: w.name.to_owned(),
                    spec: w.spec.clone(),
                    since: w.since,
                    generation: w.generation,
                };
                ((worker.tenant.clone(), worker.name.clone()), worker)
            })
            .collect();
        drop(registry);
        workers.retain(|key, running| {
            wanted
                .get(key)
                .is_some_and(|w| w.generation == running.generation)
        });
        for (key, worker) in wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = workers.entry(key) {
                tracing::info!(tenant = %worker.tenant, webhook = %worker.name, "sending this tenant's notices");
                slot.insert(worker.spawn(self.shared.clone()));
            }
        }
    }
}
