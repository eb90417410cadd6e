//! A node reached through something else than its listener (NAT, a port forward, a proxy):
//! `--advertise-grpc` is the address the membership records and the leader dials, and a node
//! given a malformed one refuses to start.

mod common;

use common::{cli, gatehouse, ok, serve, status_until};
use serde_json::Value;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A port forward: every connection accepted on its own port is piped to `target` once that is
/// known (until then it is closed). Counts the connections it piped.
struct Forward {
    addr: String,
    target: Arc<Mutex<Option<String>>>,
    piped: Arc<AtomicUsize>,
}

impl Forward {
    fn start() -> Forward {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address").to_string();
        let target = Arc::new(Mutex::new(None::<String>));
        let piped = Arc::new(AtomicUsize::new(0));
        let (to, count) = (target.clone(), piped.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming().map_while(Result::ok) {
                let Some(target) = to.lock().expect("target lock").clone() else {
                    continue;
                };
                let Ok(outbound) = TcpStream::connect(&target) else {
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                pipe(&inbound, &outbound);
                pipe(&outbound, &inbound);
            }
        });
        Forward {
            addr,
            target,
            piped,
        }
    }
}

/// Copies `from` into `to` on a thread of its own until `from` ends.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (mut from, mut to) = (
        from.try_clone().expect("a socket clone"),
        to.try_clone().expect("a socket clone"),
    );
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if to.write_all(&buf[..n]).is_ok() => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                _ => break,
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[test]
fn the_leader_reaches_a_node_at_the_address_it_advertises() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(1, dir.path(), &["--bootstrap"], None);
    let token = std::fs::read_to_string(dir.path().join("node-1/admin.key"))
        .unwrap()
        .trim()
        .to_owned();
    let forward = Forward::start();
    let second = serve(
        2,
        dir.path(),
        &["--join", &first.grpc, "--advertise-grpc", &forward.addr],
        Some(&token),
    );
    *forward.target.lock().unwrap() = Some(second.grpc.clone());

    // The membership names the forward, not the listener, and the leader replicates through it.
    let status = status_until(&first.grpc, &token, "node 2 catches up", |status| {
        status["nodes"].as_array().is_some_and(|nodes| {
            nodes
                .iter()
                .any(|n| n["node_id"] == 2 && n["lag"] == 0 && n["reachable"] == true)
        })
    });
    let recorded: Vec<&Value> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["node_id"] == 2)
        .collect();
    assert_eq!(recorded[0]["grpc_addr"], forward.addr.as_str());
    assert_ne!(forward.addr, second.grpc);
    assert!(
        forward.piped.load(Ordering::Relaxed) > 0,
        "the leader dialled the advertised address"
    );
    ok(cli(&first.grpc, &token, &["cluster", "promote", "2"]));
    status_until(&second.grpc, &token, "node 2 votes", |status| {
        status["voters"]
            .as_array()
            .is_some_and(|voters| voters.len() == 2)
    });
}

#[test]
fn a_malformed_advertised_address_stops_the_node_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [
        "127.0.0.1",
        "127.0.0.1:0",
        ":7400",
        "http://gh.example:7400",
        "gh:port",
    ] {
        let data = dir.path().join("node");
        let out = gatehouse(&[
            "serve",
            "--node-id",
            "1",
            "--data-dir",
            data.to_str().unwrap(),
            "--bootstrap",
            "--advertise-grpc",
            bad,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(
            stderr.contains("advertise-grpc") && stderr.contains(bad),
            "{bad:?}: {stderr}"
        );
        assert!(!data.exists(), "{bad:?} left a data directory behind");
    }
}
