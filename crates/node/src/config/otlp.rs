//! OpenTelemetry export settings: `otlp-endpoint` and `otlp-service-name`.

use super::problems::Checked;
use gatehouse_gateway::telemetry::OtlpSettings;

/// The `service.name` of exported spans unless `otlp-service-name` says otherwise.
pub const DEFAULT_OTLP_SERVICE_NAME: &str = "gatehouse";

/// The OTLP settings, when an endpoint is given.
pub(super) fn otlp_settings(
    endpoint: Option<String>,
    service_name: Option<String>,
) -> Checked<Option<OtlpSettings>> {
    let mut problems = Vec::new();
    let service_name = service_name.unwrap_or_else(|| DEFAULT_OTLP_SERVICE_NAME.to_owned());
    if service_name.trim().is_empty() {
        problems.push("otlp-service-name: must not be empty".to_owned());
    }
    let Some(endpoint) = endpoint else {
        return Checked::with(None, problems);
    };
    if let Err(why) = check_otlp_endpoint(&endpoint) {
        problems.push(format!("otlp-endpoint: {endpoint:?} {why}"));
    }
    Checked::with(
        Some(OtlpSettings {
            endpoint,
            service_name,
        }),
        problems,
    )
}

/// An OTLP/gRPC endpoint this node can reach: `http://host:port`.
fn check_otlp_endpoint(endpoint: &str) -> Result<(), &'static str> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|_| "is not a URL (http://host:port)")?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(
                "uses https, which this build does not speak: use http:// to a \
                        collector beside the node",
            );
        }
        _ => return Err("must start with http://"),
    }
    match uri.authority() {
        Some(authority) if !authority.host().is_empty() && authority.port_u16().is_some() => Ok(()),
        _ => Err("must name a host and a port (OTLP/gRPC is usually port 4317)"),
    }
}
