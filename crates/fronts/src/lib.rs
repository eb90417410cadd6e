//! The protocols agents, peers and people speak to a node, each a thin front over the gateway's
//! pipeline: MCP (`mcp`), A2A (`a2a`), the gRPC services (`services`), and the HTTP listener that
//! carries MCP, A2A's JSON-RPC binding, health and metrics (`http`).
//!
//! Errors reach the wire as the gateway's `GatewayError`, through one map per protocol:
//! `services::status::to_status` for gRPC and `jsonrpc_error::jsonrpc_error` for JSON-RPC.

pub mod a2a;
pub mod console;
pub mod deadline;
pub mod grpc_health;
pub mod http;
pub mod jsonrpc_error;
pub mod mcp;
pub mod services;
pub use gatehouse_registry::time;
pub mod unauthenticated;
