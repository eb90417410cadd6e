//! The node's HTTP listener: liveness and readiness for load balancers and supervisors.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use gatehouse_raft_store::Raft;

pub fn router(raft: Raft) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let raft = raft.clone();
                async move {
                    // Ready once the node knows a leader: writes and linearizable reads can go
                    // somewhere.
                    match raft.current_leader().await {
                        Some(leader) => (StatusCode::OK, format!("ready, leader {leader}\n")),
                        None => (StatusCode::SERVICE_UNAVAILABLE, "no leader\n".to_owned()),
                    }
                }
            }),
        )
}
