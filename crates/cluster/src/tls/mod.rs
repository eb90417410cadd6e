//! Transport security: the node's certificate, key and CA, read and checked once when the
//! configuration is validated, and what the listeners and the peer clients build from them.
//! Under `peer-mtls` the gRPC listener asks for a client certificate but never requires one at
//! the handshake (peers present theirs; CLI users, approvers and MCP/A2A clients have none); the
//! RPCs only peers make check for one each time ([`require_client_certificate`]).

mod listener;
mod plaintext;
mod probe;

pub use listener::{Plaintext, TlsListener};
pub use probe::{Probe, handshake as probe};

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// How long a client has to finish its TLS handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One PEM file as read: where it came from and its bytes.
#[derive(Clone)]
struct Pem {
    path: PathBuf,
    bytes: Vec<u8>,
}

/// The node's TLS material: `tls-cert`, `tls-key` and `tls-ca`, each read and parsed, with the
/// key checked against the certificate.
#[derive(Clone)]
pub struct NodeTls {
    cert: Pem,
    key: Pem,
    ca: Pem,
    /// Peers present their certificate as a client certificate, and refuse peer RPCs that come
    /// without one.
    pub peer_mtls: bool,
    /// The HTTP listener's server configuration.
    http: Arc<rustls::ServerConfig>,
    /// The gRPC listener's.
    grpc: Arc<rustls::ServerConfig>,
    /// What [`probe`] calls a peer with: the same trust and identity as the peer channels.
    peer_probe: Arc<rustls::ClientConfig>,
}

// The key's bytes never reach a log line.
impl fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTls")
            .field("cert", &self.cert.path)
            .field("key", &self.key.path)
            .field("ca", &self.ca.path)
            .field("peer_mtls", &self.peer_mtls)
            .finish()
    }
}

impl NodeTls {
    /// Reads and checks the three files. Every problem is returned, each naming its setting and
    /// file: unreadable, no PEM certificate or key in it, or a key that does not belong to the
    /// certificate.
    pub fn load(cert: &Path, key: &Path, ca: &Path, peer_mtls: bool) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let chain = read("tls-cert", cert, &mut problems).and_then(|pem| {
            let certs = certificates("tls-cert", &pem, &mut problems)?;
            Some((pem, certs))
        });
        let private = read("tls-key", key, &mut problems).and_then(|pem| {
            let der = private_key("tls-key", &pem, &mut problems)?;
            Some((pem, der))
        });
        let ca = read("tls-ca", ca, &mut problems).and_then(|pem| {
            let certs = certificates("tls-ca", &pem, &mut problems)?;
            Some((trust_anchors("tls-ca", &pem, certs, &mut problems)?, pem))
        });
        let (Some((cert, chain)), Some((key, der)), Some((roots, ca))) = (chain, private, ca)
        else {
            return Err(problems);
        };
        let identity_problem = |e: rustls::Error| {
            vec![format!(
                "tls-cert and tls-key: {} and {} do not make a server identity: {e}",
                cert.path.display(),
                key.path.display()
            )]
        };
        let http = server_config(chain.clone(), der.clone_key(), None, b"http/1.1")
            .map_err(identity_problem)?;
        let roots = Arc::new(roots);
        let identity = peer_mtls.then(|| (chain.clone(), der.clone_key()));
        let peer_probe = client_config(roots.clone(), identity).map_err(identity_problem)?;
        let client_roots = peer_mtls.then_some(roots);
        let grpc = server_config(chain, der, client_roots, b"h2").map_err(identity_problem)?;
        Ok(NodeTls {
            cert,
            key,
            ca,
            peer_mtls,
            http,
            grpc,
            peer_probe,
        })
    }

    /// The client configuration [`probe`] calls peers with.
    pub fn peer_probe(&self) -> Arc<rustls::ClientConfig> {
        self.peer_probe.clone()
    }

    /// The gRPC listener's rustls configuration (HTTP/2); under `peer-mtls` a client
    /// certificate is verified against `tls-ca` when presented, and not required.
    pub fn grpc_server(&self) -> Arc<rustls::ServerConfig> {
        self.grpc.clone()
    }

    /// The HTTP listener's rustls configuration (HTTP/1.1, no client certificates).
    pub fn http_server(&self) -> Arc<rustls::ServerConfig> {
        self.http.clone()
    }

    /// How this node reaches its peers: trusting `tls-ca`, and presenting its own certificate
    /// under `peer-mtls`.
    pub fn peer_client(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca.bytes))
            .timeout(HANDSHAKE_TIMEOUT);
        if self.peer_mtls {
            config.identity(self.identity())
        } else {
            config
        }
    }

    fn identity(&self) -> Identity {
        Identity::from_pem(&self.cert.bytes, &self.key.bytes)
    }
}

/// Refuses a request whose connection presented no client certificate. The handshake has
/// already verified any certificate that was presented against `tls-ca`, so having one is
/// enough.
pub fn require_client_certificate<T>(request: &tonic::Request<T>) -> Result<(), tonic::Status> {
    match request.peer_certs() {
        Some(chain) if !chain.is_empty() => Ok(()),
        _ => Err(tonic::Status::unauthenticated(
            "peer-mtls: this RPC needs a client certificate signed by the cluster's CA",
        )),
    }
}

/// The CA certificates in the PEM file at `path`, for a client that trusts them (the CLI's
/// `--ca`).
pub fn read_ca(path: &Path) -> anyhow::Result<Certificate> {
    let mut problems = Vec::new();
    let pem = read("ca", path, &mut problems)
        .and_then(|pem| certificates("ca", &pem, &mut problems).map(|_| pem));
    match pem {
        Some(pem) => Ok(Certificate::from_pem(pem.bytes)),
        None => anyhow::bail!("{}", problems.join("; ")),
    }
}

fn read(setting: &str, path: &Path, problems: &mut Vec<String>) -> Option<Pem> {
    match std::fs::read(path) {
        Ok(bytes) => Some(Pem {
            path: path.to_owned(),
            bytes,
        }),
        Err(e) => {
            problems.push(format!("{setting}: reading {}: {e}", path.display()));
            None
        }
    }
}

/// The certificates in `pem`, or a problem when there is none or one does not parse.
fn certificates(
    setting: &str,
    pem: &Pem,
    problems: &mut Vec<String>,
) -> Option<Vec<CertificateDer<'static>>> {
    let parsed: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem.bytes).collect();
    match parsed {
        Ok(certs) if !certs.is_empty() => Some(certs),
        Ok(_) => {
            problems.push(format!(
                "{setting}: {} holds no PEM certificate",
                pem.path.display()
            ));
            None
        }
        Err(e) => {
            problems.push(format!(
                "{setting}: {} is not valid PEM: {e}",
                pem.path.display()
            ));
            None
        }
    }
}

/// The private key in `pem`, or a problem when there is none.
fn private_key(
    setting: &str,
    pem: &Pem,
    problems: &mut Vec<String>,
) -> Option<PrivateKeyDer<'static>> {
    match PrivateKeyDer::from_pem_slice(&pem.bytes) {
        Ok(der) => Some(der),
        Err(e) => {
            problems.push(format!(
                "{setting}: {} holds no PEM private key ({e})",
                pem.path.display()
            ));
            None
        }
    }
}

/// `certs` as trust anchors, or a problem when one cannot be.
fn trust_anchors(
    setting: &str,
    pem: &Pem,
    certs: Vec<CertificateDer<'static>>,
    problems: &mut Vec<String>,
) -> Option<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        if let Err(e) = roots.add(cert) {
            problems.push(format!(
                "{setting}: {} holds a certificate that cannot be a trust anchor: {e}",
                pem.path.display()
            ));
            return None;
        }
    }
    Some(roots)
}

/// A client configuration for HTTP/2 to peers: trusting `roots`, presenting `identity` when
/// given.
fn client_config(
    roots: Arc<rustls::RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key)?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A server configuration with this chain and key for one protocol (its ALPN name), asking for
/// an optional client certificate from `client_roots` when given. Building it checks that the
/// key belongs to the certificate.
fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_roots: Option<Arc<rustls::RootCertStore>>,
    alpn: &[u8],
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(roots) => {
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}
