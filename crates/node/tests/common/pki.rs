//! Certificates for the TLS tests, made with rcgen and written as PEM files: a CA, and node
//! certificates for 127.0.0.1 that serve and call peers (serverAuth and clientAuth).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate authority whose certificate is in `cert`.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    name: String,
    dir: PathBuf,
    pub cert: PathBuf,
}

/// A node's certificate and key files.
pub struct NodeCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl NodeCert {
    /// `serve` arguments for TLS with this certificate, trusting `ca`.
    pub fn serve_args(&self, ca: &Ca) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            path(&self.cert),
            "--tls-key".into(),
            path(&self.key),
            "--tls-ca".into(),
            path(&ca.cert),
        ]
    }
}

impl Ca {
    /// A new CA named `name`, its files under `dir`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let file = dir.join(format!("{name}.pem"));
        std::fs::write(&file, cert.pem()).unwrap();
        Ca {
            issuer: Issuer::new(params, key),
            name: name.to_owned(),
            dir: dir.to_owned(),
            cert: file,
        }
    }

    /// A certificate for 127.0.0.1 signed by this CA, usable as server and as client.
    pub fn node(&self, name: &str) -> NodeCert {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let files = NodeCert {
            cert: self.dir.join(format!("{}-{name}.pem", self.name)),
            key: self.dir.join(format!("{}-{name}.key", self.name)),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }
}

/// A path as a command-line argument.
pub fn path(p: &Path) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}
