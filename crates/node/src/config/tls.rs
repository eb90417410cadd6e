//! TLS settings: `tls-cert`, `tls-key`, `tls-ca` and `peer-mtls`, checked together and their
//! files read.

use super::problems::Checked;
use gatehouse_cluster::tls::NodeTls;
use std::path::PathBuf;

/// The TLS settings as given.
pub(super) struct TlsFiles {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub ca: Option<PathBuf>,
    pub peer_mtls: bool,
}

/// The node's TLS material when TLS is configured, its files read and checked.
pub(super) fn tls_settings(files: TlsFiles) -> Checked<Option<NodeTls>> {
    let mut problems = Vec::new();
    let TlsFiles {
        cert,
        key,
        ca,
        peer_mtls,
    } = files;
    if peer_mtls && (cert.is_none() || key.is_none() || ca.is_none()) {
        problems.push("peer-mtls: needs tls-cert, tls-key and tls-ca".to_owned());
    }
    let tls = match (cert, key, ca) {
        (None, None, None) => None,
        (None, None, Some(_)) => {
            problems.push("tls-ca: only with tls-cert and tls-key".to_owned());
            None
        }
        (Some(cert), Some(key), Some(ca)) => match NodeTls::load(&cert, &key, &ca, peer_mtls) {
            Ok(tls) => Some(tls),
            Err(found) => {
                problems.extend(found);
                None
            }
        },
        (Some(_), Some(_), None) => {
            problems.push(
                "tls-ca: required with tls-cert: the CA that signed the other nodes' \
                 certificates, which this node verifies them against"
                    .to_owned(),
            );
            None
        }
        (Some(_), None, _) | (None, Some(_), _) => {
            problems.push("tls-cert and tls-key: give both or neither".to_owned());
            None
        }
    };
    Checked::with(tls, problems)
}
