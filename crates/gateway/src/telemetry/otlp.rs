//! The process's `tracing` subscriber: log lines on stderr always, and with an OTLP endpoint
//! the node's own spans exported in batches over OTLP/gRPC. Without an endpoint no exporter is
//! built and no export thread runs.

use super::quiet::{stderr_logs, stderr_logs_alone};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{ExporterBuildError, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use std::time::Duration;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the node's spans go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// An OTLP/gRPC collector, `http://host:port`.
    pub endpoint: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// The installed subscriber. Keep it while the node runs; [`Telemetry::shutdown`] exports
/// the spans still buffered.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// The crates whose spans are exported: the ones a call passes through on this node.
const SPAN_CRATES: [&str; 4] = [
    "gatehouse_node",
    "gatehouse_cluster",
    "gatehouse_gateway",
    "gatehouse_fronts",
];

impl Telemetry {
    /// Installs the process's subscriber: logs to stderr (`RUST_LOG` over a default that keeps
    /// openraft's chatter and its per-RPC failure lines out) and, with `otlp`, this crate's spans to the collector, with
    /// `service.instance.id` the node id. With `otlp` it must run inside a Tokio runtime, which
    /// the exporter's connection lives on.
    pub fn install(
        otlp: Option<&OtlpSettings>,
        node_id: u64,
    ) -> Result<Telemetry, ExporterBuildError> {
        let levels = "info,openraft=warn";
        let provider = otlp.map(|s| provider(s, node_id)).transpose()?;
        // A second install (a test that already set one) keeps the first.
        match &provider {
            // Only the gateway's own spans: a library's (hyper's, h2's, the exporter's own)
            // would be noise at best and, for the exporter's requests, a loop. The log and the
            // exporter see different spans, so each layer has a filter of its own.
            Some(p) => {
                let spans = tracing_opentelemetry::layer()
                    .with_tracer(p.tracer("gatehouse"))
                    .with_filter(
                        Targets::new().with_targets(SPAN_CRATES.map(|c| (c, LevelFilter::INFO))),
                    );
                let _ = tracing_subscriber::registry()
                    .with(stderr_logs(levels))
                    .with(spans)
                    .try_init();
            }
            // Not an absent exporter layer beside the log's: a layer's own filter and an
            // absent layer each cost the hot path (the absent one lets every library's debug
            // event be built, to be dropped by the log's filter).
            None => {
                let _ = tracing_subscriber::registry()
                    .with(stderr_logs_alone(levels))
                    .try_init();
            }
        }
        Ok(Telemetry { provider })
    }

    /// Exports what is still buffered and stops the exporter. Run it after the node stopped,
    /// while the runtime still runs.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "spans still buffered could not be exported");
        }
    }
}

fn provider(
    settings: &OtlpSettings,
    node_id: u64,
) -> Result<SdkTracerProvider, ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.instance.id", node_id.to_string()))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(WarnOnFailure(exporter))
        .with_resource(resource)
        .build())
}

/// An exporter whose failures are logged at `warn`: a collector that is down costs spans,
/// never calls.
#[derive(Debug)]
struct WarnOnFailure<E>(E);

impl<E: SpanExporter> SpanExporter for WarnOnFailure<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.0.export(batch).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, spans, "spans could not be exported over OTLP");
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}
