//! A task delegated over A2A survives the loss of the node that took it: three real
//! `gatehouse serve` processes, a peer holding a JWT that acts for a user (RFC 8693 `act`), the
//! official Python `a2a-sdk` client. The first node takes a destructive task and is killed with
//! SIGKILL; the others still answer `GetTask` for it, over JSON-RPC and gRPC, an approver approves
//! it over gRPC, and it completes. Skips, saying so, without python3.

use gatehouse_testkit::python::{A2aClient, venv_python};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use common::{cli, ok, three_voters, until};

const ISSUER: &str = "https://id.partner.example";
const SECRET: &str = "a-shared-secret-of-at-least-thirty-two-bytes";
const APPROVER_KEY: &str = "gate_a2a-approver-000000000000000000000";
const AUTH_REQUIRED: &str = "TASK_STATE_AUTH_REQUIRED";
const COMPLETED: &str = "TASK_STATE_COMPLETED";

/// One run of the Python client against the card of the node at `http`.
fn a2a(http: &str, transport: &str, token: &str, args: &[&str]) -> Value {
    A2aClient::new(&format!("http://{http}"), transport, Some(token))
        .expect("the test checked for python first")
        .deadline(30.0)
        .run(args)
        .expect("the Python client answers with JSON")
}

fn state(answer: &Value) -> Option<&str> {
    answer["task"]["state"].as_str()
}

/// A token of the partner's identity provider: the peer `partner-agent` acting for `erin`.
fn peer_token() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": ISSUER, "sub": "erin", "act": {"sub": "partner-agent"},
        "iat": now, "exp": now + 600,
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn resources() -> String {
    let approver = gatehouse_registry::canonical::sha256_hex(APPROVER_KEY.as_bytes());
    format!(
        r#"apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: ops}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: partner-peer}}
spec:
  jwt: {{issuer: "{ISSUER}", subject: partner-agent}}
  roles: {{ops: [agent]}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: erin}}
spec:
  jwt: {{issuer: "{ISSUER}", subject: erin}}
  roles: {{ops: [agent]}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: ops-approver}}
spec:
  apiKeySha256: "{approver}"
  roles: {{ops: [approver]}}
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {{name: demo, tenant: ops}}
spec: {{type: builtin}}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {{name: demo.transfer, tenant: ops}}
spec:
  description: Moves an amount between two demo accounts.
  approvalMode: destructive
  inputSchema:
    type: object
    properties:
      from: {{type: string, enum: [alice, bob, carol]}}
      to: {{type: string, enum: [alice, bob, carol]}}
      amount: {{type: integer, minimum: 1, maximum: 10000}}
    required: [from, to, amount]
"#
    )
}

#[test]
fn a_delegated_task_outlives_the_node_that_took_it() {
    if venv_python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("partner.secret");
    std::fs::write(&secret, SECRET).unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        format!(
            "builtins = [\"ops:transfer\"]\n\n[[jwt]]\nissuer = \"{ISSUER}\"\n\
             algorithms = [\"HS256\"]\nhs256-secret-file = {:?}\n",
            secret.to_str().unwrap()
        ),
    )
    .unwrap();

    let config = dir.path().join("gatehouse.toml");
    let common = [
        "--config",
        config.to_str().unwrap(),
        "--home-unreachable-after-ms",
        "1500",
    ];
    let (mut nodes, token) = three_voters(dir.path(), &common);
    let files = dir.path().join("ops.yaml");
    std::fs::write(&files, resources()).unwrap();
    ok(cli(
        &nodes[0].grpc,
        &token,
        &["apply", "-f", files.to_str().unwrap()],
    ));

    // The peer delegates a destructive transfer to the first node, for erin.
    let peer = peer_token();
    let args = json!({"from": "alice", "to": "bob", "amount": 25}).to_string();
    let sent = until(
        "the tenant is placed and takes the task",
        Duration::from_secs(60),
        || {
            let answer = a2a(
                &nodes[0].http,
                "jsonrpc",
                &peer,
                &["send", "demo.transfer", &args],
            );
            (state(&answer) == Some(AUTH_REQUIRED)).then_some(answer)
        },
    );
    let task_id = sent["task"]["id"].as_str().expect("a task id").to_owned();
    assert_eq!(
        sent["task"]["metadata"]["dev.gatehouse/tenant"], "ops",
        "{sent}"
    );

    // The node that took it is lost.
    let mut killed = nodes.remove(0);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    // Both others answer for the task, over both bindings.
    for (node, transport) in [(&nodes[0], "jsonrpc"), (&nodes[1], "grpc")] {
        let got = until(
            "another node answers GetTask",
            Duration::from_secs(30),
            || {
                let got = a2a(&node.http, transport, &peer, &["get", &task_id]);
                (state(&got) == Some(AUTH_REQUIRED)).then_some(got)
            },
        );
        assert_eq!(got["task"]["id"], task_id.as_str(), "{got}");
        assert_eq!(got["task"]["contextId"], sent["task"]["contextId"], "{got}");
    }

    // An approver approves it over gRPC at a survivor; it runs, once, and completes.
    until("the approval is taken", Duration::from_secs(30), || {
        let out = cli(
            &nodes[0].grpc,
            APPROVER_KEY,
            &[
                "approvals",
                "approve",
                "--yes",
                "--reason",
                "checked",
                &task_id,
            ],
        );
        out.status.success().then_some(())
    });
    let done = until("the task completes", Duration::from_secs(90), || {
        let got = a2a(&nodes[1].http, "grpc", &peer, &["get", &task_id]);
        (state(&got) == Some(COMPLETED)).then_some(got)
    });
    let artifact = &done["task"]["artifacts"][0]["parts"][0]["data"];
    assert!(!artifact.is_null(), "the transfer's result: {done}");

    // The call's record names both the user and the peer.
    let record = ok(cli(
        &nodes[0].grpc,
        APPROVER_KEY,
        &["-o", "json", "approvals", "get", &task_id],
    ));
    let record: Value = serde_json::from_str(record.trim()).unwrap();
    assert_eq!(record["principals"]["end_user"], "erin", "{record}");
    assert_eq!(record["principals"]["a2a_peer"], "partner-peer", "{record}");
}
