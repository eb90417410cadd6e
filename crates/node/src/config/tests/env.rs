//! The `GATEHOUSE_*` environment layer.

use super::env;
use crate::config::{ConfigErrors, RawServeConfig};
use std::path::PathBuf;

#[test]
fn environment_variables_set_settings_by_name_and_type() {
    let raw = env(&[
        ("GATEHOUSE_NODE_ID", "3"),
        ("GATEHOUSE_DATA_DIR", "/var/lib/gatehouse"),
        ("GATEHOUSE_HEARTBEAT_MS", "250"),
        ("GATEHOUSE_BOOTSTRAP", "true"),
        ("GATEHOUSE_JOIN", "10.0.0.1:7401"),
        (
            "GATEHOUSE_MCP_ALLOWED_ORIGINS",
            "https://a.example, https://b.example",
        ),
        // The client's own settings and other programs' variables are left alone.
        ("GATEHOUSE_ADDR", "127.0.0.1:7401"),
        ("GATEHOUSE_TOKEN", "gate_x"),
        ("GATEHOUSE_CONFIG", "/etc/gatehouse/gatehouse.toml"),
        ("PATH", "/usr/bin"),
    ])
    .unwrap();
    assert_eq!(raw.node_id, Some(3));
    assert_eq!(raw.data_dir, Some(PathBuf::from("/var/lib/gatehouse")));
    assert_eq!(raw.heartbeat_ms, Some(250));
    assert!(raw.bootstrap);
    assert_eq!(raw.join.as_deref(), Some("10.0.0.1:7401"));
    assert_eq!(
        raw.mcp_allowed_origins,
        ["https://a.example", "https://b.example"]
    );
}

#[test]
fn a_numeric_looking_text_setting_stays_text() {
    let raw = env(&[("GATEHOUSE_DATA_DIR", "2026"), ("GATEHOUSE_GRPC", "7401")]).unwrap();
    assert_eq!(raw.data_dir, Some(PathBuf::from("2026")));
    assert_eq!(raw.grpc.as_deref(), Some("7401"));
}

#[test]
fn an_unknown_variable_is_named_and_left_alone() {
    let vars = [
        ("GATEHOUSE_HEARTBEET_MS", "50"),
        ("GATEHOUSE_BIN", "/usr/local/bin/gatehouse"),
        ("GATEHOUSE_NODE_ID", "3"),
    ];
    let settings =
        RawServeConfig::from_env(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
    assert_eq!(settings.raw.node_id, Some(3));
    assert_eq!(
        settings.unknown,
        ["GATEHOUSE_BIN", "GATEHOUSE_HEARTBEET_MS"]
    );
}

#[test]
fn misfit_variables_are_all_reported() {
    let ConfigErrors(problems) = env(&[
        ("GATEHOUSE_HEARTBEET_MS", "50"),
        ("GATEHOUSE_NODE_ID", "three"),
        ("GATEHOUSE_JWT", "x"),
        ("GATEHOUSE_HEARTBEAT_MS", "fast"),
    ])
    .unwrap_err();
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("GATEHOUSE_HEARTBEAT_MS")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with("GATEHOUSE_NODE_ID")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with("GATEHOUSE_JWT")),
        "{problems:?}"
    );
}

#[test]
fn flags_win_over_the_environment_which_wins_over_the_file() {
    let file = RawServeConfig {
        heartbeat_ms: Some(100),
        election_min_ms: Some(1_000),
        snapshot_every: Some(10),
        ..RawServeConfig::default()
    };
    let from_env = env(&[
        ("GATEHOUSE_HEARTBEAT_MS", "200"),
        ("GATEHOUSE_ELECTION_MIN_MS", "2000"),
    ])
    .unwrap();
    let flags = RawServeConfig {
        heartbeat_ms: Some(300),
        ..RawServeConfig::default()
    };
    let merged = flags.over(from_env.over(file));
    assert_eq!(merged.heartbeat_ms, Some(300));
    assert_eq!(merged.election_min_ms, Some(2_000));
    assert_eq!(merged.snapshot_every, Some(10));
}
