//! Rate budgets: at most `calls` calls per `per_seconds` for each (tenant, tool), as a token
//! bucket that holds `calls` tokens and refills `calls` of them every `per_seconds`.
//!
//! A budget is counted on each node by itself: a cluster of N nodes admits up to N times the
//! budget when agents spread their calls over every node. Counting cluster-wide would put a Raft
//! round trip (or a lease on a counter) on every call's read path, which budgets are meant to keep
//! cheap; a tenant that needs a tight cluster-wide limit divides its budget by the node count.

use gatehouse_registry::resource::Budget;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often, in the callers' clock, buckets that have refilled are forgotten.
const SWEEP_EVERY_MS: u64 = 60_000;

/// A refused call may try again after this long, when a token is back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

/// This node's buckets, shared by its clones. Memory is bounded by the (tenant, tool) pairs
/// called within about one budget window: a bucket idle long enough to be full again is the same
/// as no bucket, and a sweep forgets it.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    buckets: HashMap<(String, String), Bucket>,
    last_sweep_ms: u64,
}

/// Tokens are counted in units of `1 / (per_seconds * 1000)` of a call, so that a millisecond
/// refills exactly `calls` units and nothing is lost to rounding.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    calls: u64,
    per_seconds: u64,
    units: u128,
    at_ms: u64,
}

impl Bucket {
    fn full(budget: &Budget, now_ms: u64) -> Bucket {
        let mut bucket = Bucket {
            calls: budget.calls,
            per_seconds: budget.per_seconds,
            units: 0,
            at_ms: now_ms,
        };
        bucket.units = bucket.capacity();
        bucket
    }

    /// Units one call takes.
    fn cost(&self) -> u128 {
        u128::from(self.per_seconds) * 1000
    }

    fn capacity(&self) -> u128 {
        u128::from(self.calls) * self.cost()
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed = u128::from(now_ms.saturating_sub(self.at_ms));
        self.units = (self.units + elapsed * u128::from(self.calls)).min(self.capacity());
        self.at_ms = self.at_ms.max(now_ms);
    }

    fn is_full_at(&self, now_ms: u64) -> bool {
        let mut copy = *self;
        copy.refill(now_ms);
        copy.units >= copy.capacity()
    }
}

impl Budgets {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes one call from the (tenant, tool) bucket at `now_ms` (milliseconds of any clock
    /// that does not go back), or says how long until one is there. A budget changed since the
    /// last call (other `calls` or `per_seconds`) starts a full bucket.
    pub fn check(
        &self,
        tenant: &str,
        tool: &str,
        budget: &Budget,
        now_ms: u64,
    ) -> Result<(), RetryAfter> {
        if budget.calls == 0 || budget.per_seconds == 0 {
            // Refused by validation; kept safe anyway: no calls at all.
            return Err(RetryAfter(Duration::from_secs(budget.per_seconds.max(1))));
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if now_ms.saturating_sub(inner.last_sweep_ms) >= SWEEP_EVERY_MS {
            inner.sweep(now_ms);
        }
        let bucket = inner
            .buckets
            .entry((tenant.to_owned(), tool.to_owned()))
            .or_insert_with(|| Bucket::full(budget, now_ms));
        if bucket.calls != budget.calls || bucket.per_seconds != budget.per_seconds {
            *bucket = Bucket::full(budget, now_ms);
        }
        bucket.refill(now_ms);
        if bucket.units >= bucket.cost() {
            bucket.units -= bucket.cost();
            return Ok(());
        }
        let missing = bucket.cost() - bucket.units;
        let wait_ms = missing.div_ceil(u128::from(bucket.calls));
        Err(RetryAfter(Duration::from_millis(
            u64::try_from(wait_ms).unwrap_or(u64::MAX),
        )))
    }

    /// Forgets every bucket that is full again at `now_ms`. `check` calls it once a minute.
    pub fn sweep(&self, now_ms: u64) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sweep(now_ms);
    }

    /// How many (tenant, tool) buckets are remembered.
    pub fn tracked(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .buckets
            .len()
    }
}

impl Inner {
    fn sweep(&mut self, now_ms: u64) {
        self.buckets.retain(|_, b| !b.is_full_at(now_ms));
        self.last_sweep_ms = now_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(calls: u64, per_seconds: u64) -> Budget {
        Budget {
            tools: "*".into(),
            calls,
            per_seconds,
        }
    }

    #[test]
    fn the_call_past_the_budget_is_refused_until_a_token_is_back() {
        let budgets = Budgets::new();
        let b = budget(3, 60);
        for _ in 0..3 {
            assert_eq!(budgets.check("acme", "crm.search", &b, 1_000), Ok(()));
        }
        // 3 per 60 s refills one call every 20 s.
        assert_eq!(
            budgets.check("acme", "crm.search", &b, 1_000),
            Err(RetryAfter(Duration::from_secs(20)))
        );
        assert_eq!(
            budgets.check("acme", "crm.search", &b, 6_000),
            Err(RetryAfter(Duration::from_secs(15)))
        );
        assert_eq!(
            budgets.check("acme", "crm.search", &b, 20_999),
            Err(RetryAfter(Duration::from_millis(1)))
        );
        assert_eq!(budgets.check("acme", "crm.search", &b, 21_000), Ok(()));
        assert_eq!(
            budgets.check("acme", "crm.search", &b, 21_000),
            Err(RetryAfter(Duration::from_secs(20)))
        );
    }

    #[test]
    fn a_retry_after_rounds_up_to_the_millisecond() {
        let budgets = Budgets::new();
        // 3 per 1 s: a token every 333.33 ms.
        let b = budget(3, 1);
        for _ in 0..3 {
            budgets.check("acme", "t", &b, 0).unwrap();
        }
        assert_eq!(
            budgets.check("acme", "t", &b, 0),
            Err(RetryAfter(Duration::from_millis(334)))
        );
        assert!(budgets.check("acme", "t", &b, 333).is_err());
        assert_eq!(budgets.check("acme", "t", &b, 334), Ok(()));
    }

    #[test]
    fn an_idle_bucket_refills_to_its_capacity_and_no_further() {
        let budgets = Budgets::new();
        let b = budget(2, 10);
        budgets.check("acme", "t", &b, 0).unwrap();
        budgets.check("acme", "t", &b, 0).unwrap();
        // An hour idle gives back two calls, not 720.
        let later = 3_600_000;
        assert_eq!(budgets.check("acme", "t", &b, later), Ok(()));
        assert_eq!(budgets.check("acme", "t", &b, later), Ok(()));
        assert_eq!(
            budgets.check("acme", "t", &b, later),
            Err(RetryAfter(Duration::from_secs(5)))
        );
    }

    #[test]
    fn each_tenant_and_tool_has_its_own_bucket() {
        let budgets = Budgets::new();
        let b = budget(1, 60);
        assert_eq!(budgets.check("acme", "crm.search", &b, 0), Ok(()));
        assert!(budgets.check("acme", "crm.search", &b, 0).is_err());
        assert_eq!(budgets.check("acme", "crm.update", &b, 0), Ok(()));
        assert_eq!(budgets.check("globex", "crm.search", &b, 0), Ok(()));
        assert!(budgets.check("acme", "crm.update", &b, 0).is_err());
        assert_eq!(budgets.tracked(), 3);
    }

    #[test]
    fn a_changed_budget_starts_a_full_bucket() {
        let budgets = Budgets::new();
        let old = budget(1, 60);
        budgets.check("acme", "t", &old, 0).unwrap();
        assert!(budgets.check("acme", "t", &old, 0).is_err());
        let new = budget(2, 60);
        assert_eq!(budgets.check("acme", "t", &new, 0), Ok(()));
        assert_eq!(budgets.check("acme", "t", &new, 0), Ok(()));
        assert_eq!(
            budgets.check("acme", "t", &new, 0),
            Err(RetryAfter(Duration::from_secs(30)))
        );
        // A different window with the same count is a change too.
        let slower = budget(2, 120);
        assert_eq!(budgets.check("acme", "t", &slower, 0), Ok(()));
    }

    #[test]
    fn buckets_full_again_are_forgotten_and_busy_ones_kept() {
        let budgets = Budgets::new();
        let short = budget(1, 1);
        let long = budget(1, 3_600);
        for tool in ["a", "b", "c"] {
            budgets.check("acme", tool, &short, 0).unwrap();
        }
        budgets.check("acme", "slow", &long, 0).unwrap();
        assert_eq!(budgets.tracked(), 4);
        budgets.sweep(500);
        assert_eq!(budgets.tracked(), 4, "half refilled is not full");
        budgets.sweep(1_000);
        assert_eq!(
            budgets.tracked(),
            1,
            "only the hour-long bucket is still refilling"
        );
        // Forgetting a full bucket changes nothing for its next caller.
        assert_eq!(budgets.check("acme", "a", &short, 1_000), Ok(()));
        assert!(budgets.check("acme", "a", &short, 1_000).is_err());
        assert!(budgets.check("acme", "slow", &long, 1_000).is_err());
    }

    #[test]
    fn checks_sweep_by_themselves_once_a_minute() {
        let budgets = Budgets::new();
        let b = budget(1, 1);
        for i in 0..100 {
            budgets.check("acme", &format!("tool{i}"), &b, 0).unwrap();
        }
        assert_eq!(budgets.tracked(), 100);
        budgets.check("acme", "other", &b, 59_999).unwrap();
        assert_eq!(
            budgets.tracked(),
            101,
            "no sweep before a minute has passed"
        );
        budgets.check("acme", "other2", &b, SWEEP_EVERY_MS).unwrap();
        assert_eq!(
            budgets.tracked(),
            2,
            "the sweep kept only buckets still refilling"
        );
    }
}
