//! What keeps a failing upstream from taking the node with it: a retry of transient failures
//! for calls that may run twice, and a circuit breaker per upstream on this node.
//!
//! The breaker is a small state machine driven by explicit instants, so its tests need no clock.
//! It counts an attempt as failed when the upstream could not answer properly (a transport
//! error, a timeout, a 5xx, a 429); a tool that answers with its own error is a working upstream.

use gatehouse_actors::{ExecError, ToolOutput};
use gatehouse_registry::resource::{BreakerPolicy, RetryPolicy};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What one attempt came to.
#[derive(Debug)]
pub(super) struct Attempt {
    pub outcome: Result<ToolOutput, ExecError>,
    /// The upstream failed in a way another attempt might not: transport error, timeout, 5xx,
    /// 429.
    pub transient: bool,
    /// The attempt got as far as the upstream, so the breaker counts it.
    pub reached: bool,
}

impl Attempt {
    pub fn answered(output: ToolOutput) -> Self {
        Attempt {
            outcome: Ok(output),
            transient: false,
            reached: true,
        }
    }

    /// The upstream answered, but not something this node can use; another try would not help.
    pub fn answered_error(error: ExecError) -> Self {
        Attempt {
            outcome: Err(error),
            transient: false,
            reached: true,
        }
    }

    pub fn transient(outcome: Result<ToolOutput, ExecError>) -> Self {
        Attempt {
            outcome,
            transient: true,
            reached: true,
        }
    }

    /// Failed before reaching the upstream (a missing credential, a malformed binding): neither
    /// retried nor held against the upstream.
    pub fn refused(error: ExecError) -> Self {
        Attempt {
            outcome: Err(error),
            transient: false,
            reached: false,
        }
    }
}

/// One upstream's breaker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    /// When the one probe of a half-open breaker went out.
    probing: Option<Instant>,
}

/// Where a breaker stands, as the node's metrics report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// The cooldown is over: the next attempt (or the one out now) is the probe.
    HalfOpen,
    Open,
}

impl BreakerState {
    pub const ALL: [BreakerState; 3] = [
        BreakerState::Closed,
        BreakerState::HalfOpen,
        BreakerState::Open,
    ];

    /// The metrics label: `closed`, `half_open`, `open`.
    pub fn name(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Open => "open",
        }
    }

    /// The gauge value: 0 closed, 1 half-open, 2 open.
    pub fn level(self) -> i64 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        }
    }
}

/// Whether an attempt may go to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    Closed,
    /// The cooldown is over and this attempt is the one probe.
    Probe,
    /// Failing fast for this long still.
    Open(Duration),
}

impl Breaker {
    pub fn admit(&mut self, policy: BreakerPolicy, now: Instant) -> Admission {
        let cooldown = Duration::from_millis(policy.cooldown_ms);
        match (self.open_until, self.probing) {
            (None, _) => Admission::Closed,
            (Some(until), _) if now < until => Admission::Open(until - now),
            // A probe that never reported (its call was dropped) stops counting after a cooldown.
            (Some(_), Some(since)) if now < since + cooldown => Admission::Open(Duration::ZERO),
            (Some(_), _) => {
                self.probing = Some(now);
                Admission::Probe
            }
        }
    }

    pub fn record(&mut self, failed: bool, policy: BreakerPolicy, now: Instant) {
        if !failed {
            *self = Breaker::default();
            return;
        }
        self.failures = self.failures.saturating_add(1);
        if self.probing.is_some() || self.failures >= policy.failures {
            self.open_until = Some(now + Duration::from_millis(policy.cooldown_ms));
            self.probing = None;
        }
    }

    /// The attempt let through never reached the upstream: the next one may probe.
    pub fn release(&mut self) {
        self.probing = None;
    }

    pub fn state(&self, now: Instant) -> BreakerState {
        match self.open_until {
            None => BreakerState::Closed,
            Some(until) if now < until => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }
}

/// The breakers of every upstream this node has called, by upstream key.
#[derive(Debug, Default)]
pub(super) struct Breakers {
    by_upstream: Mutex<HashMap<String, Breaker>>,
}

impl Breakers {
    fn admit(&self, key: &str, name: &str, policy: BreakerPolicy) -> Result<(), ExecError> {
        let mut all = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match all
            .entry(key.to_owned())
            .or_default()
            .admit(policy, Instant::now())
        {
            Admission::Closed | Admission::Probe => Ok(()),
            Admission::Open(left) => Err(ExecError {
                message: format!(
                    "upstream {name} is failing; circuit open for {}s",
                    left.as_secs_f64().ceil() as u64
                ),
            }),
        }
    }

    fn record(&self, key: &str, failed: bool, policy: BreakerPolicy) {
        let mut all = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.entry(key.to_owned())
            .or_default()
            .record(failed, policy, Instant::now());
    }

    /// Every breaker's state now, by upstream key, in key order.
    pub fn snapshot(&self) -> Vec<(String, BreakerState)> {
        let now = Instant::now();
        let all = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut states: Vec<_> = all
            .iter()
            .map(|(key, breaker)| (key.clone(), breaker.state(now)))
            .collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states
    }

    fn release(&self, key: &str) {
        let mut all = self
            .by_upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(breaker) = all.get_mut(key) {
            breaker.release();
        }
    }
}

/// How one call goes to one upstream.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan<'a> {
    /// The breaker's key: the upstream's registry key.
    pub key: &'a str,
    /// The upstream's name, for messages.
    pub name: &'a str,
    pub retries: RetryPolicy,
    pub breaker: BreakerPolicy,
    /// Only a retry-safe call is attempted more than once.
    pub retry_safe: bool,
}

/// Runs `attempt` through the upstream's breaker, again after a transient failure while the
/// call is retry-safe and retries remain, with a doubling pause. The last attempt's outcome is
/// the call's.
pub(super) async fn run<F, Fut>(
    breakers: &Breakers,
    plan: Plan<'_>,
    mut attempt: F,
) -> Result<ToolOutput, ExecError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt>,
{
    let retries = if plan.retry_safe {
        plan.retries.attempts
    } else {
        0
    };
    let mut pause = Duration::from_millis(plan.retries.backoff_ms);
    let mut tried = 0;
    loop {
        breakers.admit(plan.key, plan.name, plan.breaker)?;
        let Attempt {
            outcome,
            transient,
            reached,
        } = attempt().await;
        if reached {
            breakers.record(plan.key, transient, plan.breaker);
        } else {
            breakers.release(plan.key);
        }
        if !transient || tried >= retries {
            return outcome;
        }
        tried += 1;
        tracing::debug!(
            upstream = plan.name,
            tried,
            "retrying a transient upstream failure"
        );
        tokio::time::sleep(pause).await;
        pause = pause.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: BreakerPolicy = BreakerPolicy {
        failures: 3,
        cooldown_ms: 1000,
    };

    #[test]
    fn the_breaker_opens_after_the_configured_failures_in_a_row() {
        let t0 = Instant::now();
        let mut breaker = Breaker::default();
        for _ in 0..2 {
            assert_eq!(breaker.admit(POLICY, t0), Admission::Closed);
            breaker.record(true, POLICY, t0);
        }
        // A success in between starts the count again.
        breaker.record(false, POLICY, t0);
        for _ in 0..3 {
            assert_eq!(breaker.admit(POLICY, t0), Admission::Closed);
            breaker.record(true, POLICY, t0);
        }
        assert_eq!(
            breaker.admit(POLICY, t0),
            Admission::Open(Duration::from_secs(1))
        );
        assert_eq!(
            breaker.admit(POLICY, t0 + Duration::from_millis(400)),
            Admission::Open(Duration::from_millis(600))
        );
    }

    #[test]
    fn after_the_cooldown_one_probe_decides() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(1500);
        let mut breaker = Breaker::default();
        for _ in 0..3 {
            breaker.record(true, POLICY, t0);
        }
        assert_eq!(breaker.admit(POLICY, later), Admission::Probe);
        // While the probe is out, others still fail fast.
        assert!(matches!(breaker.admit(POLICY, later), Admission::Open(_)));
        // A failed probe reopens at once, without waiting for three more failures.
        breaker.record(true, POLICY, later);
        assert_eq!(
            breaker.admit(POLICY, later),
            Admission::Open(Duration::from_secs(1))
        );
        let much_later = later + Duration::from_secs(2);
        assert_eq!(breaker.admit(POLICY, much_later), Admission::Probe);
        breaker.record(false, POLICY, much_later);
        assert_eq!(breaker.admit(POLICY, much_later), Admission::Closed);
        assert_eq!(breaker, Breaker::default());
    }

    #[test]
    fn the_state_follows_the_breaker_from_closed_to_open_to_half_open() {
        let t0 = Instant::now();
        let mut breaker = Breaker::default();
        assert_eq!(breaker.state(t0), BreakerState::Closed);
        for _ in 0..3 {
            breaker.record(true, POLICY, t0);
        }
        assert_eq!(breaker.state(t0), BreakerState::Open);
        let later = t0 + Duration::from_millis(1500);
        assert_eq!(breaker.state(later), BreakerState::HalfOpen);
        assert_eq!(breaker.admit(POLICY, later), Admission::Probe);
        assert_eq!(breaker.state(later), BreakerState::HalfOpen);
        breaker.record(false, POLICY, later);
        assert_eq!(breaker.state(later), BreakerState::Closed);

        let breakers = Breakers::default();
        breakers.record(
            "upstream/acme/b",
            true,
            BreakerPolicy {
                failures: 1,
                ..POLICY
            },
        );
        breakers.record("upstream/acme/a", false, POLICY);
        assert_eq!(
            breakers.snapshot(),
            [
                ("upstream/acme/a".to_owned(), BreakerState::Closed),
                ("upstream/acme/b".to_owned(), BreakerState::Open),
            ]
        );
    }
}
