//! The audited port the tenant actors are given: the one place their proposals pass through the
//! node, where the home's own decisions on a call are written to the audit log before they are
//! proposed. The plain cluster handle is a port too (`gatehouse_cluster::actor_port`).

use crate::pipeline::audit;
use futures::future::BoxFuture;
use gatehouse_actors::{ClusterPort, NewTenantPlacer, ProposeError};
use gatehouse_audit::{AuditLog, Entry, Kind};
use gatehouse_cluster::cluster::Cluster;
use gatehouse_registry::call::NodeId;
use gatehouse_registry::{CallId, Command, Response};
use std::time::Duration;

/// The cluster port of the tenant actors and the leader's loops. Commands that decide a call's
/// fate without an execution (`Expire`, `MarkUnknown`) are audited write-ahead on this node: a
/// `requested` record is durable before the command is proposed, or it is not proposed (the
/// duty is tried again later), and what came of it follows.
#[derive(Debug, Clone)]
pub struct AuditedPort {
    cluster: Cluster,
    audit: AuditLog,
}

impl AuditedPort {
    pub fn new(cluster: Cluster, audit: AuditLog) -> Self {
        AuditedPort { cluster, audit }
    }
}

/// The actors' commands that are decisions on one call with no execution record of their own,
/// and their audit name. Exhaustive, so a new command is a decision about auditing it.
fn home_decision(command: &Command) -> Option<(&CallId, &'static str)> {
    match command {
        Command::Expire { call_id, .. } => Some((call_id, "expire")),
        Command::MarkUnknown { call_id, .. } => Some((call_id, "mark_unknown")),
        // The execution-start record names the claim it runs under, and the execution's
        // outcome record covers `Complete`, which reports what already happened and so is
        // never held back by the log.
        Command::Claim { .. } | Command::Complete { .. } => None,
        // The leader's placement and retention: housekeeping, not a decision on a call.
        Command::Place { .. } | Command::StartMove { .. } | Command::Purge { .. } => None,
        // Proposed by the fronts and services, audited there.
        Command::Put { .. }
        | Command::Delete { .. }
        | Command::Propose { .. }
        | Command::Approve { .. }
        | Command::Reject { .. }
        | Command::Cancel { .. }
        | Command::Resolve { .. }
        | Command::AdmitNode { .. }
        | Command::LoadToolset { .. }
        | Command::Batch { .. } => None,
        // The notifier audits each delivery attempt itself, before it marks the notices.
        Command::Notified { .. } => None,
    }
}

impl ClusterPort for AuditedPort {
    fn node_id(&self) -> NodeId {
        self.cluster.id
    }

    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>> {
        let intent = home_decision(&command).map(|(call_id, decision)| {
            let chain = vec![format!("node:{}", self.cluster.id)];
            let registry = self.cluster.registry.read();
            let entry = match registry.call(call_id) {
                Some(call) => audit::call_decision(call, chain, decision),
                None => Entry {
                    kind: Kind::Approval,
                    chain,
                    decision: Some(decision.to_owned()),
                    call_id: Some(call_id.to_string()),
                    outcome: audit::REQUESTED.to_owned(),
                    ..Entry::default()
                },
            };
            (call_id.clone(), entry)
        });
        let Some((call_id, intent)) = intent else {
            return ClusterPort::propose(&self.cluster, command);
        };
        let audit_log = self.audit.clone();
        let cluster = self.cluster.clone();
        Box::pin(async move {
            let done = || audit::call_state_now(&cluster.registry, &call_id);
            audit::propose_written_ahead(&audit_log, &cluster, intent, command, done)
                .await
                .map_err(|e| ProposeError::Unavailable(audit::refusal_message(&e)))?
                .map(|(response, _)| response)
                .map_err(ProposeError::from)
        })
    }

    fn is_leader(&self) -> bool {
        ClusterPort::is_leader(&self.cluster)
    }

    fn voters(&self) -> Vec<NodeId> {
        ClusterPort::voters(&self.cluster)
    }

    fn learners(&self) -> Vec<NodeId> {
        ClusterPort::learners(&self.cluster)
    }

    fn reachable(&self, node: NodeId, window: Duration) -> bool {
        ClusterPort::reachable(&self.cluster, node, window)
    }

    fn place_new_tenants(&self, placer: Option<NewTenantPlacer>) {
        self.cluster.place_new_tenants(placer);
    }
}
