//! `RegistryService`: admins declare and read resources; members of a tenant ask how its skills
//! resolve. Writes go through Raft from any node; reads answer from this node's copy.

use super::convert::{self, page_after, page_token};
use super::status::answer;
use futures::FutureExt;
use gatehouse_audit::{self as audit, AuditLog, Entry};
use gatehouse_cluster::cluster::{Cluster, Flush, WriteError};
use gatehouse_gateway::auth::{Authenticator, Caller, authenticate_current};
use gatehouse_gateway::pipeline::GatewayError;
use gatehouse_gateway::pipeline::audit::unavailable;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::registry_service_server::RegistryService;
use gatehouse_registry::cascade::Query;
use gatehouse_registry::command::{self, Change};
use gatehouse_registry::redact;
use gatehouse_registry::registry::Stored;
use gatehouse_registry::resource::Role;
use gatehouse_registry::{Command, Kind, ResourceKey};
use tonic::{Request, Response, Status};

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1_000;

#[derive(Clone)]
pub struct Registry {
    cluster: Cluster,
    auth: Authenticator,
    audit: AuditLog,
    /// The audit log's flush, one for the service: admin changes in one batch share its run.
    flush_audit: Flush,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("cluster", &self.cluster)
            .field("audit", &self.audit)
            .finish_non_exhaustive()
    }
}

impl Registry {
    pub fn new(cluster: Cluster, auth: Authenticator, audit: AuditLog) -> Self {
        let log = audit.clone();
        let flush_audit: Flush = std::sync::Arc::new(move || {
            let log = log.clone();
            async move { log.flush().await }.boxed()
        });
        Registry {
            cluster,
            auth,
            audit,
            flush_audit,
        }
    }

    /// Proposes an admin change with its audit: one `requested` record per resource, written
    /// before the proposal and made durable while it commits (the two disk syncs overlap
    /// instead of following each other, and the changes written in one log entry share one
    /// audit sync), then one record per resource of what it changed,
    /// group-committed after the answer. So every answered change has its request on disk, and
    /// the Raft log holds what it did; a crash can lose only the outcome records of the last few
    /// milliseconds.
    async fn admin_change(
        &self,
        caller: &Caller,
        decision: &str,
        keys: &[ResourceKey],
        command: Command,
        outcome: impl Fn(&ResourceKey, &Result<(command::Response, u64), WriteError>) -> String,
    ) -> Result<Result<(command::Response, u64), WriteError>, GatewayError> {
        let entry = |key: &ResourceKey, outcome: String| Entry {
            kind: audit::Kind::AdminChange,
            tenant: key.tenant.clone(),
            chain: vec![format!("admin:{}", caller.name)],
            target: Some(key.to_string()),
            decision: Some(decision.to_owned()),
            outcome,
            ..Entry::default()
        };
        for key in keys {
            self.audit
                .record(entry(key, "requested".to_owned()))
                .map_err(|e| unavailable(&e))?;
        }
        let (requested, written) = self
            .cluster
            .propose_flushed(command, &self.flush_audit)
            .await;
        requested.map_err(|e| unavailable(&e))?;
        for key in keys {
            self.audit
                .record(entry(key, outcome(key, &written)))
                .map_err(|e| unavailable(&e))?;
        }
        Ok(written)
    }

    /// An audit log known to take no entry refuses an admin change before it is proposed.
    fn audit_writable(&self) -> Result<(), GatewayError> {
        self.audit.writable().map_err(|e| unavailable(&e))
    }

    async fn caller<T>(&self, request: &Request<T>) -> Result<Caller, GatewayError> {
        let metadata = request.metadata();
        let caller = authenticate_current(&self.cluster, |registry| {
            self.auth.authenticate_grpc(registry, metadata)
        });
        Ok(caller.await?)
    }

    async fn maybe_linearizable(&self, wanted: bool) -> Result<(), GatewayError> {
        if wanted {
            self.cluster.linearizable().await?;
        }
        Ok(())
    }
}

/// What a caller may read: cluster admins and operators everything; others their tenants'
/// resources, the shared ones, and their own principal. Another tenant's resources do not exist
/// for them.
fn visible(caller: &Caller, key: &ResourceKey) -> bool {
    if caller.cluster(Role::Admin) || caller.cluster(Role::Operator) {
        return true;
    }
    match (key.kind, &key.tenant) {
        (Kind::Principal, _) => key.name == caller.name,
        (Kind::Tenant, _) => caller.member_of(&key.name),
        (_, Some(tenant)) => caller.member_of(tenant),
        (_, None) => !caller.spec.roles.is_empty(),
    }
}

/// A tenant the caller holds no role in does not exist for it.
fn require_member(caller: &Caller, tenant: &str) -> Result<(), GatewayError> {
    if caller.member_of(tenant) {
        Ok(())
    } else {
        Err(GatewayError::not_found(format!(
            "tenant {tenant} does not exist"
        )))
    }
}

fn page_size(requested: u32) -> usize {
    match requested as usize {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    }
}

/// What a caller may change: a tenant's admin its tenant's resources; cluster admins the rest.
fn writable(caller: &Caller, key: &ResourceKey) -> bool {
    match key.kind {
        Kind::Tenant | Kind::Principal => caller.cluster(Role::Admin),
        _ => caller.admin_of(key.tenant.as_deref()),
    }
}

/// A resource as `caller` reads it: an Upstream's URL keeps its secrets (a key in its query)
/// only for those who may change it; its tenant's agents and approvers read it redacted. A
/// Webhook's URL is often a secret in its path (a chat webhook's token): they read only its
/// scheme and host, so an agent cannot post look-alike notices where approvers read them.
fn shown(caller: &Caller, stored: &Stored) -> pb::Resource {
    let mut resource = convert::resource_to(stored);
    let redact: fn(&str) -> String = match stored.resource.kind() {
        Kind::Upstream => redact::url,
        Kind::Webhook => redact::origin,
        _ => return resource,
    };
    if writable(caller, &stored.resource.key()) {
        return resource;
    }
    let mut spec: serde_json::Value = serde_json::from_str(&resource.spec_json).unwrap_or_default();
    if let Some(url) = spec.get_mut("url")
        && let Some(text) = url.as_str()
    {
        *url = redact(text).into();
        resource.spec_json = spec.to_string();
    }
    resource
}

fn forbid(caller: &Caller, key: &ResourceKey) -> GatewayError {
    // Tenants and principals are cluster-wide: refusing says nothing about any tenant.
    let cluster_wide = matches!(key.kind, Kind::Tenant | Kind::Principal);
    if cluster_wide || visible(caller, key) {
        GatewayError::permission_denied(format!("{} may not change {key}", caller.name))
    } else {
        GatewayError::not_found(format!("{key} does not exist"))
    }
}

/// The wire side of the service: each method's error goes through the one map to a status.
#[tonic::async_trait]
impl RegistryService for Registry {
    async fn apply(
        &self,
        request: Request<pb::ApplyRequest>,
    ) -> Result<Response<pb::ApplyResponse>, Status> {
        answer(self.apply_resources(request).await)
    }

    async fn get(
        &self,
        request: Request<pb::GetResourceRequest>,
    ) -> Result<Response<pb::GetResourceResponse>, Status> {
        answer(self.get_resource(request).await)
    }

    async fn list(
        &self,
        request: Request<pb::ListResourcesRequest>,
    ) -> Result<Response<pb::ListResourcesResponse>, Status> {
        answer(self.list_resources(request).await)
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteResourceRequest>,
    ) -> Result<Response<pb::DeleteResourceResponse>, Status> {
        answer(self.delete_resource(request).await)
    }

    async fn resolve_skills(
        &self,
        request: Request<pb::ResolveSkillsRequest>,
    ) -> Result<Response<pb::ResolveSkillsResponse>, Status> {
        answer(self.resolve_skills_of(request).await)
    }

    async fn resolve_skill_tools(
        &self,
        request: Request<pb::ResolveSkillToolsRequest>,
    ) -> Result<Response<pb::ResolveSkillToolsResponse>, Status> {
        answer(self.resolve_skill_tools_of(request).await)
    }
}

impl Registry {
    async fn apply_resources(
        &self,
        request: Request<pb::ApplyRequest>,
    ) -> Result<pb::ApplyResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let resources = request
            .into_inner()
            .resources
            .into_iter()
            .map(convert::resource_from)
            .collect::<Result<Vec<_>, _>>()?;
        if resources.is_empty() {
            return Err(GatewayError::invalid_request("no resources to apply"));
        }
        for r in &resources {
            let key = r.key();
            if !writable(&caller, &key) {
                return Err(forbid(&caller, &key));
            }
        }
        let keys: Vec<ResourceKey> = resources.iter().map(|r| r.key()).collect();
        self.audit_writable()?;
        let outcome = |key: &ResourceKey, written: &Result<_, WriteError>| match written {
            Ok((command::Response::Resources { changes }, _)) => changes
                .iter()
                .find(|c| &c.key == key)
                .map_or("unchanged".to_owned(), |c| {
                    format!("{:?}", c.change).to_lowercase()
                }),
            Ok(_) => "unknown".to_owned(),
            Err(e) => format!("refused:{e}"),
        };
        let written = self
            .admin_change(&caller, "put", &keys, Command::Put { resources }, outcome)
            .await?;
        let (applied, log_index) = written?;
        let command::Response::Resources { changes } = applied else {
            return Err(GatewayError::internal("a put answered with something else"));
        };
        let results = changes
            .iter()
            .map(|c| pb::ApplyResult {
                key: Some(convert::key_to(&c.key)),
                outcome: match c.change {
                    Change::Created => pb::ApplyOutcome::Created,
                    Change::Updated => pb::ApplyOutcome::Updated,
                    Change::Unchanged | Change::Deleted => pb::ApplyOutcome::Unchanged,
                } as i32,
                generation: c.generation,
            })
            .collect();
        Ok(pb::ApplyResponse { results, log_index })
    }

    async fn get_resource(
        &self,
        request: Request<pb::GetResourceRequest>,
    ) -> Result<pb::GetResourceResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        let key = convert::key_from(request.key)?;
        self.maybe_linearizable(request.linearizable).await?;
        let registry = self.cluster.registry.read();
        match registry.get(&key).filter(|_| visible(&caller, &key)) {
            Some(stored) => Ok(pb::GetResourceResponse {
                resource: Some(shown(&caller, stored)),
            }),
            None => Err(GatewayError::not_found(format!("{key} does not exist"))),
        }
    }

    async fn list_resources(
        &self,
        request: Request<pb::ListResourcesRequest>,
    ) -> Result<pb::ListResourcesResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        let kinds = if request.kind.is_empty() {
            Kind::ALL.to_vec()
        } else {
            vec![convert::kind(&request.kind)?]
        };
        let after = page_after(&request.page_token)?;
        let size = page_size(request.page_size);
        self.maybe_linearizable(request.linearizable).await?;
        let registry = self.cluster.registry.read();
        let tenant = request.tenant.as_deref().filter(|t| !t.is_empty());
        let mut page = Vec::with_capacity(size);
        let mut more = false;
        for kind in kinds {
            if after.as_ref().is_some_and(|a| a.kind > kind) {
                continue;
            }
            let filter = tenant.map(Some);
            for stored in registry.list(kind, filter, after.as_ref()) {
                let key = stored.resource.key();
                if !visible(&caller, &key) {
                    continue;
                }
                if page.len() == size {
                    more = true;
                    break;
                }
                page.push(stored);
            }
            if more {
                break;
            }
        }
        let next_page_token = match (more, page.last()) {
            (true, Some(last)) => page_token(&last.resource.key()),
            _ => String::new(),
        };
        Ok(pb::ListResourcesResponse {
            resources: page.into_iter().map(|s| shown(&caller, s)).collect(),
            next_page_token,
        })
    }

    async fn delete_resource(
        &self,
        request: Request<pb::DeleteResourceRequest>,
    ) -> Result<pb::DeleteResourceResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let key = convert::key_from(request.into_inner().key)?;
        if !writable(&caller, &key) {
            return Err(forbid(&caller, &key));
        }
        let exists = self.cluster.registry.read().get(&key).is_some();
        if !exists {
            return Ok(pb::DeleteResourceResponse {
                deleted: false,
                log_index: 0,
            });
        }
        self.audit_writable()?;
        let outcome = |_: &ResourceKey, written: &Result<_, WriteError>| match written {
            Ok(_) => "deleted".to_owned(),
            Err(e) => format!("refused:{e}"),
        };
        let command = Command::Delete {
            keys: vec![key.clone()],
        };
        let written = self
            .admin_change(
                &caller,
                "delete",
                std::slice::from_ref(&key),
                command,
                outcome,
            )
            .await?;
        let (_, log_index) = written?;
        Ok(pb::DeleteResourceResponse {
            deleted: true,
            log_index,
        })
    }

    async fn resolve_skills_of(
        &self,
        request: Request<pb::ResolveSkillsRequest>,
    ) -> Result<pb::ResolveSkillsResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        require_member(&caller, &request.tenant)?;
        let registry = self.cluster.registry.read();
        let query = Query {
            tenant: request.tenant,
            tool: request.tool,
            user: request.user,
        };
        let resolution = registry.resolve_skills(&query);
        Ok(convert::resolution_to(
            &resolution,
            registry.applied_index(),
        ))
    }

    async fn resolve_skill_tools_of(
        &self,
        request: Request<pb::ResolveSkillToolsRequest>,
    ) -> Result<pb::ResolveSkillToolsResponse, GatewayError> {
        let caller = self.caller(&request).await?;
        let request = request.into_inner();
        require_member(&caller, &request.tenant)?;
        let registry = self.cluster.registry.read();
        let tools = registry
            .resolve_skill_tools(&request.tenant, &request.skill)
            .ok_or_else(|| {
                GatewayError::not_found(format!("skill {} does not exist", request.skill))
            })?;
        let size = page_size(request.page_size);
        let start = if request.page_token.is_empty() {
            0
        } else {
            tools.partition_point(|t| t.tool <= request.page_token)
        };
        let page: Vec<_> = tools[start..].iter().take(size).collect();
        let next_page_token = match page.last() {
            Some(last) if start + page.len() < tools.len() => last.tool.clone(),
            _ => String::new(),
        };
        Ok(pb::ResolveSkillToolsResponse {
            tools: page.into_iter().map(convert::resolved_tool_to).collect(),
            next_page_token,
            applied_index: registry.applied_index(),
        })
    }
}
