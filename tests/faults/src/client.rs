//! Typed gRPC clients to the nodes, each as one principal, and the recorder every client
//! writes its operations into.

use crate::history::{Micros, Op, OpKind, Outcome};
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::gateway_service_client::GatewayServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// How long a client waits for any one answer: short, so that a client that picked a frozen or
/// cut-off node moves on while the others show whether the cluster takes writes.
pub const DEADLINE: Duration = Duration::from_secs(2);

/// Adds a principal's API key to every request, and the client's deadline.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>, Duration);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(..)")
    }
}

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        request.set_timeout(self.1);
        Ok(request)
    }
}

pub type Authed = InterceptedService<Channel, Bearer>;

/// How to reach one node: a gRPC channel made once (a lazy channel reconnects after its node
/// restarts), and its HTTP listener's address.
#[derive(Debug, Clone)]
struct Reach {
    channel: Channel,
    http: String,
    /// Whether clients may be sent here: a node joins the clients' rotation once it is a voter,
    /// as it would join a load balancer's once ready.
    serving: bool,
}

/// Every node's reach, by id.
#[derive(Debug, Clone, Default)]
pub struct Channels(Arc<Mutex<BTreeMap<u64, Reach>>>);

impl Channels {
    pub fn add(&self, id: u64, grpc: &str, http: &str) -> anyhow::Result<()> {
        // Each request carries its own deadline (`Bearer`).
        let channel = Channel::from_shared(format!("http://{grpc}"))?
            .connect_timeout(Duration::from_secs(1))
            .connect_lazy();
        let reach = Reach {
            channel,
            http: http.to_owned(),
            serving: false,
        };
        self.0.lock().expect("channels").insert(id, reach);
        Ok(())
    }

    pub fn remove(&self, id: u64) {
        self.0.lock().expect("channels").remove(&id);
    }

    /// Puts node `id` in the clients' rotation.
    pub fn serve(&self, id: u64) {
        if let Some(reach) = self.0.lock().expect("channels").get_mut(&id) {
            reach.serving = true;
        }
    }

    /// The nodes in the clients' rotation.
    pub fn ids(&self) -> Vec<u64> {
        let channels = self.0.lock().expect("channels");
        channels
            .iter()
            .filter(|(_, reach)| reach.serving)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Node `id`'s reach; a node removed since the caller chose it is answered by another.
    fn reach(&self, id: u64) -> Reach {
        let channels = self.0.lock().expect("channels");
        channels
            .get(&id)
            .or_else(|| channels.values().next())
            .expect("the cluster has a node")
            .clone()
    }

    fn channel(&self, id: u64) -> Channel {
        self.reach(id).channel
    }

    /// `host:port` of node `id`'s HTTP listener.
    pub fn http(&self, id: u64) -> String {
        self.reach(id).http
    }

    pub fn registry(&self, id: u64, key: &str) -> RegistryServiceClient<Authed> {
        RegistryServiceClient::with_interceptor(self.channel(id), bearer(key))
    }

    pub fn gateway(&self, id: u64, key: &str) -> GatewayServiceClient<Authed> {
        GatewayServiceClient::with_interceptor(self.channel(id), bearer(key))
    }

    pub fn approvals(&self, id: u64, key: &str) -> ApprovalServiceClient<Authed> {
        ApprovalServiceClient::with_interceptor(self.channel(id), bearer(key))
    }

    pub fn cluster(&self, id: u64, key: &str) -> ClusterServiceClient<Authed> {
        ClusterServiceClient::with_interceptor(self.channel(id), bearer(key))
            .max_decoding_message_size(64 * 1024 * 1024)
    }

    /// The cluster API with a deadline long enough for a membership change: removing a voter
    /// waits for its tenants to move away.
    pub fn membership(&self, id: u64, key: &str) -> ClusterServiceClient<Authed> {
        let admin = Bearer(bearer(key).0, MEMBERSHIP_DEADLINE);
        ClusterServiceClient::with_interceptor(self.channel(id), admin)
    }
}

fn bearer(key: &str) -> Bearer {
    let value = format!("Bearer {key}").parse().expect("API keys are ASCII");
    Bearer(value, DEADLINE)
}

const MEMBERSHIP_DEADLINE: Duration = Duration::from_secs(60);

/// What an error tells about whether the operation took effect.
pub fn outcome_of(status: &tonic::Status) -> Outcome {
    match status.code() {
        Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::ResourceExhausted => Outcome::Failed,
        Code::Ok
        | Code::Cancelled
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::Internal
        | Code::Unavailable
        | Code::DataLoss => Outcome::Unknown,
    }
}

/// The campaign's clock and the history being written.
#[derive(Debug, Clone)]
pub struct Recorder {
    start: Instant,
    /// Unix milliseconds at `start`, to place the upstream's and registry's times.
    pub start_unix_ms: u64,
    ops: Arc<Mutex<Vec<Op>>>,
    /// Error messages of unknown outcomes, counted by code: what the clients met.
    errors: Arc<Mutex<BTreeMap<String, usize>>>,
    samples: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            start: Instant::now(),
            start_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            ops: Arc::default(),
            errors: Arc::default(),
            samples: Arc::default(),
        }
    }

    pub fn now(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    /// Campaign time of a Unix millisecond timestamp (0 if before the campaign).
    pub fn at_unix_ms(&self, unix_ms: u64) -> Micros {
        unix_ms.saturating_sub(self.start_unix_ms) * 1000
    }

    pub fn record(&self, client: usize, node: u64, invoke: Micros, outcome: Outcome, kind: OpKind) {
        let complete = self.now();
        self.ops.lock().expect("history").push(Op {
            client,
            node,
            invoke,
            complete,
            outcome,
            kind,
        });
    }

    pub fn note_error(&self, status: &tonic::Status) {
        let key = format!("{:?}", status.code());
        *self
            .errors
            .lock()
            .expect("errors")
            .entry(key.clone())
            .or_default() += 1;
        let mut samples = self.samples.lock().expect("samples");
        samples
            .entry(key)
            .or_insert_with(|| status.message().chars().take(200).collect());
    }

    /// One message of each code the clients met, the first.
    pub fn samples(&self) -> BTreeMap<String, String> {
        self.samples.lock().expect("samples").clone()
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("history").clone()
    }

    pub fn errors(&self) -> BTreeMap<String, usize> {
        self.errors.lock().expect("errors").clone()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}
