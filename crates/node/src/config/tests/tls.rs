//! TLS settings.

use super::env;
use crate::config::RawServeConfig;
use std::path::{Path, PathBuf};

/// A node configuration with these TLS settings.
fn with_tls(
    cert: Option<&Path>,
    key: Option<&Path>,
    ca: Option<&Path>,
    peer_mtls: bool,
) -> RawServeConfig {
    RawServeConfig {
        node_id: Some(1),
        data_dir: Some("/d".into()),
        tls_cert: cert.map(Path::to_owned),
        tls_key: key.map(Path::to_owned),
        tls_ca: ca.map(Path::to_owned),
        peer_mtls,
        ..Default::default()
    }
}

/// A CA and a node certificate signed by it, as PEM files in `dir`: (cert, key, ca).
fn pem_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let paths = (
        dir.join("node.pem"),
        dir.join("node.key"),
        dir.join("ca.pem"),
    );
    std::fs::write(&paths.0, cert.pem()).unwrap();
    std::fs::write(&paths.1, key.serialize_pem()).unwrap();
    std::fs::write(&paths.2, ca_cert.pem()).unwrap();
    paths
}

#[test]
fn tls_files_are_read_and_kept_with_peer_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = pem_files(dir.path());
    let file: RawServeConfig = toml::from_str(&format!(
        "node-id = 1\ndata-dir = \"/d\"\ntls-cert = {:?}\ntls-key = {:?}\ntls-ca = {:?}\n\
         peer-mtls = true\n",
        cert.display().to_string(),
        key.display().to_string(),
        ca.display().to_string()
    ))
    .unwrap();
    let config = RawServeConfig::default().over(file).validate(None).unwrap();
    let tls = config.tls.expect("TLS is on");
    assert!(tls.peer_mtls);
    // The key's bytes are never printed.
    let printed = format!("{tls:?}");
    assert!(
        printed.contains("node.key") && !printed.contains("PRIVATE"),
        "{printed}"
    );
    assert!(
        with_tls(None, None, None, false)
            .validate(None)
            .unwrap()
            .tls
            .is_none()
    );
    let from_env = env(&[("GATEHOUSE_PEER_MTLS", "true"), ("GATEHOUSE_CA", "/x")]).unwrap();
    assert!(
        from_env.peer_mtls,
        "GATEHOUSE_CA is the client's, not a setting"
    );
}

#[test]
fn a_tls_cert_without_its_key_or_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = pem_files(dir.path());
    let problems = |raw: RawServeConfig| raw.validate(None).unwrap_err().0;
    assert_eq!(
        problems(with_tls(Some(&cert), None, Some(&ca), false)),
        ["tls-cert and tls-key: give both or neither"]
    );
    assert_eq!(
        problems(with_tls(None, Some(&key), None, false)),
        ["tls-cert and tls-key: give both or neither"]
    );
    let no_ca = problems(with_tls(Some(&cert), Some(&key), None, false));
    assert!(
        no_ca[0].starts_with("tls-ca: required with tls-cert"),
        "{no_ca:?}"
    );
    assert_eq!(
        problems(with_tls(None, None, Some(&ca), false)),
        ["tls-ca: only with tls-cert and tls-key"]
    );
}

#[test]
fn peer_mtls_needs_the_ca_and_the_node_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, _) = pem_files(dir.path());
    let without_ca = with_tls(Some(&cert), Some(&key), None, true)
        .validate(None)
        .unwrap_err()
        .0;
    assert_eq!(without_ca.len(), 2, "{without_ca:?}");
    assert_eq!(
        without_ca[0],
        "peer-mtls: needs tls-cert, tls-key and tls-ca"
    );
    assert!(
        without_ca[1].starts_with("tls-ca: required"),
        "{without_ca:?}"
    );
    let alone = with_tls(None, None, None, true)
        .validate(None)
        .unwrap_err()
        .0;
    assert_eq!(alone, ["peer-mtls: needs tls-cert, tls-key and tls-ca"]);
}

#[test]
fn missing_and_invalid_tls_files_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = pem_files(dir.path());
    let missing = dir.path().join("absent.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let errors = with_tls(Some(&missing), Some(&garbage), Some(&garbage), false)
        .validate(None)
        .unwrap_err()
        .0;
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("tls-cert: reading {}", missing.display())),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with(&format!(
            "tls-key: {} holds no PEM private key",
            garbage.display()
        )),
        "{errors:?}"
    );
    assert_eq!(
        errors[2],
        format!("tls-ca: {} holds no PEM certificate", garbage.display())
    );

    // A key that belongs to another certificate.
    let other = tempfile::tempdir().unwrap();
    let (_, other_key, _) = pem_files(other.path());
    let mismatched = with_tls(Some(&cert), Some(&other_key), Some(&ca), false)
        .validate(None)
        .unwrap_err()
        .0;
    assert!(
        mismatched[0].starts_with("tls-cert and tls-key:")
            && mismatched[0].contains("do not make a server identity"),
        "{mismatched:?}"
    );
    assert!(
        with_tls(Some(&cert), Some(&key), Some(&ca), false)
            .validate(None)
            .is_ok()
    );
}
