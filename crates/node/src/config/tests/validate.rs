//! Validation: every step's problems, reported at once.

use super::env;
use crate::config::{ConfigErrors, JoinKey, RawServeConfig, Start};
use gatehouse_cluster::grants::{BuiltinTool, CredentialConfig};
use gatehouse_fronts::mcp::McpSettings;
use std::time::Duration;

#[test]
fn every_problem_is_reported_at_once() {
    let raw = RawServeConfig {
        grpc: Some("localhost".into()),
        bootstrap: true,
        join: Some("127.0.0.1:1".into()),
        heartbeat_ms: Some(600),
        ..Default::default()
    };
    let errors = raw.validate(None).unwrap_err().0;
    let starts: Vec<&str> = errors
        .iter()
        .map(|e| e.split(':').next().unwrap())
        .collect();
    assert_eq!(
        starts,
        [
            "node-id",
            "data-dir",
            "grpc",
            "bootstrap and join",
            "heartbeat-ms (600ms) must be below election-min-ms (500ms)"
        ]
    );
}

#[test]
fn joining_needs_a_token() {
    let raw = RawServeConfig {
        node_id: Some(2),
        data_dir: Some("/tmp/x".into()),
        join: Some("127.0.0.1:7001".into()),
        ..Default::default()
    };
    assert!(raw.clone().validate(None).is_err());
    let config = raw.clone().validate(Some("k".into())).unwrap();
    assert_eq!(
        config.start,
        Start::Join {
            addr: "127.0.0.1:7001".into(),
            key: JoinKey::Token("k".into()),
        }
    );
    assert!(!format!("{config:?}").contains("\"k\""), "{config:?}");
}

#[test]
fn a_join_token_file_replaces_the_token_and_is_read_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.key");
    let file: RawServeConfig = toml::from_str(&format!(
        "node-id = 2\ndata-dir = \"/d\"\njoin = \"10.0.0.1:7400\"\njoin-token-file = {:?}\n",
        path.display().to_string()
    ))
    .unwrap();
    let config = RawServeConfig::default()
        .over(file.clone())
        .validate(None)
        .unwrap();
    let Start::Join { key, .. } = config.start else {
        panic!("not a join: {:?}", config.start);
    };
    assert!(key.read().is_err(), "the file does not exist yet");
    std::fs::write(&path, "").unwrap();
    assert!(key.read().unwrap_err().to_string().contains("is empty"));
    std::fs::write(&path, "gate_abc\n").unwrap();
    assert_eq!(key.read().unwrap(), "gate_abc");

    let errors = file.clone().validate(Some("k".into())).unwrap_err().0;
    assert!(errors.iter().any(|e| e.contains("not both")), "{errors:?}");
    let without_join = RawServeConfig { join: None, ..file };
    let errors = without_join.validate(None).unwrap_err().0;
    assert_eq!(errors, ["join-token-file: only with join"]);
}

#[test]
fn mcp_settings_are_bounded_and_default_to_no_browser_origin() {
    let base = RawServeConfig {
        node_id: Some(1),
        data_dir: Some("/tmp/x".into()),
        ..Default::default()
    };
    let config = base.clone().validate(None).unwrap();
    assert_eq!(config.mcp, McpSettings::default());
    assert!(config.mcp.allowed_origins.is_empty());
    assert_eq!(config.mcp.max_body_bytes, 1024 * 1024);
    assert_eq!(config.mcp.approval_wait, Duration::ZERO);

    let too_long = RawServeConfig {
        mcp_approval_wait_ms: Some(10_001),
        mcp_max_body_bytes: Some(0),
        ..base.clone()
    };
    let errors = too_long.validate(None).unwrap_err().0;
    assert!(errors.iter().any(|e| e.starts_with("mcp-approval-wait-ms")));
    assert!(errors.iter().any(|e| e.starts_with("mcp-max-body-bytes")));

    let file: RawServeConfig = toml::from_str(
        "mcp-approval-wait-ms = 2000\nmcp-allowed-origins = [\"https://app.example:443\"]\n",
    )
    .unwrap();
    let config = RawServeConfig { ..base }.over(file).validate(None).unwrap();
    assert_eq!(config.mcp.approval_wait, Duration::from_millis(2000));
    assert_eq!(config.mcp.allowed_origins, ["https://app.example:443"]);
}

#[test]
fn the_a2a_addresses_are_checked_and_kept() {
    let base = RawServeConfig {
        node_id: Some(1),
        data_dir: Some("/tmp/x".into()),
        bootstrap: true,
        ..RawServeConfig::default()
    };
    let config = RawServeConfig {
        a2a_public_url: Some("https://gatehouse.example/".into()),
        a2a_grpc_url: Some("gatehouse.example:443".into()),
        ..base.clone()
    }
    .validate(None)
    .unwrap();
    assert_eq!(
        config.a2a.public_url.as_deref(),
        Some("https://gatehouse.example")
    );
    assert_eq!(
        config.a2a.grpc_url.as_deref(),
        Some("gatehouse.example:443")
    );
    let ConfigErrors(problems) = RawServeConfig {
        a2a_public_url: Some("gatehouse.example".into()),
        a2a_grpc_url: Some("grpc://gatehouse.example:443".into()),
        ..base
    }
    .validate(None)
    .unwrap_err();
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn grants_and_metrics_settings_come_from_every_layer_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let token = dir.path().join("metrics.token");
    std::fs::write(&token, "scrape-me\n").unwrap();
    let file: RawServeConfig = toml::from_str(&format!(
        "node-id = 1\ndata-dir = {:?}\nbuiltins = [\"demo:echo\"]\n\
         metrics-token-file = {:?}\n\n[[credential]]\nname = \"stripe\"\n\
         env = \"STRIPE_KEY\"\ntenants = [\"acme\"]\n",
        data.display().to_string(),
        token.display().to_string(),
    ))
    .unwrap();
    let from_env = env(&[
        ("GATEHOUSE_BUILTINS", "lab:transfer, lab:echo"),
        ("GATEHOUSE_METRICS_TENANT_LABELS", "true"),
    ])
    .unwrap();
    assert_eq!(from_env.builtins, ["lab:transfer", "lab:echo"]);
    let config = from_env.over(file.clone()).validate(None).unwrap();
    assert!(config.metrics.tenant_labels);
    assert!(
        config
            .metrics
            .token
            .as_ref()
            .is_some_and(|t| t.admits(Some("Bearer scrape-me")))
    );
    let grants = &config.grants;
    assert!(grants.builtin_enabled("lab", BuiltinTool::Transfer));
    assert!(
        !grants.builtin_enabled("demo", BuiltinTool::Echo),
        "the environment's list replaces the file's"
    );
    assert!(grants.credential_for(Some("acme"), "stripe").is_some());
    assert!(!format!("{config:?}").contains("scrape-me"));

    // Tables come from the file only.
    let errors = env(&[("GATEHOUSE_CREDENTIAL", "x")]).unwrap_err().0;
    assert!(errors[0].contains("[[credential]] tables"), "{errors:?}");

    let errors = RawServeConfig {
        builtins: vec!["demo:rm".into()],
        metrics_token_file: Some(dir.path().join("absent.token")),
        credential: vec![CredentialConfig {
            name: "peer".into(),
            file: Some(data.join("cluster.key")),
            tenants: vec!["acme".into()],
            ..Default::default()
        }],
        ..file
    }
    .validate(None)
    .unwrap_err()
    .0;
    let has = |prefix: &str| errors.iter().any(|e| e.starts_with(prefix));
    assert!(has("builtins: \"demo:rm\""), "{errors:?}");
    assert!(has("metrics-token-file: reading"), "{errors:?}");
    assert!(has("credential[0].file:"), "{errors:?}");
}
