//! Who is calling. gRPC callers present a bearer API key, looked up by its SHA-256 among the
//! registry's principals. HTTP fronts also take JWTs from configured issuers, mapped to the
//! principal declared for the token's issuer and subject; the subject is the end user. A token
//! with an RFC 8693 `act` claim maps to the principal of `act.sub` instead, acting for `sub`.

mod current;
mod issuer;

pub use current::{NotAuthenticated, authenticate_current};
mod jwt;
#[cfg(test)]
mod tests;

use crate::error::{ErrorCode, GatewayError};
use gatehouse_registry::Registry;
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::identity::{self, Owner};
use gatehouse_registry::resource::{PrincipalSpec, Role};
pub use issuer::{JwtIssuerConfig, JwtKeySource};
use std::fmt;
use std::sync::Arc;
use tonic::metadata::MetadataMap;

/// The header naming the tenant a caller acts for, when it is an agent of several.
pub const TENANT_HEADER: &str = "gatehouse-tenant";

const REALM: &str = "gatehouse";

#[derive(Debug, Clone)]
pub struct Caller {
    pub name: String,
    pub spec: PrincipalSpec,
    /// The end user: a JWT's `sub`, or the user an API key principal is bound to (spec.user).
    pub end_user: Option<String>,
    pub credential: Credential,
}

/// What the caller proved itself with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    ApiKey,
    /// A JWT of `issuer`; `subject` is the one the principal was found by (`act.sub` for a
    /// token acting for someone, else `sub`).
    Jwt {
        issuer: String,
        subject: String,
    },
}

/// The bearer token of a request, if it has one.
pub fn bearer(metadata: &MetadataMap) -> Option<&str> {
    metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

fn api_key_caller(registry: &Registry, key: &str) -> Option<Caller> {
    let (name, spec) = registry.principal_by_key(&sha256_hex(key.as_bytes()))?;
    Some(Caller {
        name: name.to_owned(),
        end_user: spec.user.clone(),
        spec: spec.clone(),
        credential: Credential::ApiKey,
    })
}

impl Caller {
    /// The subject of the token the caller signed in with; `None` for an API key.
    pub fn token_subject(&self) -> Option<&str> {
        match &self.credential {
            Credential::ApiKey => None,
            Credential::Jwt { subject, .. } => Some(subject),
        }
    }

    /// The person the caller is (`identity::person`): what self-approval and N-of-M compare.
    pub fn person(&self) -> String {
        identity::person(&self.name, &self.spec, self.token_subject())
    }

    /// What the caller's own calls, tasks and idempotency keys are scoped by.
    pub fn owner(&self) -> Owner<'_> {
        Owner {
            principal: &self.name,
            end_user: self.end_user.as_deref(),
        }
    }

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

    pub fn require_cluster(&self, roles: &[Role]) -> Result<(), GatewayError> {
        if roles.iter().any(|r| self.cluster(*r)) {
            Ok(())
        } else {
            Err(GatewayError::permission_denied(format!(
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

/// Authenticates HTTP requests: bearer API keys, and JWTs of the configured issuers. Cheap to
/// clone; the issuers' keys are shared.
#[derive(Clone, Debug)]
pub struct Authenticator {
    issuers: Arc<[jwt::Issuer]>,
}

impl Authenticator {
    /// Loads every issuer's keys now: a missing or unusable key file is an error here, not on
    /// the first request.
    pub fn new(issuers: &[JwtIssuerConfig]) -> anyhow::Result<Authenticator> {
        let issuers = issuers
            .iter()
            .enumerate()
            .map(|(i, config)| {
                jwt::Issuer::load(i, config)
                    .map_err(|e| e.context(format!("JWT issuer {:?}", config.issuer)))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Authenticator {
            issuers: issuers.into(),
        })
    }

    pub fn api_keys_only() -> Authenticator {
        Authenticator {
            issuers: Arc::new([]),
        }
    }

    /// A bearer token: an API key (looked up by SHA-256 in the registry) or a JWT (three
    /// base64url parts) from a configured issuer.
    pub fn authenticate_bearer(
        &self,
        registry: &Registry,
        token: Option<&str>,
    ) -> Result<Caller, AuthError> {
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(AuthError {
                kind: AuthErrorKind::Missing,
                message: "no bearer token: send Authorization: Bearer <API key or JWT>".to_owned(),
            })?;
        if looks_like_jwt(token) {
            return self.authenticate_jwt(registry, token);
        }
        api_key_caller(registry, token).ok_or_else(|| AuthError {
            kind: AuthErrorKind::UnknownPrincipal,
            message: "unknown API key".to_owned(),
        })
    }

    /// A gRPC caller: the request's `authorization: Bearer` API key or JWT, as on HTTP.
    pub fn authenticate_grpc(
        &self,
        registry: &Registry,
        metadata: &MetadataMap,
    ) -> Result<Caller, AuthError> {
        self.authenticate_bearer(registry, bearer(metadata))
    }

    /// The `Authorization: Bearer` credential of an HTTP request (the scheme in any case).
    pub fn authenticate_http(
        &self,
        registry: &Registry,
        headers: &http::HeaderMap,
    ) -> Result<Caller, AuthError> {
        let token = match headers.get(http::header::AUTHORIZATION) {
            None => None,
            Some(value) => {
                let value = value.to_str().map_err(|_| AuthError {
                    kind: AuthErrorKind::Invalid,
                    message: "the Authorization header is not visible ASCII".to_owned(),
                })?;
                let token = bearer_credential(value).ok_or(AuthError {
                    kind: AuthErrorKind::Missing,
                    message: "the Authorization header must use the Bearer scheme".to_owned(),
                })?;
                Some(token)
            }
        };
        self.authenticate_bearer(registry, token)
    }

    fn authenticate_jwt(&self, registry: &Registry, token: &str) -> Result<Caller, AuthError> {
        let header = jwt::header(token)?;
        let claimed = jwt::claimed_issuer(token)?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.issuer == claimed)
            .ok_or_else(|| AuthError {
                kind: AuthErrorKind::Invalid,
                message: if self.issuers.is_empty() {
                    "this gateway accepts no JWTs, only API keys".to_owned()
                } else {
                    format!("tokens of issuer {claimed:?} are not accepted here")
                },
            })?;
        let claims = issuer.verify(token, &header)?;
        if claims.sub.trim().is_empty() {
            return Err(AuthError {
                kind: AuthErrorKind::Invalid,
                message: "the token's sub is empty".to_owned(),
            });
        }
        // With an `act` claim the token is the actor's, acting for the subject: the actor is
        // the principal and the subject its end user.
        let acting = match &claims.act {
            Some(actor) if actor.sub.trim().is_empty() => {
                return Err(AuthError {
                    kind: AuthErrorKind::Invalid,
                    message: "the token's act.sub is empty".to_owned(),
                });
            }
            Some(actor) => actor.sub.clone(),
            None => claims.sub.clone(),
        };
        let (name, spec) = registry
            .principal_by_jwt(&issuer.issuer, &acting)
            .ok_or_else(|| AuthError {
                kind: AuthErrorKind::UnknownPrincipal,
                message: format!(
                    "no principal for subject {acting:?} of issuer {}",
                    issuer.issuer
                ),
            })?;
        Ok(Caller {
            name: name.to_owned(),
            spec: spec.clone(),
            end_user: Some(claims.sub),
            credential: Credential::Jwt {
                issuer: issuer.issuer.clone(),
                subject: acting,
            },
        })
    }
}

/// Whether two secrets (or their digests) are equal, in time that depends on their length only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The credential of an `Authorization` value of the Bearer scheme (the scheme in any case).
pub fn bearer_credential(value: &str) -> Option<&str> {
    value
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token)
}

/// Three dot-separated base64url parts. API keys are hex with a prefix and never hold a dot.
fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| !p.is_empty())
        && parts.iter().all(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Why a request is not authenticated; an HTTP front answers 401 with the challenge of
/// [`AuthError::www_authenticate`], and every front refuses it as a
/// [`GatewayError`] of code `Unauthenticated`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct AuthError {
    pub kind: AuthErrorKind,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthErrorKind {
    /// No bearer credential came.
    Missing,
    /// A credential came and is malformed, unsigned, wrongly signed, or not for this gateway.
    Invalid,
    /// A JWT whose `exp` (with the issuer's leeway) has passed.
    Expired,
    /// A well-formed credential that names no principal: an unknown API key, or a verified JWT
    /// whose subject no principal is declared for.
    UnknownPrincipal,
}

impl AuthError {
    /// RFC 6750: `Bearer realm="gatehouse"` when no credential came; with
    /// `error="invalid_token", error_description="..."` when one was wrong.
    pub fn www_authenticate(&self) -> String {
        match self.kind {
            AuthErrorKind::Missing => format!("Bearer realm=\"{REALM}\""),
            AuthErrorKind::Invalid | AuthErrorKind::Expired | AuthErrorKind::UnknownPrincipal => {
                format!(
                    "Bearer realm=\"{REALM}\", error=\"invalid_token\", error_description=\"{}\"",
                    description(&self.message)
                )
            }
        }
    }
}

/// RFC 6750 3: `error_description` holds %x20-21 / %x23-5B / %x5D-7E only.
fn description(message: &str) -> String {
    message
        .chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

/// Why [`agent_tenant`] found no tenant; each says what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantChoice {
    #[error("{principal} is an agent of no tenant")]
    NoAgentRole { principal: String },
    #[error(
        "{principal} is an agent of several tenants ({}): name one in the Gatehouse-Tenant header",
        Listed(tenants)
    )]
    Ambiguous {
        principal: String,
        tenants: Vec<String>,
    },
    #[error(
        "{principal} is not an agent of tenant {requested:?}; its agent tenants: {}",
        Listed(tenants)
    )]
    NotAgentOf {
        principal: String,
        requested: String,
        tenants: Vec<String>,
    },
}

struct Listed<'a>(&'a [String]);

impl fmt::Display for Listed<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.0.join(", "))
        }
    }
}

/// The tenant a caller acts for as an agent: its only tenant with the `agent` role, or, when it has
/// several, the one `requested` names (from a `Gatehouse-Tenant` header). Errors say which to pick.
pub fn agent_tenant(caller: &Caller, requested: Option<&str>) -> Result<String, TenantChoice> {
    let tenants: Vec<String> = caller
        .spec
        .roles
        .iter()
        .filter(|(_, roles)| roles.contains(&Role::Agent))
        .map(|(tenant, _)| tenant.clone())
        .collect();
    let principal = caller.name.clone();
    match requested.map(str::trim).filter(|r| !r.is_empty()) {
        Some(requested) if tenants.iter().any(|t| t == requested) => Ok(requested.to_owned()),
        Some(requested) => Err(TenantChoice::NotAgentOf {
            principal,
            requested: requested.to_owned(),
            tenants,
        }),
        None => match <[String; 1]>::try_from(tenants) {
            Ok([only]) => Ok(only),
            Err(tenants) if tenants.is_empty() => Err(TenantChoice::NoAgentRole { principal }),
            Err(tenants) => Err(TenantChoice::Ambiguous { principal, tenants }),
        },
    }
}

impl From<AuthError> for GatewayError {
    fn from(e: AuthError) -> Self {
        GatewayError::unauthenticated(e.message)
    }
}

/// A tenant the caller may not act in as an agent, or has not said which of its tenants it
/// acts in: either way the request is refused as it stands.
impl From<TenantChoice> for GatewayError {
    fn from(e: TenantChoice) -> Self {
        let text = e.to_string();
        match e {
            TenantChoice::NoAgentRole { .. } | TenantChoice::NotAgentOf { .. } => {
                GatewayError::new(
                    ErrorCode::PermissionDenied,
                    text,
                    "ask the tenant's admin for the agent role",
                )
            }
            TenantChoice::Ambiguous { .. } => GatewayError::new(
                ErrorCode::PermissionDenied,
                text,
                "name the tenant in the Gatehouse-Tenant header",
            ),
        }
    }
}
