//! Putting and deleting resources: all of a batch or none of it, generations that grow only on
//! a real change, and the references between resources kept whole.

use super::{Registry, Stored};
use crate::command::{Change, ResourceChange, Response};
use crate::error::ApplyError;
use crate::resource::{Kind, Resource, ResourceKey};
use std::collections::BTreeSet;

impl Registry {
    pub(super) fn put(
        &mut self,
        index: u64,
        resources: &[Resource],
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

        let mut changes = Vec::with_capacity(resources.len());
        for resource in resources {
            let key = resource.key();
            let unchanged = self
                .state
                .resources
                .get(&key)
                .filter(|s| s.resource == *resource)
                .map(|s| s.generation);
            if let Some(generation) = unchanged {
                changes.push(ResourceChange {
                    key,
                    change: Change::Unchanged,
                    generation,
                });
                continue;
            }
            let existed = self.state.resources.contains_key(&key);
            let generation = self.bump_generation(&key);
            self.note_change(index, &key);
            self.state.resources.insert(
                key.clone(),
                Stored {
                    resource: resource.clone(),
                    generation,
                },
            );
            changes.push(ResourceChange {
                key,
                change: if existed {
                    Change::Updated
                } else {
                    Change::Created
                },
                generation,
            });
        }
        if resources.iter().any(|r| r.kind() == Kind::Principal) {
            self.rebuild_key_index();
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
                let left = self
                    .state
                    .resources
                    .keys()
                    .filter(|k| {
                        k.tenant.as_deref() == Some(key.name.as_str()) && !deleting.contains(k)
                    })
                    .count();
                if left > 0 {
                    return Err(ApplyError::InUse {
                        what: key.to_string(),
                        by: format!("{left} resource(s) of the tenant; delete them first"),
                    });
                }
                let open = self
                    .calls_of(&key.name)
                    .filter(|c| !c.state.is_finished())
                    .count();
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
        Ok(Response::Resources { changes })
    }

    pub fn tenant_exists(&self, tenant: &str) -> bool {
        self.state.resources.contains_key(&ResourceKey {
            kind: Kind::Tenant,
            tenant: None,
            name: tenant.to_owned(),
        })
    }

    /// The resource's current generation, 0 if it has never existed. Survives deletes.
    pub fn generation_of(&self, key: &ResourceKey) -> u64 {
        self.state.resources.get(key).map_or(0, |s| s.generation)
    }

    fn bump_generation(&mut self, key: &ResourceKey) -> u64 {
        let counter = self.state.generations.entry(key.clone()).or_insert(0);
        *counter += 1;
        *counter
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
