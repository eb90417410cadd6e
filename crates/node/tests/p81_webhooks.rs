//! Webhooks against three real nodes and a receiver this test runs on loopback: a call that
//! starts waiting and is then decided is announced to the tenant's webhooks, signed with the
//! operator's credential, retried after the receiver's 503s, once per cluster rather than once
//! per node, and audited; a Slack-format webhook gets text that cannot ping a channel; another
//! tenant hears nothing and cannot sign with this tenant's secret; and a home lost with a notice
//! undelivered leaves it to the next home.

mod common;

use common::{Node, cli, keygen, ok, three_voters, until};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const WITHIN: Duration = Duration::from_secs(30);
const ACME_SECRET: &str = "whsec-acme-0123456789abcdef";
const GLOBEX_SECRET: &str = "whsec-globex-fedcba9876543210";

/// One request the receiver took, with the status it answered.
#[derive(Debug, Clone)]
struct Delivery {
    path: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
    status: u16,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a notice is JSON")
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// An HTTP/1.1 receiver on loopback: it answers `failures` requests with 503, then 200, and
/// keeps every request.
struct Receiver {
    addr: String,
    failures: Arc<AtomicUsize>,
    status_after: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<Delivery>>>,
}

impl Receiver {
    fn start(failures: usize) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let receiver = Receiver {
            addr: listener.local_addr().unwrap().to_string(),
            failures: Arc::new(AtomicUsize::new(failures)),
            status_after: Arc::new(AtomicU16::new(200)),
            seen: Arc::default(),
        };
        let (failures, status_after, seen) = (
            receiver.failures.clone(),
            receiver.status_after.clone(),
            receiver.seen.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (failures, status_after, seen) =
                    (failures.clone(), status_after.clone(), seen.clone());
                std::thread::spawn(move || serve(stream, &failures, &status_after, &seen));
            }
        });
        receiver
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self, path: &str) -> Vec<Delivery> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|d| d.path == path).cloned().collect()
    }

    /// The requests answered 2xx for the notice `event_id`.
    fn delivered(&self, path: &str, event_id: &str) -> Vec<Delivery> {
        self.seen(path)
            .into_iter()
            .filter(|d| d.status == 200 && d.header("gatehouse-event-id") == event_id)
            .collect()
    }
}

fn serve(
    stream: TcpStream,
    failures: &AtomicUsize,
    status_after: &AtomicU16,
    seen: &Mutex<Vec<Delivery>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut headers = HashMap::new();
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let fail = failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let status = if fail {
            503
        } else {
            status_after.load(Ordering::SeqCst)
        };
        seen.lock().unwrap().push(Delivery {
            path,
            headers,
            body,
            status,
        });
        let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok");
        if out.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// Checks a notice's signature as a receiver would: HMAC-SHA256 of `{timestamp}.{body}` with the
/// shared secret, and a timestamp near now.
fn signed_with(delivery: &Delivery, secret: &str) -> bool {
    let timestamp = delivery.header("gatehouse-timestamp");
    let Ok(seconds) = timestamp.parse::<u64>() else {
        return false;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now.abs_diff(seconds) > 300 {
        return false;
    }
    let Some(given) = delivery.header("gatehouse-signature").strip_prefix("v1=") else {
        return false;
    };
    let Ok(given) = hex::decode(given) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(&delivery.body);
    mac.verify_slice(&given).is_ok()
}

/// The operator's grants: one signing secret per tenant, and the transfer tool for acme.
fn node_flags(dir: &Path) -> Vec<String> {
    for (tenant, secret) in [("acme", ACME_SECRET), ("globex", GLOBEX_SECRET)] {
        std::fs::write(dir.join(format!("{tenant}.hook")), format!("{secret}\n")).unwrap();
    }
    let credentials = dir.join("credentials.toml");
    std::fs::write(
        &credentials,
        format!(
            "[[credential]]\nname = \"acme-hook\"\nfile = {:?}\ntenants = [\"acme\"]\n\n\
             [[credential]]\nname = \"globex-hook\"\nfile = {:?}\ntenants = [\"globex\"]\n",
            dir.join("acme.hook"),
            dir.join("globex.hook"),
        ),
    )
    .unwrap();
    [
        "--credentials-file",
        credentials.to_str().unwrap(),
        "--builtin",
        "acme:*",
        "--home-unreachable-after-ms",
        "1500",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// acme with an agent, an approver and a destructive tool; globex with nothing to call; the
/// webhooks `webhooks` adds.
fn resources(agent_sha: &str, approver_sha: &str, webhooks: &str) -> String {
    format!(
        r#"apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: acme}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: globex}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: ops-bot}}
spec: {{apiKeySha256: "{agent_sha}", roles: {{acme: [agent]}}}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: alice}}
spec: {{apiKeySha256: "{approver_sha}", roles: {{acme: [approver]}}}}
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {{name: lab, tenant: acme}}
spec: {{type: builtin}}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {{name: lab.transfer, tenant: acme}}
spec:
  approvalMode: destructive
  inputSchema:
    type: object
    properties:
      from: {{type: string}}
      to: {{type: string}}
      amount: {{type: integer}}
    required: [from, to, amount]
{webhooks}"#
    )
}

fn webhook(name: &str, tenant: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Webhook\n\
         metadata: {{name: {name}, tenant: {tenant}}}\nspec: {spec}\n"
    )
}

fn apply(node: &Node, admin: &str, dir: &Path, text: &str) -> std::process::Output {
    let file = dir.join("resources.yaml");
    std::fs::write(&file, text).unwrap();
    cli(&node.grpc, admin, &["apply", "-f", file.to_str().unwrap()])
}

/// Proposes a transfer as the agent; the call's id (the call waits: exit 5).
fn propose(node: &Node, agent: &str, args: &Value) -> String {
    common::propose_pending(&node.grpc, agent, "acme", "lab.transfer", args)
}

/// acme's home node id, from `cluster placement`.
fn home_of_acme(node: &Node, admin: &str) -> u64 {
    until("acme has a home", WITHIN, || {
        let out = cli(&node.grpc, admin, &["cluster", "placement", "-o", "json"]);
        let rows: Value = serde_json::from_slice(&out.stdout).ok()?;
        rows.as_array()?.iter().find(|r| r["tenant"] == "acme")?["home"].as_u64()
    })
}

/// The notification records in node `id`'s audit log, as JSON.
fn notification_audit(dir: &Path, id: u64) -> Vec<Value> {
    let data = dir.join(format!("node-{id}"));
    let out = common::gatehouse(&[
        "audit",
        "tail",
        "--data-dir",
        data.to_str().unwrap(),
        "-n",
        "10000",
        "-o",
        "jsonl",
    ]);
    common::stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == "notification")
        .collect()
}

#[test]
fn waiting_and_decided_calls_are_announced_signed_once_per_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let flags = node_flags(dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (nodes, admin) = three_voters(dir.path(), &flags);
    // Two 503s first: the home must retry.
    let receiver = Receiver::start(2);
    let (agent, agent_sha) = keygen();
    let (alice, alice_sha) = keygen();

    // acme's admin cannot sign its notices with globex's secret.
    let stolen = webhook(
        "ops",
        "acme",
        &format!(
            "{{url: '{}', credential: globex-hook}}",
            receiver.url("/acme")
        ),
    );
    let refused = apply(
        &nodes[0],
        &admin,
        dir.path(),
        &resources(&agent_sha, &alice_sha, &stolen),
    );
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("\"globex-hook\" is not a credential this node grants to tenant acme"),
        "{said}"
    );

    let hooks = [
        webhook(
            "ops",
            "acme",
            &format!(
                "{{url: '{}', credential: acme-hook, consoleUrl: 'https://gate.example'}}",
                receiver.url("/acme")
            ),
        ),
        webhook(
            "chat",
            "acme",
            &format!(
                "{{url: '{}', credential: acme-hook, format: slack, events: [waiting]}}",
                receiver.url("/slack")
            ),
        ),
        webhook(
            "ops",
            "globex",
            &format!(
                "{{url: '{}', credential: globex-hook}}",
                receiver.url("/globex")
            ),
        ),
    ]
    .concat();
    ok(apply(
        &nodes[0],
        &admin,
        dir.path(),
        &resources(&agent_sha, &alice_sha, &hooks),
    ));
    let home = home_of_acme(&nodes[0], &admin);

    // The tenant's agent reads where its notices go only as far as the host: a chat webhook's
    // path is its secret, and an agent holding it could post look-alike notices to approvers.
    let url_as = |token: &str| {
        let out = ok(cli(
            &nodes[1].grpc,
            token,
            &["-o", "json", "get", "webhook", "ops", "--tenant", "acme"],
        ));
        let got: Value = serde_json::from_str(out.trim()).unwrap();
        got["resource"]["spec"]["url"].as_str().unwrap().to_owned()
    };
    assert_eq!(url_as(&admin), receiver.url("/acme"));
    assert_eq!(url_as(&agent), format!("http://{}/…", receiver.addr));

    // An argument that would ping a whole Slack channel: arguments never leave in a notice.
    let transfer = json!({"from": "alice", "to": "<!channel>", "amount": 250});
    let id = propose(&nodes[2], &agent, &transfer);
    let waiting = format!("{id}.waiting");
    let got = until("the waiting notice is delivered", WITHIN, || {
        receiver.delivered("/acme", &waiting).pop()
    });
    assert!(signed_with(&got, ACME_SECRET), "{:?}", got.headers);
    assert!(!signed_with(&got, GLOBEX_SECRET));
    assert_eq!(got.header("gatehouse-event"), "waiting");
    assert_eq!(got.header("content-type"), "application/json");
    let notice = got.json();
    assert_eq!(notice["event"], "waiting");
    assert_eq!(notice["tenant"], "acme");
    assert_eq!(notice["call"]["id"], id.as_str());
    assert_eq!(notice["call"]["tool"], "lab.transfer");
    assert_eq!(notice["call"]["mode"], "destructive");
    assert_eq!(notice["call"]["proposed_by"]["agent"], "ops-bot");
    assert_eq!(
        notice["call"]["approvals"],
        json!({"given": 0, "required": 1})
    );
    assert_eq!(
        notice["console_url"],
        format!("https://gate.example/console#call={id}").as_str()
    );
    assert!(
        !String::from_utf8_lossy(&got.body).contains("channel"),
        "arguments never leave in a notice: {notice}"
    );
    // The 503s were retried: every attempt for the notice reached the receiver.
    let attempts: Vec<u16> = receiver
        .seen("/acme")
        .iter()
        .filter(|d| d.header("gatehouse-event-id") == waiting)
        .map(|d| d.status)
        .collect();
    assert!(
        attempts.starts_with(&[503]) && attempts.ends_with(&[200]),
        "{attempts:?}"
    );

    // The Slack webhook gets the same moment as a message.
    let slack = until("the Slack message is delivered", WITHIN, || {
        receiver.delivered("/slack", &waiting).pop()
    });
    let text = slack.json()["text"].as_str().unwrap().to_owned();
    assert!(text.starts_with("*Approval needed*"), "{text}");
    assert!(
        text.contains(&format!(
            "<http://{}/console#call={id}|",
            nodes_http(&nodes, home)
        )),
        "{text}"
    );
    assert_eq!(
        text.matches('<').count(),
        1,
        "the console link is the only link: {text}"
    );

    // Alice approves; the decision is announced to `ops`, and `chat` wants only `waiting`.
    ok(cli(
        &nodes[1].grpc,
        &alice,
        &[
            "approvals",
            "approve",
            &id,
            "--reason",
            "looks right",
            "--yes",
        ],
    ));
    let decided = format!("{id}.decided");
    let got = until("the decided notice is delivered", WITHIN, || {
        receiver.delivered("/acme", &decided).pop()
    });
    let notice = got.json();
    assert_eq!(notice["call"]["approved_by"][0]["principal"], "alice");
    assert_eq!(notice["call"]["approved_by"][0]["reason"], "looks right");
    assert!(signed_with(&got, ACME_SECRET));

    // Once every node has applied the marks, each one has seen every moment of the call.
    common::status_until(&nodes[0].grpc, &admin, "every node caught up", |status| {
        status["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 3 && n.iter().all(|n| n["lag"] == 0))
    });
    for (path, event_id) in [
        ("/acme", &waiting),
        ("/acme", &decided),
        ("/slack", &waiting),
    ] {
        assert_eq!(
            receiver.delivered(path, event_id).len(),
            1,
            "{event_id} to {path} once per cluster, not once per node"
        );
    }
    assert!(
        receiver
            .seen("/slack")
            .iter()
            .all(|d| d.header("gatehouse-event") == "waiting")
    );
    assert!(
        receiver.seen("/globex").is_empty(),
        "globex hears nothing of acme's calls"
    );

    // Every attempt is audited on the home, and only there.
    let audit = notification_audit(dir.path(), home);
    let outcomes: Vec<&str> = audit
        .iter()
        .filter(|r| r["target"] == "webhook/ops" && r["decision"] == "waiting")
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert!(
        outcomes
            .first()
            .is_some_and(|o| o.starts_with("failed: HTTP 503")),
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .last()
            .is_some_and(|o| o.starts_with("delivered: HTTP 200")),
        "{outcomes:?}"
    );
    assert!(
        audit
            .iter()
            .all(|r| r["tenant"] == "acme" && r["call_id"] == id.as_str())
    );
    for other in (1..=3).filter(|n| *n != home) {
        assert!(
            notification_audit(dir.path(), other).is_empty(),
            "node {other} sent nothing"
        );
    }
}

fn nodes_http(nodes: &[Node], id: u64) -> &str {
    &nodes.iter().find(|n| n.id == id).unwrap().http
}

#[test]
fn a_lost_home_leaves_its_undelivered_notice_to_the_next_home() {
    let dir = tempfile::tempdir().unwrap();
    let flags = node_flags(dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (mut nodes, admin) = three_voters(dir.path(), &flags);
    // The receiver is down (503) until the home is gone.
    let receiver = Receiver::start(usize::MAX);
    let (agent, agent_sha) = keygen();
    let (_, alice_sha) = keygen();
    let hook = webhook(
        "ops",
        "acme",
        &format!(
            "{{url: '{}', credential: acme-hook, events: [waiting]}}",
            receiver.url("/acme")
        ),
    );
    ok(apply(
        &nodes[0],
        &admin,
        dir.path(),
        &resources(&agent_sha, &alice_sha, &hook),
    ));
    let home = home_of_acme(&nodes[0], &admin);
    let other = nodes.iter().find(|n| n.id != home).unwrap().id;

    let via = nodes.iter().find(|n| n.id == other).unwrap();
    let id = propose(
        via,
        &agent,
        &json!({"from": "alice", "to": "bob", "amount": 5}),
    );
    let waiting = format!("{id}.waiting");
    until("the home tries to deliver", WITHIN, || {
        (!receiver.seen("/acme").is_empty()).then_some(())
    });

    // The home dies with the notice undelivered; the receiver comes back.
    nodes.retain(|n| n.id != home);
    receiver.failures.store(0, Ordering::SeqCst);
    let got = until(
        "the next home delivers the notice",
        Duration::from_secs(60),
        || receiver.delivered("/acme", &waiting).pop(),
    );
    assert!(signed_with(&got, ACME_SECRET));
    let new_home = home_of_acme(&nodes[0], &admin);
    assert_ne!(new_home, home);
    let audit = notification_audit(dir.path(), new_home);
    assert!(
        audit.iter().any(|r| r["outcome"]
            .as_str()
            .is_some_and(|o| o.starts_with("delivered"))),
        "{audit:?}"
    );
}
