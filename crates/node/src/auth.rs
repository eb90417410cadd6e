//! Who is calling: a bearer API key, looked up by its SHA-256 among the registry's principals.

use gatehouse_registry::Registry;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::resource::{PrincipalSpec, Role};
use tonic::Status;
use tonic::metadata::MetadataMap;

#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
    pub spec: PrincipalSpec,
}

/// The bearer token of a request, if it has one.
pub fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

pub fn authenticate(registry: &Registry, metadata: &MetadataMap) -> Result<Caller, Status> {
    let key = bearer(metadata).ok_or_else(|| Status::unauthenticated("missing bearer API key"))?;
    let (name, spec) = registry
        .principal_by_key(&sha256_hex(key.as_bytes()))
        .ok_or_else(|| Status::unauthenticated("unknown API key"))?;
    Ok(Caller {
        name: name.to_owned(),
        spec: spec.clone(),
    })
}

impl Caller {
    pub fn cluster(&self, role: Role) -> bool {
        self.spec.has_cluster_role(role)
    }

    /// A cluster admin may do anything; a tenant admin may manage its own tenant.
    pub fn admin_of(&self, tenant: Option<&str>) -> bool {
        self.cluster(Role::Admin) || tenant.is_some_and(|t| self.spec.has_role(t, Role::Admin))
    }

    /// Whether the caller holds any role in the tenant (or runs the cluster).
    pub fn member_of(&self, tenant: &str) -> bool {
        self.cluster(Role::Admin)
            || self.cluster(Role::Operator)
            || self.spec.roles.get(tenant).is_some_and(|r| !r.is_empty())
    }

    pub fn require_cluster(&self, roles: &[Role]) -> Result<(), Status> {
        if roles.iter().any(|r| self.cluster(*r)) {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "{} needs a cluster role: {}",
                self.name,
                roles
                    .iter()
                    .map(|r| format!("{r:?}").to_lowercase())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )))
        }
    }
}
