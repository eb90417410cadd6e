//! The node's gRPC services. Each authenticates its caller and checks the role it needs; its
//! methods answer with a `GatewayError`, which becomes a status code in `status` only.

pub mod approval;
pub mod cluster;
pub mod convert;
pub mod gateway;
pub mod json;
pub mod placement;
pub mod raft;
pub mod registry;
pub mod snapshot;
pub mod status;
