//! The approvals console: a small web app inside the binary (`/console`, no CDN, nothing
//! fetched from elsewhere) for people who approve calls, over the JSON approvals API
//! (`/api/v1`, see `api`). Every node serves both on its HTTP listener.
//!
//! The page never turns data into markup (every value is set as text), and its
//! Content-Security-Policy lets only its own script and style run: arguments an agent wrote
//! cannot script an approver's browser.

pub mod api;

use crate::services::approval::Approvals;
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/app.css");

/// Nothing but the page's own files; no framing, no referrer, no sniffing.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// `/console` and its files, and the API under `/api/v1`.
pub fn router(approvals: Approvals) -> Router {
    Router::new()
        .route("/api/v1/me", get(api::me))
        .route("/api/v1/tenants/{tenant}/calls", get(api::list))
        .route("/api/v1/tenants/{tenant}/watch", get(api::watch))
        .route("/api/v1/calls/{id}", get(api::get))
        .route("/api/v1/calls/{id}/{verb}", post(api::decide))
        .with_state(approvals)
        .route(
            "/console",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}
