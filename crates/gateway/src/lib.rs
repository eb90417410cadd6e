//! The gateway: what happens to one call, whichever protocol brought it. Authentication
//! (`auth`), the call pipeline (`pipeline`: tenant scope, validation, policy, budgets, skills,
//! approval, audit), reaching upstreams (`executor`, `discovery`), the tenant actors' port onto
//! the cluster (`actor_port`), metrics and tracing.
//!
//! Domain decisions live in `gatehouse-registry`; this crate applies them to real requests.

pub mod actor_port;
pub mod auth;
pub mod budget;
pub mod discovery;
pub mod error;
pub mod executor;
pub mod metrics;
pub mod notify;
pub mod pipeline;
pub mod telemetry;
