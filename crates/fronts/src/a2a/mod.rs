//! The A2A front: peers delegate tasks to the gateway over A2A v1. The bindings are the official
//! a2a-rs crates': a2a-server's JSON-RPC router at `/a2a` on the HTTP listener and a2a-grpc's
//! `lf.a2a.v1.A2AService` on the gRPC listener. Both drive one [`Front`], which implements their
//! `RequestHandler` on top of the shared [`Pipeline`]; the Agent Card is served at
//! `/.well-known/agent-card.json`.
//!
//! A task is one call: its message carries a data part `{"tool": "upstream.tool", "arguments":
//! {...}}`, its id is the call's id, and its state follows the call's replicated record (see
//! task.rs), so every node answers `GetTask` alike. The peer is the call's agent and its A2A
//! peer; the user it acts for (a JWT's `sub` under an `act` claim naming the peer, or the user an
//! API key is bound to) must be allowed the tool too.
//!
//! Both edges answer an unauthenticated request before any A2A handling (HTTP 401 with
//! `WWW-Authenticate`, gRPC `UNAUTHENTICATED`), and a caller that is an agent of no tenant with
//! 403 or `PERMISSION_DENIED`.

mod card;
#[cfg(test)]
mod fuzz;
mod handler;
mod task;

use crate::jsonrpc_error::jsonrpc_error;
use crate::services::status::to_status;
use a2a_grpc::GrpcHandler;
use a2a_pb::proto::a2a_service_server::A2aServiceServer;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use gatehouse_gateway::auth::Caller;
use gatehouse_gateway::pipeline::{ErrorCode, GatewayError, Pipeline};
use gatehouse_registry::resource::Role;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where the JSON-RPC binding is mounted.
pub const PATH: &str = "/a2a";

/// How long a blocking `SendMessage` waits for its task to finish or to need a person, before it
/// answers with the task as it stands (the peer then polls `GetTask` or subscribes).
pub const SEND_WAIT: Duration = Duration::from_secs(30);

/// What the front advertises about itself.
#[derive(Debug, Clone)]
pub struct A2aSettings {
    /// The gRPC interface's address as the card gives it (`host:port`).
    pub grpc_url: String,
    /// The node's own HTTP address, for the card's JSON-RPC URL when a request has no Host.
    pub http_addr: String,
    /// The base URL peers reach the HTTP listener at, when configured: it wins over the Host.
    pub public_url: Option<String>,
    /// The HTTP listener serves TLS: URLs made from the Host or the address say `https://`.
    pub https: bool,
}

/// Shared by both bindings.
#[derive(Debug)]
pub struct Front {
    pipeline: Pipeline,
    settings: A2aSettings,
    /// Cancelled when the node stops: open streams end.
    stop: CancellationToken,
}

impl Front {
    pub fn new(pipeline: Pipeline, settings: A2aSettings, stop: CancellationToken) -> Arc<Front> {
        Arc::new(Front {
            pipeline,
            settings,
            stop,
        })
    }
}

/// The card and the JSON-RPC binding, for the node's HTTP listener.
pub fn router(front: Arc<Front>) -> Router {
    let jsonrpc = a2a_server::jsonrpc::jsonrpc_router(front.clone()).route_layer(
        axum::middleware::from_fn_with_state(front.clone(), http_edge),
    );
    Router::new()
        .route(
            a2a_server::WELL_KNOWN_AGENT_CARD_PATH,
            get(card::serve_public).with_state(front),
        )
        .nest(PATH, jsonrpc)
}

/// The gRPC binding, for the node's gRPC listener, behind [`GrpcEdge`].
pub fn grpc_service(front: Arc<Front>) -> GrpcEdge<A2aServiceServer<GrpcHandler<Front>>> {
    GrpcEdge {
        inner: A2aServiceServer::new(GrpcHandler::new(front.clone())),
        front,
    }
}

/// The gRPC binding's door: authenticates each request before a2a-grpc sees it, as the HTTP
/// edge does, and asynchronously, so a node that is behind catches up before it calls a key
/// unknown (`Pipeline::authenticate_http`; gRPC metadata are the request's HTTP/2 headers).
#[derive(Clone)]
pub struct GrpcEdge<S> {
    inner: S,
    front: Arc<Front>,
}

impl<S> std::fmt::Debug for GrpcEdge<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcEdge").finish_non_exhaustive()
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for GrpcEdge<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for GrpcEdge<S>
where
    S: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        // The clone that was made ready serves this request; the fresh one waits for the next.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        let front = self.front.clone();
        Box::pin(async move {
            let caller = match front.pipeline.authenticate_http(request.headers()).await {
                Ok(caller) => caller,
                Err(e) => return Ok(to_status(e.into()).into_http()),
            };
            if !is_some_agent(&caller) {
                return Ok(to_status(not_an_agent(&caller)).into_http());
            }
            ready.call(request).await
        })
    }
}

/// A caller that is an agent of no tenant can delegate nothing here.
fn is_some_agent(caller: &Caller) -> bool {
    caller
        .spec
        .roles
        .values()
        .any(|roles| roles.contains(&Role::Agent))
}

fn not_an_agent(caller: &Caller) -> GatewayError {
    GatewayError::new(
        ErrorCode::PermissionDenied,
        format!(
            "{} is an agent of no tenant: an A2A peer needs the agent role in the tenant it \
             delegates to",
            caller.name
        ),
        "ask the tenant's admin for the agent role",
    )
}

async fn http_edge(State(front): State<Arc<Front>>, request: Request, next: Next) -> Response {
    let caller = match front.pipeline.authenticate_http(request.headers()).await {
        Ok(caller) => caller,
        Err(e) => return crate::unauthenticated::refusal(e),
    };
    if !is_some_agent(&caller) {
        return jsonrpc_error(&not_an_agent(&caller))
            .into_response(serde_json::Value::Null, http::StatusCode::FORBIDDEN);
    }
    next.run(request).await
}
