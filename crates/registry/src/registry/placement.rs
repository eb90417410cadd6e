//! Placement: which node is home to each tenant's approval queue, under which epoch, and a
//! planned move to another node. The leader decides (`gatehouse_actors::placement`); apply only
//! records its steps and refuses a home command whose epoch is not the current one.

use super::Registry;
use crate::call::NodeId;
use crate::command::Response;
use crate::error::ApplyError;
use serde::{Deserialize, Serialize};
use std::collections::hash_map::Entry;

/// Where a tenant's approval queue lives; `epoch` grows on every move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub home: NodeId,
    pub epoch: u64,
    /// A planned move is under way: the home claims nothing more, its running executions
    /// finish, then the leader places the tenant on this node under the next epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_to: Option<NodeId>,
}

impl Registry {
    pub fn placement(&self, tenant: &str) -> Option<Placement> {
        self.state.placements.get(tenant).copied()
    }

    /// Every tenant's placement, in no particular order.
    pub fn placements(&self) -> impl Iterator<Item = (&str, Placement)> + '_ {
        self.state.placements.iter().map(|(t, p)| (t.as_str(), *p))
    }

    /// Tenants that have no home yet or are moving, in order: the only ones a placement step
    /// can be due for while the voters and their reachability stay as they were.
    pub fn unsettled_tenants(&self) -> impl Iterator<Item = &str> + '_ {
        self.unsettled.iter().map(String::as_str)
    }

    /// Brings `tenant`'s entry in the unsettled set in step with the state; called by every
    /// command that creates or deletes a tenant or changes a placement.
    pub(super) fn settle(&mut self, tenant: &str) {
        if self.tenant_exists(tenant) {
            self.settle_existing(tenant);
        } else {
            self.unsettled.remove(tenant);
        }
    }

    /// [`Self::settle`] for a tenant the caller knows exists.
    pub(super) fn settle_existing(&mut self, tenant: &str) {
        if self.is_unsettled(tenant) {
            self.unsettled.insert(tenant.to_owned());
        } else {
            self.unsettled.remove(tenant);
        }
    }

    /// The unsettled set from scratch, for a registry loaded or rewritten whole.
    pub(super) fn rebuild_unsettled(&mut self) {
        self.unsettled = self
            .tenants()
            .filter(|t| self.is_unsettled(t))
            .map(str::to_owned)
            .collect();
    }

    /// No home yet, or a move under way (whether the tenant exists is the caller's to know).
    fn is_unsettled(&self, tenant: &str) -> bool {
        self.placement(tenant).is_none_or(|p| p.moving_to.is_some())
    }

    pub(super) fn place(
        &mut self,
        tenant: &str,
        home: NodeId,
        epoch: u64,
    ) -> Result<Response, ApplyError> {
        if !self.tenant_exists(tenant) {
            return Err(ApplyError::NotFound {
                what: format!("tenant {tenant}"),
            });
        }
        let placed = Placement {
            home,
            epoch,
            moving_to: None,
        };
        // One look-up for the epoch check and the write.
        match self.state.placements.entry(tenant.to_owned()) {
            Entry::Occupied(current) if epoch <= current.get().epoch => {
                let current = current.get().epoch;
                return Err(ApplyError::Refused {
                    reason: format!(
                        "placement epoch {epoch} for tenant {tenant} is not above the current {current}"
                    ),
                });
            }
            Entry::Occupied(mut current) => {
                current.insert(placed);
            }
            Entry::Vacant(slot) => {
                slot.insert(placed);
            }
        }
        // The tenant exists and its home is settled, with no move under way.
        self.unsettled.remove(tenant);
        Ok(Response::Placed {
            tenant: tenant.to_owned(),
            home,
            epoch,
        })
    }

    /// Records the start of a planned move; the leader places the tenant on `to` later.
    pub(super) fn start_move(
        &mut self,
        tenant: &str,
        epoch: u64,
        to: NodeId,
    ) -> Result<Response, ApplyError> {
        let Some(placement) = self.state.placements.get_mut(tenant) else {
            return Err(ApplyError::NotFound {
                what: format!("placement of tenant {tenant}"),
            });
        };
        if placement.epoch != epoch {
            return Err(ApplyError::StaleEpoch {
                tenant: tenant.to_owned(),
                node: placement.home,
                epoch,
                home: Some(placement.home),
                current: placement.epoch,
            });
        }
        placement.moving_to = Some(to);
        let home = placement.home;
        self.settle(tenant);
        Ok(Response::Placed {
            tenant: tenant.to_owned(),
            home,
            epoch,
        })
    }

    /// Refuses a home command (claim, expire, mark unknown) from anyone but the tenant's home
    /// under its current epoch.
    pub(super) fn check_home(
        &self,
        tenant: &str,
        node: NodeId,
        epoch: u64,
    ) -> Result<(), ApplyError> {
        match self.placement(tenant) {
            Some(p) if p.home == node && p.epoch == epoch => Ok(()),
            placement => Err(ApplyError::StaleEpoch {
                tenant: tenant.to_owned(),
                node,
                epoch,
                home: placement.map(|p| p.home),
                current: placement.map_or(0, |p| p.epoch),
            }),
        }
    }
}
