//! What lets standard gRPC tooling look at a node without the protos: `grpc.health.v1.Health`
//! (the overall service `""` and each gatehouse service: SERVING while the node is up,
//! NOT_SERVING once it begins to stop) and server reflection, v1 and v1alpha, over the
//! `gatehouse.v1` descriptors and the health service's own.
//!
//! The A2A binding (`lf.a2a.v1.A2AService`) is reported by the health service but not described
//! by reflection: its crate does not publish a file descriptor set.

use gatehouse_proto::v1::{
    approval_service_server, cluster_service_server, gateway_service_server, raft_service_server,
    registry_service_server,
};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// Every service the gRPC listener serves besides health and reflection.
pub const SERVICES: [&str; 6] = [
    raft_service_server::SERVICE_NAME,
    registry_service_server::SERVICE_NAME,
    cluster_service_server::SERVICE_NAME,
    approval_service_server::SERVICE_NAME,
    gateway_service_server::SERVICE_NAME,
    a2a_pb::a2a_service_server::SERVICE_NAME,
];

/// The health service's reporter. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GrpcHealth {
    reporter: HealthReporter,
}

impl GrpcHealth {
    /// The reporter and the `grpc.health.v1.Health` service it drives, everything SERVING.
    pub async fn start() -> (
        GrpcHealth,
        tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    ) {
        let (reporter, service) = tonic_health::server::health_reporter();
        let health = GrpcHealth { reporter };
        health.set_all(ServingStatus::Serving).await;
        (health, service)
    }

    /// Every service, and the overall one, NOT_SERVING: the node is stopping.
    pub async fn stopping(&self) {
        self.set_all(ServingStatus::NotServing).await;
    }

    /// Forgets every status, which ends open `Watch` streams: the listener's graceful stop
    /// waits for its streams, and a watcher would otherwise hold it open for good.
    pub async fn close(&self) {
        let mut reporter = self.reporter.clone();
        for name in std::iter::once("").chain(SERVICES) {
            reporter.clear_service_status(name).await;
        }
    }

    async fn set_all(&self, status: ServingStatus) {
        for name in std::iter::once("").chain(SERVICES) {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(gatehouse_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// `grpc.reflection.v1.ServerReflection`.
pub fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::Error,
> {
    reflection().build_v1()
}

/// `grpc.reflection.v1alpha.ServerReflection`, which older clients (grpcurl before 1.9) ask.
pub fn reflection_v1alpha() -> Result<
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
    tonic_reflection::server::Error,
> {
    reflection().build_v1alpha()
}
