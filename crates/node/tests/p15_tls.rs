//! TLS between real `gatehouse` processes: a cluster whose listeners serve TLS only forms,
//! replicates and answers the command line and HTTPS clients that trust its CA, and refuses
//! plaintext; under `peer-mtls` a node with a certificate from another CA cannot join, and a
//! Raft RPC over a connection without a client certificate is refused while clients without one
//! still get in.

use common::pki::{Ca, path};
use common::{BIN, Node, cli, ok, serve};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::raft_service_client::RaftServiceClient;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

mod common;

/// The command line against `addr`, trusting `ca`.
fn cli_tls(addr: &str, token: &str, ca: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--ca", ca.to_str().unwrap()];
    all.extend_from_slice(args);
    cli(addr, token, &all)
}

/// Runs `attempt` until it returns `Some` or 20 s pass.
fn until<T>(what: &str, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(found) = attempt() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// `cluster status` over TLS, once `check` holds.
fn status_until(node: &Node, token: &str, ca: &Path, check: impl Fn(&Value) -> bool) -> Value {
    until("cluster status", || {
        let out = cli_tls(&node.grpc, token, ca, &["-o", "json", "cluster", "status"]);
        let status: Value = serde_json::from_slice(&out.stdout).ok()?;
        (out.status.success() && check(&status)).then_some(status)
    })
}

/// Owned arguments as `serve` takes them.
fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The admin key a bootstrapping node wrote.
fn admin_key(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned()
}

/// A GET over HTTPS with a client that trusts `ca`: the whole response, head and body.
fn https_get(addr: &str, ca: &Path, target: &str) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, TcpStream::connect(addr).unwrap());
    write!(
        tls,
        "GET {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    // The server may close without close_notify after a `connection: close` answer.
    let _ = tls.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

/// A GET in plain HTTP: the whole response.
fn http_get(addr: &str, target: &str) -> String {
    let mut tcp = TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "GET {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = tcp.read_to_string(&mut response);
    response
}

#[test]
fn a_tls_cluster_forms_replicates_and_refuses_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "cluster-ca");
    let certs: Vec<_> = (1..=3).map(|id| ca.node(&format!("node-{id}"))).collect();
    let tls = |id: usize| certs[id - 1].serve_args(&ca);
    let args = |id: usize, extra: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        all.extend(tls(id));
        all
    };

    let first_args = args(1, &["--bootstrap"]);
    let first = serve(1, dir.path(), &as_strs(&first_args), None);
    let token = admin_key(dir.path());
    let mut nodes = vec![first];
    for id in [2, 3] {
        let join_args = args(id, &["--join", &nodes[0].grpc]);
        nodes.push(serve(
            id as u64,
            dir.path(),
            &as_strs(&join_args),
            Some(&token),
        ));
    }
    for id in [2u64, 3] {
        status_until(&nodes[0], &token, &ca.cert, |s| {
            s["nodes"]
                .as_array()
                .is_some_and(|n| n.iter().any(|n| n["node_id"] == id && n["lag"] == 0))
        });
        // An election under load can interrupt a promotion: ask again until it holds.
        until("the promotion", || {
            let promote = ["cluster", "promote", &id.to_string()];
            let _ = cli_tls(&nodes[0].grpc, &token, &ca.cert, &promote);
            let out = cli_tls(
                &nodes[0].grpc,
                &token,
                &ca.cert,
                &["-o", "json", "cluster", "status"],
            );
            let status: Value = serde_json::from_slice(&out.stdout).ok()?;
            status["voters"]
                .as_array()
                .is_some_and(|v| v.iter().any(|v| v == id))
                .then_some(())
        });
    }
    status_until(&nodes[0], &token, &ca.cert, |s| {
        s["voters"].as_array().is_some_and(|v| v.len() == 3)
    });

    let tenant = dir.path().join("tenant.yaml");
    std::fs::write(
        &tenant,
        "apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata:\n  name: sealed\n\
         spec:\n  displayName: Over TLS\n",
    )
    .unwrap();
    let applied = ok(cli_tls(
        &nodes[1].grpc,
        &token,
        &ca.cert,
        &["apply", "-f", tenant.to_str().unwrap()],
    ));
    assert!(applied.contains("Tenant/sealed created"), "{applied}");
    for node in &nodes {
        let shown = until("the tenant reaches every node", || {
            let out = cli_tls(&node.grpc, &token, &ca.cert, &["get", "tenant", "sealed"]);
            out.status.success().then(|| ok(out))
        });
        assert!(shown.contains("Over TLS"), "node {}: {shown}", node.id);
    }

    let health = https_get(&nodes[2].http, &ca.cert, "/healthz");
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with("ok\n"), "{health}");
    let card = https_get(&nodes[0].http, &ca.cert, "/.well-known/agent-card.json");
    assert!(
        card.contains(&format!("\"https://{}/a2a\"", nodes[0].http)),
        "the card must give an https:// URL: {card}"
    );

    let plain = http_get(&nodes[0].http, "/healthz");
    assert!(plain.starts_with("HTTP/1.1 400"), "{plain}");
    assert!(plain.contains("HTTPS only"), "{plain}");
    let refused = cli(&nodes[0].grpc, &token, &["get", "tenant", "sealed"]);
    assert!(!refused.status.success(), "a plaintext gRPC call must fail");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("Unavailable: this node serves gRPC over TLS only"),
        "{said}"
    );
}

#[test]
fn under_peer_mtls_strangers_and_certificateless_raft_calls_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "cluster-ca");
    let stranger_ca = Ca::new(dir.path(), "stranger-ca");
    let mtls = |cert: &common::pki::NodeCert, extra: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        all.extend(cert.serve_args(&ca));
        all.push("--peer-mtls".into());
        all
    };

    let first_args = mtls(&ca.node("node-1"), &["--bootstrap"]);
    let first = serve(1, dir.path(), &as_strs(&first_args), None);
    let token = admin_key(dir.path());

    // A node with the cluster's CA joins and replicates: peers present their certificates.
    let member_cert = ca.node("node-2");
    let member_args = mtls(&member_cert, &["--join", &first.grpc]);
    let member = serve(2, dir.path(), &as_strs(&member_args), Some(&token));
    status_until(&first, &token, &ca.cert, |s| {
        s["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["node_id"] == 2 && n["lag"] == 0))
    });

    // A node whose certificate another CA signed is refused, even with the admin key.
    let stranger_cert = stranger_ca.node("node-9");
    let stranger = Command::new(BIN)
        .args(["serve", "--node-id", "9", "--data-dir"])
        .arg(dir.path().join("node-9"))
        .args(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .args(["--join", &first.grpc])
        .args(["--tls-cert", &path(&stranger_cert.cert)])
        .args(["--tls-key", &path(&stranger_cert.key)])
        .args(["--tls-ca", &path(&ca.cert), "--peer-mtls"])
        .env("GATEHOUSE_TOKEN", &token)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(!stranger.status.success(), "the stranger must not start");
    let said = String::from_utf8_lossy(&stranger.stderr);
    assert!(said.contains("TLS handshake failed"), "{said}");
    let status = status_until(&first, &token, &ca.cert, |_| true);
    let ids: Vec<u64> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["node_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2], "{status}");

    // The peer secret is not enough without a client certificate; with one the same call gets
    // past the check (and fails on its empty payload instead).
    let secret = std::fs::read_to_string(dir.path().join("node-1/cluster.key")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let vote = |identity: Option<Identity>| {
        runtime.block_on(async {
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(std::fs::read(&ca.cert).unwrap()));
            if let Some(identity) = identity {
                tls = tls.identity(identity);
            }
            let channel = Endpoint::from_shared(format!("https://{}", first.grpc))
                .unwrap()
                .tls_config(tls)
                .unwrap()
                .connect()
                .await
                .unwrap();
            let mut request = tonic::Request::new(pb::VoteRequest {
                payload: b"{}".to_vec(),
            });
            request.metadata_mut().insert(
                "authorization",
                format!("Bearer {}", secret.trim()).parse().unwrap(),
            );
            RaftServiceClient::new(channel)
                .vote(request)
                .await
                .unwrap_err()
        })
    };
    let without = vote(None);
    assert_eq!(without.code(), tonic::Code::Unauthenticated, "{without:?}");
    assert!(
        without.message().contains("client certificate"),
        "{without:?}"
    );
    let with = vote(Some(Identity::from_pem(
        std::fs::read(&member_cert.cert).unwrap(),
        std::fs::read(&member_cert.key).unwrap(),
    )));
    assert_eq!(with.code(), tonic::Code::InvalidArgument, "{with:?}");

    // Clients without a certificate still get in.
    let listed = ok(cli_tls(
        &member.grpc,
        &token,
        &ca.cert,
        &["-o", "json", "cluster", "status"],
    ));
    assert!(listed.contains("\"voters\""), "{listed}");
}
