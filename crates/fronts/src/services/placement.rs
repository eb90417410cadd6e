//! Where tenants live, as `ClusterService.Status` reports it: each tenant's home, epoch, any
//! move under way and its open calls, and how many tenants each node is home to.

use gatehouse_proto::v1 as pb;
use gatehouse_registry::Registry;
use std::collections::BTreeMap;

/// Every tenant's placement, in tenant order, and the count of tenants per home node.
pub fn tenants(registry: &Registry) -> (Vec<pb::TenantPlacement>, BTreeMap<u64, u64>) {
    let mut open: BTreeMap<&str, u64> = BTreeMap::new();
    for call in registry.unfinished_calls() {
        *open.entry(call.spec.tenant.as_str()).or_default() += 1;
    }
    let mut homed = BTreeMap::new();
    let tenants = registry
        .tenants()
        .map(|tenant| {
            let placement = registry.placement(tenant);
            if let Some(p) = placement {
                *homed.entry(p.home).or_default() += 1;
            }
            pb::TenantPlacement {
                tenant: tenant.to_owned(),
                home: placement.map(|p| p.home),
                epoch: placement.map_or(0, |p| p.epoch),
                moving_to: placement.and_then(|p| p.moving_to),
                open_calls: open.get(tenant).copied().unwrap_or(0),
            }
        })
        .collect();
    (tenants, homed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_registry::command::Proposal;
    use gatehouse_registry::{Command, documents};

    #[test]
    fn each_tenant_shows_its_home_epoch_and_move() {
        let mut registry = Registry::new();
        let mut index = 0;
        let mut apply = |command: Command| {
            index += 1;
            let proposal = Proposal {
                request_id: uuid::Uuid::from_u128(u128::from(index)),
                at: 1_000,
                command,
            };
            registry.apply(index, &proposal).expect("applies");
        };
        let tenants_yaml = ["acme", "globex", "initech"]
            .map(|name| {
                format!("apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{}}\n")
            })
            .join("---\n");
        let resources = documents::parse("t.yaml", &tenants_yaml).into_resources();
        apply(Command::Put { resources });
        let place = |tenant: &str| Command::Place {
            tenant: tenant.into(),
            home: 2,
            epoch: 1,
        };
        apply(place("acme"));
        apply(place("globex"));
        apply(Command::StartMove {
            tenant: "globex".into(),
            epoch: 1,
            to: 3,
        });

        let (tenants, homed) = tenants(&registry);
        let rows: Vec<_> = tenants
            .iter()
            .map(|t| (t.tenant.as_str(), t.home, t.epoch, t.moving_to))
            .collect();
        assert_eq!(
            rows,
            [
                ("acme", Some(2), 1, None),
                ("globex", Some(2), 1, Some(3)),
                ("initech", None, 0, None),
            ]
        );
        assert_eq!(homed, BTreeMap::from([(2, 2)]));
    }
}
