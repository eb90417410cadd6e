//! Traces: the W3C trace context a call arrives with, the trace context each of its spans hands
//! on (to the replicated call record, to upstreams), and the node's `tracing` setup, which
//! exports the `call` and `execute` spans over OTLP when an endpoint is configured.
//!
//! A span's trace context comes from OpenTelemetry when the OTLP layer is installed, so what
//! upstreams see are the ids of spans the collector receives. Without it the ids are drawn
//! here, in the same shape, so a call's trace id is the same whether or not spans are exported.

mod otlp;
mod quiet;
mod traceparent;

pub use otlp::{OtlpSettings, Telemetry};
pub use quiet::install_stderr_logs;
pub use traceparent::TraceParent;

use gatehouse_registry::CallId;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header (and gRPC metadata key, and MCP `_meta` key) a trace context travels in.
pub const TRACEPARENT: &str = "traceparent";

/// The trace context of a request's `traceparent` header or metadata entry, when it is valid.
pub fn incoming(value: Option<&[u8]>) -> Option<TraceParent> {
    std::str::from_utf8(value?)
        .ok()
        .and_then(TraceParent::parse)
}

/// The trace context of an MCP request: its `_meta.traceparent` when valid (it names the MCP
/// request itself), else its HTTP header's when valid.
pub fn meta_over_header(meta: Option<&str>, header: Option<&[u8]>) -> Option<TraceParent> {
    meta.and_then(TraceParent::parse)
        .or_else(|| incoming(header))
}

/// Makes `span` continue `parent` (a caller's `traceparent`, or the one a call record carries)
/// and answers the trace context `span` hands on: the same trace id, `span`'s own id as the
/// parent id, the sampled flag kept. Without a parent the span starts a trace.
pub fn continue_trace(span: &tracing::Span, parent: Option<TraceParent>) -> TraceParent {
    if let Some(parent) = parent {
        // Refused only when no OpenTelemetry layer is installed: then the ids are drawn below.
        let _ = span.set_parent(remote_context(parent));
    }
    if let Some(own) = otel_trace_parent(span) {
        return own;
    }
    let span_id = nonzero_u64();
    match parent {
        Some(parent) => parent.child(span_id),
        None => TraceParent {
            trace_id: nonzero_u128(),
            parent_id: span_id,
            flags: 0x01,
        },
    }
}

/// The trace a call belongs to: the one its record carries, else (a record written before
/// records kept one) the call id's own 128 random bits; `None` for an id of another shape.
pub fn call_trace_id(id: &CallId, trace_parent: Option<&str>) -> Option<u128> {
    if let Some(parent) = trace_parent.and_then(TraceParent::parse) {
        return Some(parent.trace_id);
    }
    let hex = id.0.strip_prefix("call_")?;
    let lower = hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex.len() != 32 || !lower {
        return None;
    }
    u128::from_str_radix(hex, 16).ok().filter(|&t| t != 0)
}

/// What an execution of a call continues: the span context its record carries, else a parent
/// in the call's trace (see [`call_trace_id`]).
pub fn execution_parent(id: &CallId, trace_parent: Option<&str>) -> Option<TraceParent> {
    trace_parent.and_then(TraceParent::parse).or_else(|| {
        let trace_id = call_trace_id(id, None)?;
        TraceParent::new(trace_id, nonzero_u64(), 0x01)
    })
}

/// The OpenTelemetry context of a remote parent.
fn remote_context(parent: TraceParent) -> opentelemetry::Context {
    opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from(parent.trace_id),
        SpanId::from(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    ))
}

/// `span`'s own ids, when an OpenTelemetry layer gave it some.
fn otel_trace_parent(span: &tracing::Span) -> Option<TraceParent> {
    let context = span.context();
    let own = context.span().span_context().clone();
    if !own.is_valid() {
        return None;
    }
    TraceParent::new(
        u128::from_be_bytes(own.trace_id().to_bytes()),
        u64::from_be_bytes(own.span_id().to_bytes()),
        own.trace_flags().to_u8(),
    )
}

fn nonzero_u64() -> u64 {
    rand::random::<u64>().max(1)
}

fn nonzero_u128() -> u128 {
    rand::random::<u128>().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_exporter_a_span_continues_its_parents_trace_under_an_id_of_its_own() {
        let parent = TraceParent::new(0xabc, 0x123, 0x01).expect("nonzero");
        let span = tracing::info_span!("call");
        let own = continue_trace(&span, Some(parent));
        assert_eq!(own.trace_id, parent.trace_id);
        assert_eq!(own.flags, parent.flags);
        assert_ne!(own.parent_id, parent.parent_id);
    }

    #[test]
    fn an_mcp_requests_meta_wins_over_its_header_unless_it_is_invalid() {
        let meta = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let header = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let chosen = |m: Option<&str>, h: Option<&str>| {
            meta_over_header(m, h.map(str::as_bytes)).map(|t| t.to_string())
        };
        assert_eq!(chosen(Some(meta), Some(header)).as_deref(), Some(meta));
        assert_eq!(chosen(Some("bogus"), Some(header)).as_deref(), Some(header));
        assert_eq!(chosen(None, Some(header)).as_deref(), Some(header));
        assert_eq!(chosen(Some(meta), None).as_deref(), Some(meta));
        assert_eq!(chosen(Some("bogus"), Some("also bogus")), None);
        assert_eq!(meta_over_header(None, Some(&[0xff, 0xfe][..])), None);
    }

    #[test]
    fn a_calls_trace_is_its_records_else_its_ids() {
        let id = CallId::from_random(0xfeed);
        let stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            call_trace_id(&id, Some(stored)),
            Some(0x4bf92f3577b34da6a3ce929d0e0e4736)
        );
        assert_eq!(call_trace_id(&id, None), Some(0xfeed));
        assert_eq!(call_trace_id(&id, Some("not a traceparent")), Some(0xfeed));
        assert_eq!(call_trace_id(&CallId("call_x".into()), None), None);
        let parent = execution_parent(&id, Some(stored)).expect("stored");
        assert_eq!(parent.to_string(), stored);
        assert_eq!(
            execution_parent(&id, None).expect("derived").trace_id,
            0xfeed
        );
    }

    #[test]
    fn without_a_parent_a_span_starts_a_sampled_trace() {
        let span = tracing::info_span!("call");
        let own = continue_trace(&span, None);
        assert_ne!(own.trace_id, 0);
        assert!(own.sampled());
    }

    #[test]
    fn with_the_opentelemetry_layer_the_span_ids_are_the_exported_spans() {
        use opentelemetry::trace::TracerProvider as _;
        use tracing_subscriber::layer::SubscriberExt;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let parent = TraceParent::new(0xabc, 0x123, 0x01).expect("nonzero");
            let span = tracing::info_span!("call");
            let own = continue_trace(&span, Some(parent));
            let exported = span.context().span().span_context().clone();
            assert_eq!(own.trace_id, 0xabc);
            assert_eq!(
                own.parent_id,
                u64::from_be_bytes(exported.span_id().to_bytes())
            );
            assert_ne!(own.parent_id, 0x123);
        });
    }
}
