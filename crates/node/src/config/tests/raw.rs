//! The file's shape, and the flags laid over it.

use crate::config::{DEFAULT_READY_MAX_LAG, JoinKey, MAX_HTTP_THREADS, RawServeConfig, Start};
use std::time::Duration;

/// The README's configuration table is the reference operators read: a setting missing
/// from it is undocumented.
#[test]
fn every_setting_has_a_row_in_the_readme_configuration_table() {
    let readme = include_str!("../../../../../README.md");
    let start = readme
        .find("### Configuration")
        .expect("README has a Configuration section");
    let section = &readme[start..];
    let section = &section[..section[4..].find("\n### ").map_or(section.len(), |i| i + 4)];
    let command = <RawServeConfig as clap::Args>::augment_args(clap::Command::new("serve"));
    let missing: Vec<String> = command
        .get_arguments()
        .map(|arg| arg.get_id().as_str().replace('_', "-"))
        .filter(|key| !section.contains(&format!("| `{key}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "settings without a row in README's configuration table: {missing:?}"
    );
    assert!(section.contains("[[jwt]]"), "the jwt tables are described");
    assert!(
        section.contains("[[credential]]"),
        "the credential tables are described"
    );
}

#[test]
fn flags_override_the_file() {
    let file: RawServeConfig = toml::from_str(
        "node-id = 1\ndata-dir = \"/var/lib/gatehouse\"\ngrpc = \"127.0.0.1:7001\"\nheartbeat-ms = 50\n",
    )
    .unwrap();
    let flags = RawServeConfig {
        grpc: Some("127.0.0.1:7101".into()),
        ..Default::default()
    };
    let config = flags.over(file).validate(None).unwrap();
    assert_eq!(config.grpc, "127.0.0.1:7101".parse().unwrap());
    assert_eq!(config.node_id, 1);
    assert_eq!(config.raft.heartbeat, Duration::from_millis(50));
    assert_eq!(config.start, Start::Resume);
    assert_eq!(config.ready_max_lag, DEFAULT_READY_MAX_LAG);
}

#[test]
fn ready_max_lag_is_read_from_the_file_and_a_flag_wins() {
    let file: RawServeConfig =
        toml::from_str("node-id = 1\ndata-dir = \"/d\"\nready-max-lag = 50\n").unwrap();
    let config = RawServeConfig::default()
        .over(file.clone())
        .validate(None)
        .unwrap();
    assert_eq!(config.ready_max_lag, 50);
    let flags = RawServeConfig {
        ready_max_lag: Some(7),
        ..Default::default()
    };
    assert_eq!(flags.over(file).validate(None).unwrap().ready_max_lag, 7);
}

#[test]
fn http_threads_default_to_one_per_core_and_are_bounded() {
    let file: RawServeConfig = toml::from_str("node-id = 1\ndata-dir = \"/d\"\n").unwrap();
    let config = file.clone().validate(None).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(config.http_threads, cores);
    let shared: RawServeConfig =
        toml::from_str("node-id = 1\ndata-dir = \"/d\"\nhttp-threads = 0\n").unwrap();
    assert_eq!(shared.validate(None).unwrap().http_threads, 0);
    let too_many = RawServeConfig {
        http_threads: Some(MAX_HTTP_THREADS + 1),
        ..Default::default()
    };
    let err = too_many.over(file).validate(None).unwrap_err().to_string();
    assert!(err.contains("http-threads"), "{err}");
}

#[test]
fn unknown_keys_in_the_file_are_refused() {
    let err = toml::from_str::<RawServeConfig>("node_id = 1\n").unwrap_err();
    assert!(err.to_string().contains("unknown field"), "{err}");
}

#[test]
fn the_deployment_examples_are_valid_configs() {
    let examples = [
        (
            "single-node",
            include_str!("../../../../../deploy/config/single-node.toml"),
        ),
        (
            "cluster-member",
            include_str!("../../../../../deploy/config/cluster-member.toml"),
        ),
        (
            "multi-region-member",
            include_str!("../../../../../deploy/config/multi-region-member.toml"),
        ),
    ];
    for (name, text) in examples {
        let raw: RawServeConfig =
            toml::from_str(text).unwrap_or_else(|e| panic!("{name}.toml: {e}"));
        let config = raw
            .validate(None)
            .unwrap_or_else(|e| panic!("{name}.toml: {e}"));
        match name {
            "single-node" => assert_eq!(config.start, Start::Bootstrap),
            _ => assert!(
                matches!(
                    config.start,
                    Start::Join {
                        key: JoinKey::File(_),
                        ..
                    }
                ),
                "{name}.toml: {:?}",
                config.start
            ),
        }
    }
}
