//! Generated code for the `gatehouse.v1` gRPC contract: the prost messages, the tonic clients
//! and servers of every service, and the encoded file descriptor set for gRPC reflection.
//!
//! This crate holds no logic and must never grow any: it is the contract, compiled. Conversions
//! to and from domain types live with the domain (`gatehouse-registry`) or the services
//! (`gatehouse-fronts`, `services::convert`), so that changing a rule never means regenerating the wire types.

/// The protobuf packages, one module per package.
pub mod gatehouse {
    /// The `gatehouse.v1` package.
    pub mod v1 {
        tonic::include_proto!("gatehouse.v1");
    }
}

pub use gatehouse::v1;

/// The encoded `FileDescriptorSet` of every `gatehouse.v1` file (with source comments), for a
/// gRPC reflection service.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/gatehouse_v1_descriptor.bin"));

#[cfg(test)]
mod tests;
