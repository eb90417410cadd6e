//! OpenTelemetry export settings.

use super::env;
use crate::config::{DEFAULT_OTLP_SERVICE_NAME, RawServeConfig};
use gatehouse_gateway::telemetry::OtlpSettings;

#[test]
fn otlp_export_is_off_by_default_and_its_endpoint_is_checked() {
    let base = RawServeConfig {
        node_id: Some(1),
        data_dir: Some("/tmp/x".into()),
        ..Default::default()
    };
    assert_eq!(base.clone().validate(None).unwrap().otlp, None);

    let file: RawServeConfig =
        toml::from_str("otlp-endpoint = \"http://127.0.0.1:4317\"\n").unwrap();
    let config = base.clone().over(file).validate(None).unwrap();
    assert_eq!(
        config.otlp,
        Some(OtlpSettings {
            endpoint: "http://127.0.0.1:4317".into(),
            service_name: DEFAULT_OTLP_SERVICE_NAME.into(),
        })
    );

    let from_env = env(&[
        ("GATEHOUSE_OTLP_ENDPOINT", "http://collector:4317"),
        ("GATEHOUSE_OTLP_SERVICE_NAME", "gatehouse-eu"),
    ])
    .unwrap();
    let config = base.clone().over(from_env).validate(None).unwrap();
    let otlp = config.otlp.expect("configured");
    assert_eq!(otlp.endpoint, "http://collector:4317");
    assert_eq!(otlp.service_name, "gatehouse-eu");

    for (endpoint, why) in [
        ("not a url", "is not a URL"),
        ("127.0.0.1:4317", "must start with http://"),
        ("https://collector:4317", "uses https"),
        ("grpc://collector:4317", "must start with http://"),
        ("http://collector", "must name a host and a port"),
    ] {
        let bad = RawServeConfig {
            otlp_endpoint: Some(endpoint.into()),
            otlp_service_name: Some(" ".into()),
            ..base.clone()
        };
        let errors = bad.validate(None).unwrap_err().0;
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("otlp-endpoint") && e.contains(why)),
            "{endpoint}: {errors:?}"
        );
        assert!(errors.iter().any(|e| e.starts_with("otlp-service-name")));
    }
}
