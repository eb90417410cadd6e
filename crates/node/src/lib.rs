//! The `gatehouse` node: its command line, configuration, gRPC services, the Raft network
//! between nodes, and what each command does. The binary's `main` only parses arguments and
//! calls in here, so tests can start whole nodes in-process.
//!
//! Domain decisions never live here: they belong to `gatehouse-registry`. This crate moves
//! bytes, checks who is calling, and maps errors to status codes.

pub mod a2a;
mod actor_port;
pub mod auth;
pub mod backup;
pub mod budget;
pub mod cli;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod discovery;
pub mod executor;
pub mod feed;
pub mod files;
pub mod grants;
pub mod grpc_health;
pub mod handover;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod net;
pub mod node_files;
pub mod pipeline;
pub mod readiness;
pub mod server;
pub mod services;
pub mod telemetry;
pub mod time;
pub mod tls;
