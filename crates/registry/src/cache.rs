//! The resolved-cascade cache, per (tenant, tool, user). Each entry remembers the applied index
//! it was computed at: it serves only while no skill change of its tenant (or a global one) has
//! been applied since, and an entry computed at an older index never replaces a newer one.

use crate::cascade::{Query, Resolution};
use moka::ops::compute::Op;
use std::sync::Arc;

#[derive(Debug, Clone)]
struct Entry {
    computed_at: u64,
    resolution: Arc<Resolution>,
}

/// Cheap to clone: clones share one cache.
#[derive(Clone)]
pub struct CascadeCache {
    entries: moka::sync::Cache<Query, Entry>,
}

impl std::fmt::Debug for CascadeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CascadeCache")
            .field("entries", &self.entries.entry_count())
            .finish()
    }
}

impl CascadeCache {
    pub fn new(max_entries: u64) -> Self {
        CascadeCache {
            entries: moka::sync::Cache::new(max_entries),
        }
    }

    /// The cached resolution if it is still current, else `resolve()` computed at `applied`
    /// and stored. `changed_at` is the registry's `cascade_changed_at(tenant)`.
    pub fn get_or_resolve(
        &self,
        query: &Query,
        changed_at: u64,
        applied: u64,
        resolve: impl FnOnce() -> Resolution,
    ) -> Arc<Resolution> {
        if let Some(hit) = self.entries.get(query)
            && hit.computed_at >= changed_at
        {
            return hit.resolution;
        }
        let fresh = Entry {
            computed_at: applied,
            resolution: Arc::new(resolve()),
        };
        let resolution = fresh.resolution.clone();
        self.entries
            .entry_by_ref(query)
            .and_compute_with(|existing| match existing {
                Some(e) if e.value().computed_at > applied => Op::Nop,
                _ => Op::Put(fresh),
            });
        resolution
    }

    pub fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query() -> Query {
        Query {
            tenant: "acme".into(),
            tool: "a.b".into(),
            user: None,
        }
    }

    fn resolution(text: &str) -> Resolution {
        Resolution {
            resolved_context: text.into(),
            trace: vec![],
        }
    }

    #[test]
    fn a_current_entry_is_served_without_resolving() {
        let cache = CascadeCache::new(100);
        cache.get_or_resolve(&query(), 3, 5, || resolution("v5"));
        let got = cache.get_or_resolve(&query(), 3, 9, || panic!("must not resolve"));
        assert_eq!(got.resolved_context, "v5");
    }

    #[test]
    fn a_change_after_the_entry_forces_a_new_resolution() {
        let cache = CascadeCache::new(100);
        cache.get_or_resolve(&query(), 3, 5, || resolution("v5"));
        let got = cache.get_or_resolve(&query(), 7, 7, || resolution("v7"));
        assert_eq!(got.resolved_context, "v7");
        let again = cache.get_or_resolve(&query(), 7, 8, || panic!("v7 is current"));
        assert_eq!(again.resolved_context, "v7");
    }

    #[test]
    fn a_stale_resolution_is_never_written_back() {
        let cache = CascadeCache::new(100);
        cache.get_or_resolve(&query(), 7, 9, || resolution("v9"));
        // A slow reader that computed at index 6 returns its answer but must not store it.
        let slow = cache.get_or_resolve(&query(), 10, 6, || resolution("v6"));
        assert_eq!(slow.resolved_context, "v6");
        let current = cache.get_or_resolve(&query(), 7, 9, || panic!("v9 must still be stored"));
        assert_eq!(current.resolved_context, "v9");
    }
}
