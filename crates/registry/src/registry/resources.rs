//! Putting and deleting resources: all of a batch or none of it, generations that grow only on
//! a real change, and the references between resources kept whole.

use super::{Registry, SortedKey, Stored};
use crate::call::Timestamp;
use crate::command::{Change, ResourceChange, Response};
use crate::error::ApplyError;
use crate::resource::{Kind, Resource, ResourceKey};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Most webhooks one tenant may have.
pub const MAX_WEBHOOKS_PER_TENANT: usize = 16;

impl Registry {
    pub(super) fn put(
        &mut self,
        index: u64,
        resources: &[Resource],
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let mut seen = BTreeSet::new();
        let batch_tenants: BTreeSet<&str> = resources
            .iter()
            .filter_map(|r| match r {
                Resource::Tenant(t) => Some(t.metadata.name.as_str()),
                _ => None,
            })
            .collect();
        for resource in resources {
            let key = resource.key();
            if !seen.insert(key.clone()) {
                return Err(ApplyError::Refused {
                    reason: format!("{key} appears twice in one batch"),
                });
            }
            if let Some(tenant) = resource.tenant()
                && !batch_tenants.contains(tenant)
                && !self.tenant_exists(tenant)
            {
                return Err(ApplyError::NotFound {
                    what: format!("tenant {tenant} (named by {key})"),
                });
            }
        }

        self.check_webhook_count(resources)?;

        let mut changes = Vec::with_capacity(resources.len());
        for resource in resources {
            let key = resource.key();
            // One look-up in the map of every resource, whether the key is new or not: with tens
            // of thousands of resources a look-up passes a dozen keys, each compared by the
            // prefix it keeps in the map's node (`sorted_key.rs`).
            let (change, generation) = match self.state.resources.entry(SortedKey::new(key.clone()))
            {
                Entry::Occupied(same) if same.get().resource == *resource => {
                    (Change::Unchanged, same.get().generation)
                }
                entry => {
                    let generation = bump_generation(&mut self.state.generations, &key);
                    let stored = Stored {
                        resource: resource.clone(),
                        generation,
                    };
                    let change = match entry {
                        Entry::Occupied(mut old) => {
                            old.insert(stored);
                            Change::Updated
                        }
                        Entry::Vacant(slot) => {
                            slot.insert(stored);
                            Change::Created
                        }
                    };
                    (change, generation)
                }
            };
            if change == Change::Created && key.kind == Kind::Webhook {
                self.state.webhooks_since.insert(key.clone(), at);
            }
            if change != Change::Unchanged {
                self.note_change(index, &key);
            }
            changes.push(ResourceChange {
                key,
                change,
                generation,
            });
        }
        if resources.iter().any(|r| r.kind() == Kind::Principal) {
            self.rebuild_key_index();
        }
        // Every tenant the batch named exists now: no need to look each one up again.
        for tenant in &batch_tenants {
            self.settle_existing(tenant);
        }
        Ok(Response::Resources { changes })
    }

    pub(super) fn delete(
        &mut self,
        index: u64,
        keys: &[ResourceKey],
    ) -> Result<Response, ApplyError> {
        let deleting: BTreeSet<&ResourceKey> = keys.iter().collect();
        for key in keys {
            if !self.state.resources.contains_key(key) {
                return Err(ApplyError::NotFound {
                    what: key.to_string(),
                });
            }
            if key.kind == Kind::Tenant {
                // The tenant's resources of each kind are one range of keys: no scan of every
                // resource in the registry per deleted tenant.
                let left = Kind::ALL
                    .into_iter()
                    .flat_map(|kind| self.list(kind, Some(Some(key.name.as_str())), None))
                    .filter(|stored| !deleting.contains(&stored.resource.key()))
                    .count();
                if left > 0 {
                    return Err(ApplyError::InUse {
                        what: key.to_string(),
                        by: format!("{left} resource(s) of the tenant; delete them first"),
                    });
                }
                let open = self.unfinished_calls_of(&key.name).count();
                if open > 0 {
                    return Err(ApplyError::InUse {
                        what: key.to_string(),
                        by: format!("{open} unfinished call(s)"),
                    });
                }
            }
        }
        let mut changes = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some(stored) = self.state.resources.remove(key) {
                self.state.webhooks_since.remove(key);
                self.note_change(index, key);
                changes.push(ResourceChange {
                    key: key.clone(),
                    change: Change::Deleted,
                    generation: stored.generation,
                });
            }
        }
        if keys.iter().any(|k| k.kind == Kind::Principal) {
            self.rebuild_key_index();
        }
        for key in keys.iter().filter(|k| k.kind == Kind::Tenant) {
            self.settle(&key.name);
        }
        Ok(Response::Resources { changes })
    }

    /// Refuses a put that would leave a tenant with more than [`MAX_WEBHOOKS_PER_TENANT`]
    /// webhooks: each one is a request per notice, and a tenant's admin must not turn one call
    /// into a flood at some host.
    fn check_webhook_count(&self, resources: &[Resource]) -> Result<(), ApplyError> {
        let mut added: BTreeMap<&str, usize> = BTreeMap::new();
        for resource in resources {
            if let (Resource::Webhook(_), Some(tenant)) = (resource, resource.tenant())
                && !self.state.resources.contains_key(&resource.key())
            {
                *added.entry(tenant).or_default() += 1;
            }
        }
        for (tenant, new) in added {
            let held = self.list(Kind::Webhook, Some(Some(tenant)), None).count();
            if held + new > MAX_WEBHOOKS_PER_TENANT {
                return Err(ApplyError::Refused {
                    reason: format!(
                        "tenant {tenant} would have {} webhooks; at most \
                         {MAX_WEBHOOKS_PER_TENANT}",
                        held + new
                    ),
                });
            }
        }
        Ok(())
    }

    pub fn tenant_exists(&self, tenant: &str) -> bool {
        self.state
            .resources
            .contains_key(&SortedKey::new(ResourceKey {
                kind: Kind::Tenant,
                tenant: None,
                name: tenant.to_owned(),
            }))
    }

    /// The resource's current generation, 0 if it has never existed. Survives deletes.
    pub fn generation_of(&self, key: &ResourceKey) -> u64 {
        self.state.resources.get(key).map_or(0, |s| s.generation)
    }

    /// Keeps the per-tenant change marks that caches and claims compare against.
    fn note_change(&mut self, index: u64, key: &ResourceKey) {
        match key.kind {
            Kind::Skill => {
                self.state.cascade_changed.insert(key.tenant.clone(), index);
            }
            Kind::Policy => {
                if let Some(tenant) = &key.tenant {
                    *self
                        .state
                        .policy_generations
                        .entry(tenant.clone())
                        .or_insert(0) += 1;
                }
            }
            _ => {}
        }
    }
}

/// The resource's next generation, counted on from the last it ever had.
fn bump_generation(generations: &mut HashMap<ResourceKey, u64>, key: &ResourceKey) -> u64 {
    let counter = generations.entry(key.clone()).or_insert(0);
    *counter += 1;
    *counter
}
