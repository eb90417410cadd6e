//! The executor the tenant actors use: every upstream request of a claimed execution has a
//! durable execution-start record before it is made, and its outcome after.
//!
//! A start record that cannot be made durable means the request is not made: the execution
//! fails with an error saying so, and the actor reports that as the call's outcome (`failed`).
//! The node knows for certain the upstream was not called, so the failover rules' `outcome
//! unknown` would be false, and a re-claim would meet the same broken log.

use super::audit::{self, execution_entry, execution_outcome};
use futures::FutureExt;
use futures::future::BoxFuture;
use gatehouse_actors::{ExecError, Execution, Executor, ToolOutput};
use gatehouse_audit::AuditLog;
use gatehouse_raft_store::SharedRegistry;
use std::sync::Arc;

pub struct Audited {
    inner: Arc<dyn Executor>,
    registry: SharedRegistry,
    audit: AuditLog,
}

impl std::fmt::Debug for Audited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audited").finish_non_exhaustive()
    }
}

impl Audited {
    pub fn new(inner: Arc<dyn Executor>, registry: SharedRegistry, audit: AuditLog) -> Self {
        Audited {
            inner,
            registry,
            audit,
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
        let audited = Audited::new(upstream.clone(), SharedRegistry::default(), log.clone());
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
        let audited = Audited::new(upstream.clone(), SharedRegistry::default(), log.clone());
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
}
