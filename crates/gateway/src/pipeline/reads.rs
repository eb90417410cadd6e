//! What the fronts read of this node's registry, through the pipeline rather than the
//! registry itself: who is calling, the caller's own calls, the tools it sees. Each read takes
//! the registry's lock once, briefly (`SharedRegistry::read`), and hands back owned values.

use super::{Envelope, GatewayError, Pipeline};
use crate::auth::{AuthError, Caller, NotAuthenticated, authenticate_current};
use gatehouse_cluster::cluster::Cluster;
use gatehouse_registry::ToolsetInfo;
use gatehouse_registry::resource::{ToolSpec, UpstreamKind};
use gatehouse_registry::{Call, CallId};
use tokio::sync::watch;

impl Pipeline {
    /// Authenticates a bearer token (an API key or a JWT), wherever it came from.
    pub fn authenticate_bearer(&self, token: Option<&str>) -> Result<Caller, AuthError> {
        let registry = self.cluster.registry.read();
        self.authenticator.authenticate_bearer(&registry, token)
    }

    /// Authenticates a gRPC request by its bearer API key or JWT, catching up before it calls a
    /// key unknown ([`authenticate_current`]).
    pub async fn authenticate_grpc(
        &self,
        metadata: &tonic::metadata::MetadataMap,
    ) -> Result<Caller, NotAuthenticated> {
        authenticate_current(&self.cluster, |registry| {
            self.authenticator.authenticate_grpc(registry, metadata)
        })
        .await
    }

    /// Authenticates a request of an HTTP front (MCP, A2A) by its bearer API key or JWT,
    /// catching up before it calls a key unknown ([`authenticate_current`]).
    pub async fn authenticate_http(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Caller, NotAuthenticated> {
        authenticate_current(&self.cluster, |registry| {
            self.authenticator.authenticate_http(registry, headers)
        })
        .await
    }

    /// A call of the caller's own chain (the agent, or the A2A peer that delegated it), from a
    /// node that first catches up when it does not hold it ([`Pipeline::own_call_caught_up`]).
    /// Someone else's call and no call at all read the same.
    pub async fn status(&self, caller: &Caller, call_id: &str) -> Result<Envelope, GatewayError> {
        self.own_call_caught_up(caller, call_id)
            .await
            .map(|call| Envelope::of_record(&call))
    }

    /// [`Pipeline::own_call`], from a node that first catches up with the leader when it does
    /// not hold the call: a node just restarted, joined or cut off answers for a call the
    /// cluster has instead of NOT_FOUND, or UNAVAILABLE (retry) when it cannot catch up.
    pub async fn own_call_caught_up(
        &self,
        caller: &Caller,
        call_id: &str,
    ) -> Result<Call, GatewayError> {
        if let Ok(call) = self.own_call(caller, call_id) {
            return Ok(call);
        }
        caught_up(&self.cluster, call_id).await?;
        self.own_call(caller, call_id)
    }

    /// The tools the caller sees in `tenant`, in name order (see `Registry::visible_tools`).
    pub fn visible_tools(&self, caller: &Caller, tenant: &str) -> Vec<(String, ToolSpec)> {
        let registry = self.cluster.registry.read();
        registry
            .visible_tools_for(tenant, caller.owner())
            .into_iter()
            .map(|(name, spec)| (name.to_owned(), spec.clone()))
            .collect()
    }

    /// The toolsets the caller may load in `tenant`.
    pub fn toolsets(&self, caller: &Caller, tenant: &str) -> Vec<ToolsetInfo> {
        let registry = self.cluster.registry.read();
        registry.toolsets(tenant, &caller.name)
    }

    /// The caller's own call, whole (see [`Pipeline::status`]).
    pub fn own_call(&self, caller: &Caller, call_id: &str) -> Result<Call, GatewayError> {
        let registry = self.cluster.registry.read();
        registry
            .call(&CallId(call_id.to_owned()))
            .filter(|c| c.spec.chain.owned_by(caller.owner()))
            .cloned()
            .ok_or_else(|| GatewayError::not_found(format!("call {call_id} not found")))
    }

    /// The calls of `tenant` in the caller's own chain that `keep` accepts.
    pub fn own_calls(
        &self,
        caller: &Caller,
        tenant: &str,
        keep: impl Fn(&Call) -> bool,
    ) -> Vec<Call> {
        let registry = self.cluster.registry.read();
        registry
            .calls_of(tenant)
            .filter(|c| c.spec.chain.owned_by(caller.owner()) && keep(c))
            .cloned()
            .collect()
    }

    /// When a call was created and last changed (unix ms), if this node has it.
    pub fn call_times(&self, call_id: &str) -> Option<(u64, u64)> {
        let registry = self.cluster.registry.read();
        registry
            .call(&CallId(call_id.to_owned()))
            .map(|c| (c.created_at, c.updated_at))
    }

    /// Whether the tools of `tenant`'s upstream `name` come from a source whose annotations
    /// are believed: a trusted upstream, or the gateway's own built-in tools.
    pub fn upstream_trusted(&self, tenant: &str, name: &str) -> bool {
        let registry = self.cluster.registry.read();
        registry
            .upstream(tenant, name)
            .is_some_and(|u| u.trusted || u.kind == UpstreamKind::Builtin)
    }

    /// The index this node has applied, to wait on for changes.
    pub fn applied(&self) -> watch::Receiver<u64> {
        self.cluster.applied.clone()
    }
}

/// Brings the node up to the leader's commit index before it answers that it does not hold
/// `call_id` (see `Cluster::catch_up`); UNAVAILABLE, saying to retry, when it cannot.
pub async fn caught_up(cluster: &Cluster, call_id: &str) -> Result<(), GatewayError> {
    cluster
        .catch_up(gatehouse_cluster::cluster::CATCH_UP)
        .await
        .map_err(|why| {
            GatewayError::unavailable(format!(
                "this node does not hold call {call_id} and could not catch up with the leader \
                 ({why}); retry, here or at another node"
            ))
        })
}
