//! The executor the tenant actors use: every upstream request of a claimed execution has a
//! durable execution-start record before it is made, and its outcome after.
//!
//! A start record that cannot be made durable means the request is not made: the execution
//! fails with an error saying so, and the actor reports that as the call's outcome (`failed`).
//! The node knows for certain the upstream was not called, so the failover rules' `outcome
//! unknown` would be false, and a re-claim would meet the same broken log.
//!
//! The same records answer, after a crash, whether a claim of this node's ever sent its request
//! ([`Executor::never_sent`]): a claim with no start record was not sent, and its call is
//! claimed again rather than left `outcome_unknown` for a person.

use super::audit::{self, execution_entry, execution_outcome};
use futures::FutureExt;
use futures::future::BoxFuture;
use gatehouse_actors::{ExecError, Execution, Executor, ToolOutput};
use gatehouse_audit::AuditLog;
use gatehouse_raft_store::SharedRegistry;
use gatehouse_registry::call::Claim;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// How far before a claim's time its start record is looked for: the claim's time is the
/// proposing node's clock, the record's the same node's a moment later, so only a clock stepped
/// back between the two could put the record earlier.
const CLOCK_SLACK_MS: u64 = 60_000;

pub struct Audited {
    inner: Arc<dyn Executor>,
    registry: SharedRegistry,
    audit: AuditLog,
    /// The audit log's directory, read back for start records of claims of an earlier run.
    audit_dir: PathBuf,
    /// Claims this process began an execution under, from just before their start record.
    started: Arc<Mutex<HashSet<String>>>,
    /// What the log said about claims asked after: never sent (true) or maybe sent.
    answered: Mutex<HashMap<String, bool>>,
}

impl std::fmt::Debug for Audited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audited").finish_non_exhaustive()
    }
}

impl Audited {
    pub fn new(
        inner: Arc<dyn Executor>,
        registry: SharedRegistry,
        audit: AuditLog,
        audit_dir: PathBuf,
    ) -> Self {
        Audited {
            inner,
            registry,
            audit,
            audit_dir,
            started: Arc::default(),
            answered: Mutex::default(),
        }
    }

    /// Reads the log back to `claim`'s time for a start record under it. Anything short of a
    /// complete read that found none (an unreadable log, a log whose start was cut away) is
    /// "maybe sent".
    fn no_start_record(&self, claim: &Claim) -> bool {
        let since = claim.at.saturating_sub(CLOCK_SLACK_MS);
        match gatehouse_audit::since(&self.audit_dir, since) {
            Ok((records, complete)) => {
                complete
                    && !records.iter().any(|r| {
                        r.entry.decision.as_deref() == Some("execute")
                            && r.entry.claim_id.as_deref() == Some(claim.claim_id.as_str())
                    })
            }
            Err(e) => {
                tracing::warn!(error = %e, claim = %claim.claim_id, "the audit log could not be read back; the claim counts as maybe sent");
                false
            }
        }
    }
}

impl Executor for Audited {
    fn execute(&self, execution: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
        let start = {
            let registry = self.registry.read();
            let spec = registry.call(&execution.call_id).map(|c| &c.spec);
            execution_entry(&execution, spec)
        };
        let inner = self.inner.clone();
        let audit = self.audit.clone();
        if let Some(claim) = &execution.claim_id {
            // Before the record, so that no moment exists in which the request may go out and
            // the claim still reads as never sent.
            self.started
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(claim.clone());
        }
        async move {
            if let Err(e) = audit.record_durable(start.clone()).await {
                return Err(ExecError {
                    message: format!("not sent to the upstream: {}", audit::refusal_message(&e)),
                });
            }
            let result = inner.execute(execution).await;
            // The request was made: its outcome is reported whatever the log does now. The
            // start record already says it was made; the registry's `Complete` says how it
            // ended.
            if let Err(e) = audit
                .record_durable(execution_outcome(start, &result))
                .await
            {
                tracing::error!(error = %e, "an execution's outcome could not be audited");
            }
            result
        }
        .boxed()
    }

    fn never_sent(&self, claim: &Claim) -> bool {
        if self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&claim.claim_id)
        {
            return false;
        }
        if let Some(known) = self
            .answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&claim.claim_id)
        {
            return *known;
        }
        let never = self.no_start_record(claim);
        self.answered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(claim.claim_id.clone(), never);
        never
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_audit::Record;
    use gatehouse_registry::CallId;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its invocations: the upstream, as far as this test is concerned.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Executor for Counting {
        fn execute(&self, _: Execution) -> BoxFuture<'static, Result<ToolOutput, ExecError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            futures::future::ready(Ok(ToolOutput {
                result_json: r#"{"ok":true}"#.into(),
                is_error: false,
            }))
            .boxed()
        }
    }

    fn execution() -> Execution {
        Execution {
            call_id: CallId::from_random(9),
            claim_id: Some("claim_1".into()),
            tenant: "acme".into(),
            tool: "ops.drop_table".into(),
            arguments: r#"{"table":"t"}"#.into(),
            idempotency_key: "k".into(),
            skill_context: None,
            end_user: None,
            retry_safe: false,
            trace_parent: None,
        }
    }

    fn records(dir: &std::path::Path) -> Vec<Record> {
        gatehouse_audit::tail(dir, 100).unwrap()
    }

    #[tokio::test]
    async fn the_start_is_on_disk_before_the_upstream_is_called_and_the_outcome_after() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path(), 1).unwrap();
        let upstream = Arc::new(Counting::default());
        let audited = Audited::new(
            upstream.clone(),
            SharedRegistry::default(),
            log.clone(),
            dir.path().to_owned(),
        );
        audited.execute(execution()).await.unwrap();
        assert_eq!(upstream.0.load(Ordering::SeqCst), 1);
        let written = records(dir.path());
        let outcomes: Vec<(&str, Option<&str>)> = written
            .iter()
            .map(|r| (r.entry.outcome.as_str(), r.entry.claim_id.as_deref()))
            .collect();
        assert_eq!(
            outcomes,
            [("started", Some("claim_1")), ("succeeded", Some("claim_1"))]
        );
        assert_eq!(
            written[0].entry.args_sha256.as_deref(),
            Some(gatehouse_registry::canonical::sha256_hex(br#"{"table":"t"}"#).as_str())
        );
        log.close().await;
    }

    #[tokio::test]
    async fn an_audit_log_that_cannot_write_means_the_upstream_is_never_called() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path(), 1).unwrap();
        log.inject_write_failure("disk full (injected)");
        let upstream = Arc::new(Counting::default());
        let audited = Audited::new(
            upstream.clone(),
            SharedRegistry::default(),
            log.clone(),
            dir.path().to_owned(),
        );
        let refused = audited.execute(execution()).await.unwrap_err();
        assert!(
            refused.message.contains("not sent to the upstream")
                && refused.message.contains("disk full"),
            "{refused}"
        );
        assert_eq!(upstream.0.load(Ordering::SeqCst), 0);
        log.close().await;
        assert!(records(dir.path()).is_empty());
    }

    fn claim(id: &str, at: u64) -> Claim {
        Claim {
            claim_id: id.into(),
            node: 1,
            epoch: 1,
            at,
        }
    }

    #[tokio::test]
    async fn after_a_restart_a_claim_reads_as_never_sent_only_without_a_start_record() {
        let dir = tempfile::tempdir().unwrap();
        let before = gatehouse_cluster::cluster::now_ms();
        // The run before the crash: claim_1's request went out.
        let log = AuditLog::open(dir.path(), 1).unwrap();
        let upstream = Arc::new(Counting::default());
        let first = Audited::new(
            upstream.clone(),
            SharedRegistry::default(),
            log.clone(),
            dir.path().to_owned(),
        );
        first.execute(execution()).await.unwrap();
        log.close().await;

        let log = AuditLog::open(dir.path(), 1).unwrap();
        let second = Audited::new(
            upstream.clone(),
            SharedRegistry::default(),
            log.clone(),
            dir.path().to_owned(),
        );
        assert!(
            !second.never_sent(&claim("claim_1", before)),
            "its start record is in the log"
        );
        assert!(
            second.never_sent(&claim("claim_2", before)),
            "no record names it"
        );
        // A claim this run began under counts as sent before its record is even written.
        log.inject_write_failure("disk full (injected)");
        let mut third = execution();
        third.claim_id = Some("claim_3".into());
        second.execute(third).await.unwrap_err();
        assert!(!second.never_sent(&claim("claim_3", before)));
        log.close().await;
    }
}
