//! Adversaries whose attack needs a node to die: real `gatehouse serve` processes, SIGKILL, and
//! an upstream in this test process that outlives them and counts what reaches it.
//!
//! An untrusted upstream advertises its destructive `charge` as idempotent, hoping a failover
//! sends the same approved payment twice. Only an admin's `idempotent: true` or a trusted
//! upstream makes a call retry-safe, so the new home marks it outcome unknown instead. And the
//! home that died had written, before it sent the request, that it was sending it.

mod common;

use common::{BIN, Node, cli, ok, serve, three_voters, until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGENT_KEY: &str = "gate_adv-shop-bot-000000000000000000000";
const APPROVER_KEY: &str = "gate_adv-shop-approver-0000000000000000";

/// An HTTP upstream that records each request's `Gatehouse-Call-Id` and answers none of them:
/// the payment is "in flight" when its home dies, as in the attack.
struct HoldingUpstream {
    url: String,
    seen: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl HoldingUpstream {
    fn start() -> HoldingUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let record = seen.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().map_while(Result::ok) {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut call = None;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    if let Some((name, value)) = line.split_once(':')
                        && name.eq_ignore_ascii_case("gatehouse-call-id")
                    {
                        call = Some(value.trim().to_owned());
                    }
                    line.clear();
                }
                if let Some(call) = call {
                    *record.lock().unwrap().entry(call).or_default() += 1;
                }
                held.push(stream);
            }
        });
        HoldingUpstream { url, seen }
    }

    fn count(&self, call_id: &str) -> usize {
        self.seen.lock().unwrap().get(call_id).copied().unwrap_or(0)
    }
}

fn resources(upstream: &str) -> String {
    let digest = |key: &str| gatehouse_registry::canonical::sha256_hex(key.as_bytes());
    format!(
        r#"apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: shop}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: shop-bot}}
spec: {{apiKeySha256: "{agent}", roles: {{shop: [agent]}}}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: shop-approver}}
spec: {{apiKeySha256: "{approver}", roles: {{shop: [approver]}}}}
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {{name: pay, tenant: shop}}
spec: {{type: http, url: "{upstream}", timeoutMs: 60000}}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {{name: pay.charge, tenant: shop}}
spec:
  description: Charges a card. The upstream says it is idempotent; it is not trusted.
  inputSchema: {{type: object, properties: {{amount: {{type: integer}}}}, required: [amount]}}
  annotations: {{destructiveHint: true, idempotentHint: true}}
"#,
        agent = digest(AGENT_KEY),
        approver = digest(APPROVER_KEY),
    )
}

fn record(node: &Node, call_id: &str) -> Option<Value> {
    let out = cli(
        &node.grpc,
        APPROVER_KEY,
        &["-o", "json", "approvals", "get", call_id],
    );
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).expect("a record is JSON"))
}

#[test]
fn an_untrusted_upstreams_idempotent_hint_does_not_resend_a_payment_after_its_home_dies() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = HoldingUpstream::start();
    let (mut nodes, token) = three_voters(dir.path(), &["--home-unreachable-after-ms", "1500"]);
    let file = dir.path().join("shop.yaml");
    std::fs::write(&file, resources(&upstream.url)).unwrap();
    ok(cli(
        &nodes[0].grpc,
        &token,
        &["apply", "-f", file.to_str().unwrap()],
    ));

    let call = |node: &Node| {
        cli(
            &node.grpc,
            AGENT_KEY,
            &[
                "call",
                "pay.charge",
                "--tenant",
                "shop",
                "--args",
                r#"{"amount":500}"#,
            ],
        )
    };
    let id = until(
        "the tenant is placed and takes the call",
        Duration::from_secs(30),
        || {
            let out = call(&nodes[1]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.split_whitespace()
                .next()
                .filter(|w| w.starts_with("call_") && text.contains("pending"))
                .map(str::to_owned)
        },
    );
    let pending = record(&nodes[1], &id).unwrap();
    assert_eq!(pending["effective_mode"], "destructive", "{pending}");
    ok(cli(
        &nodes[1].grpc,
        APPROVER_KEY,
        &[
            "approvals",
            "approve",
            "--yes",
            "--reason",
            "a real order",
            &id,
        ],
    ));
    until(
        "the payment reaches the upstream",
        Duration::from_secs(30),
        || (upstream.count(&id) == 1).then_some(()),
    );

    // The home dies with the payment in flight.
    let executing = record(&nodes[1], &id).unwrap();
    assert_eq!(executing["state"], "executing", "{executing}");
    let home = executing["claim"]["node_id"].as_u64().expect("a claim");
    let claim_id = executing["claim"]["claim_id"].clone();
    let position = nodes.iter().position(|n| n.id == home).unwrap();
    let mut killed = nodes.remove(position);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();

    // Its audit log already says it sent the claim's request: written before the request.
    let data = dir.path().join(format!("node-{home}"));
    let tail = Command::new(BIN)
        .args(["audit", "tail", "--json", "-n", "10000", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let executions: Vec<Value> = ok(tail)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a record is JSON"))
        .filter(|r| r["call_id"] == id.as_str() && r["decision"] == "execute")
        .collect();
    assert_eq!(executions.len(), 1, "{executions:#?}");
    assert_eq!(executions[0]["outcome"], "started");
    assert_eq!(executions[0]["claim_id"], claim_id);

    let survivor = &nodes[0];
    let settled = until(
        "the new home settles the call",
        Duration::from_secs(60),
        || {
            assert_eq!(upstream.count(&id), 1, "the payment was sent twice");
            let r = record(survivor, &id)?;
            (r["state"] != "executing").then_some(r)
        },
    );
    assert_eq!(
        settled["state"], "outcome_unknown",
        "a lost claim of a call no trusted source called idempotent: {settled}"
    );

    // The killed home comes back from its data directory; nothing sends the payment again.
    let back = serve(home, dir.path(), &[], None);
    until("the old home rejoins", Duration::from_secs(30), || {
        let r = record(&back, &id)?;
        (r["state"] == "outcome_unknown").then_some(())
    });
    let verified = Command::new(BIN)
        .args(["audit", "verify", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    ok(verified);
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        assert_eq!(upstream.count(&id), 1, "the payment was sent twice");
        std::thread::park_timeout(Duration::from_millis(200));
    }
}
