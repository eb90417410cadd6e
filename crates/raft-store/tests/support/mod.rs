//! Proposals and checks shared by the integration tests.

use gatehouse_registry::{Command, Kind, Proposal, Registry, ResourceKey, documents};
use uuid::Uuid;

/// A `Put` of one tenant named `name`; `request` makes the request id (distinct per proposal).
pub fn put_tenant(name: &str, request: u128) -> Proposal {
    let yaml = format!(
        "apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: {name}}}\nspec: {{}}\n"
    );
    let resources = documents::parse("test.yaml", &yaml).into_resources();
    assert_eq!(resources.len(), 1, "tenant {name} parses");
    Proposal {
        request_id: Uuid::from_u128(request),
        at: 1_700_000_000_000 + request as u64,
        command: Command::Put { resources },
    }
}

pub fn has_tenant(registry: &Registry, name: &str) -> bool {
    registry
        .get(&ResourceKey {
            kind: Kind::Tenant,
            tenant: None,
            name: name.to_owned(),
        })
        .is_some()
}
