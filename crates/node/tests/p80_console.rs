//! The approvals console in a real browser against three real nodes: an approver signs in, sees
//! a call arrive live, approves it and sees it succeed; a second approver on another node sees
//! it leave the list; where two people must approve, the first sees that she approved and the
//! second is still asked; what an approver types outlives the page's updates; an approver who
//! proposed a call is refused as the API words it; an agent's arguments written as markup stay
//! text. The JSON API answers the same refusals as gRPC.
//!
//! Needs `chromium` and `chromium-driver` (`scripts/browser-env` installs them); without them
//! the test says so and passes. `GATEHOUSE_SCREENSHOTS=DIR` keeps its screenshots in DIR (the
//! README's are from here); they always go under the test's temporary directory too.

mod common;

use common::browser::{Driver, Session};
use common::{cli, keygen, ok, three_voters};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(30);

fn principal(name: &str, sha: &str, roles: &str) -> String {
    format!(
        "apiVersion: gatehouse.dev/v1\nkind: Principal\nmetadata: {{name: {name}}}\n\
         spec: {{apiKeySha256: \"{sha}\", roles: {{acme: {roles}, globex: {roles}}}}}\n---\n"
    )
}

const TOOLS: &str = r#"apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {name: acme}
spec: {}
---
apiVersion: gatehouse.dev/v1
kind: Upstream
metadata: {name: lab, tenant: acme}
spec: {type: builtin}
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: lab.transfer, tenant: acme}
spec:
  description: Moves an amount between two accounts.
  approvalMode: destructive
  inputSchema:
    type: object
    properties:
      from: {type: string, enum: [alice, bob, carol], description: The account to debit.}
      to: {type: string, enum: [alice, bob, carol], description: The account to credit.}
      amount: {type: integer, minimum: 1, maximum: 10000, description: Whole euros.}
    required: [from, to, amount]
---
apiVersion: gatehouse.dev/v1
kind: Tool
metadata: {name: lab.echo, tenant: acme}
spec:
  description: Says its text back.
  approvalMode: destructive
  inputSchema:
    type: object
    properties:
      text: {type: string}
    required: [text]
"#;

/// acme's tools again in `globex`, whose calls wait for two people's approvals.
fn two_people() -> String {
    format!("---\n{}", TOOLS.replace("acme", "globex"))
        + "---\napiVersion: gatehouse.dev/v1\nkind: Policy\n\
           metadata: {name: two-people, tenant: globex}\nspec: {approvals: {required: 2}}\n"
}

fn screenshot(page: &Session<'_>, name: &str) {
    let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console")];
    if let Some(dir) = std::env::var_os("GATEHOUSE_SCREENSHOTS") {
        dirs.push(PathBuf::from(dir));
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir).expect("a screenshot directory");
        page.screenshot(&dir.join(name));
    }
}

fn sign_in(page: &Session<'_>, http: &str, key: &str) {
    page.open(&format!("http://{http}/console"));
    page.type_into("#token", key);
    page.click("#sign-in-button");
    page.until("signed in", WITHIN, |p| {
        p.run(
            "return !document.getElementById('console').hidden;",
            json!([]),
        )
        .as_bool()
        .filter(|shown| *shown)
    });
}

/// The call's card in the waiting list, if the page shows it.
fn card(page: &Session<'_>, call: &str) -> Option<String> {
    page.text(&format!("#pending article[data-call-id=\"{call}\"]"))
}

/// The value of the input `css` selects, and whether it holds the focus.
fn typed(page: &Session<'_>, css: &str) -> Value {
    page.run(
        "const e = document.querySelector(arguments[0]); \
         return e ? [e.value, document.activeElement === e] : null;",
        json!([css]),
    )
}

/// The call's state in the decided list, if the page shows it there.
fn decided(page: &Session<'_>, call: &str) -> Option<String> {
    page.run(
        "const e = document.querySelector(`#history li[data-call-id=\"${arguments[0]}\"]`); \
         return e ? e.dataset.state : null;",
        json!([call]),
    )
    .as_str()
    .map(str::to_owned)
}

/// Proposes an acme call through the command line; it waits for approval. Its id.
fn propose(addr: &str, key: &str, tool: &str, args: &Value) -> String {
    common::propose_pending(addr, key, "acme", tool, args)
}

#[test]
fn approvers_decide_in_the_console_and_every_node_shows_it() {
    let Some(driver) = Driver::start() else {
        eprintln!(
            "skipped: no chromedriver here (scripts/browser-env installs chromium and \
             chromium-driver)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (nodes, admin) = three_voters(
        dir.path(),
        &["--builtin", "acme:*", "--builtin", "globex:*"],
    );
    let (agent, agent_sha) = keygen();
    let (alice, alice_sha) = keygen();
    let (bob, bob_sha) = keygen();
    let (carol, carol_sha) = keygen();
    let file = dir.path().join("acme.yaml");
    std::fs::write(
        &file,
        [
            principal("agent", &agent_sha, "[agent]"),
            principal("alice", &alice_sha, "[approver]"),
            principal("bob", &bob_sha, "[approver]"),
            // carol proposes and approves: the console must not let her approve her own call.
            principal("carol", &carol_sha, "[agent, approver]"),
            TOOLS.to_owned(),
            two_people(),
        ]
        .concat(),
    )
    .unwrap();
    ok(cli(
        &nodes[0].grpc,
        &admin,
        &["apply", "-f", file.to_str().unwrap()],
    ));

    let alice_page = driver.session(1100, 900);
    sign_in(&alice_page, &nodes[0].http, &alice);
    let bob_page = driver.session(1100, 900);
    sign_in(&bob_page, &nodes[1].http, &bob);
    assert_eq!(alice_page.text("#who-name").as_deref(), Some("alice"));

    // A call proposed on node 3 appears on both pages while they are open.
    let transfer = json!({"from": "alice", "to": "bob", "amount": 250});
    let id = propose(&nodes[2].grpc, &agent, "lab.transfer", &transfer);
    let shown = alice_page.until("the call appears for alice", WITHIN, |p| {
        card(p, &id).filter(|text| text.contains("The account to debit."))
    });
    assert!(shown.contains("lab.transfer"), "{shown}");
    assert!(shown.contains("destructive"), "{shown}");
    assert!(shown.contains("Approvals 0 of 1"), "{shown}");
    assert!(shown.contains("expires in"), "{shown}");
    assert!(shown.contains("250"), "{shown}");
    bob_page.until("the call appears for bob on node 2", WITHIN, |p| {
        card(p, &id)
    });
    // A webhook notice links to `/console#call=ID`: that call's card is the one marked.
    bob_page.run("location.hash = '#call=' + arguments[0];", json!([id]));
    bob_page.until("the linked call is marked", WITHIN, |p| {
        p.run(
            "const e = document.querySelector('#pending article.linked'); \
             return e ? e.dataset.callId : null;",
            json!([]),
        )
        .as_str()
        .filter(|linked| *linked == id)
        .map(str::to_owned)
    });
    screenshot(&alice_page, "console-pending.png");

    // Alice approves what she saw; the call runs and the page shows it succeeded.
    alice_page.type_into(
        &format!("article[data-call-id=\"{id}\"] .reason"),
        "invoice 1182",
    );
    alice_page.click(&format!("article[data-call-id=\"{id}\"] .approve"));
    alice_page.until("the call succeeds for alice", WITHIN, |p| {
        decided(p, &id).filter(|state| state == "succeeded")
    });
    assert_eq!(card(&alice_page, &id), None);
    screenshot(&alice_page, "console-decided.png");
    // Bob, on another node, sees it leave the waiting list and end.
    bob_page.until("the call leaves bob's list", WITHIN, |p| {
        card(p, &id).is_none().then_some(())
    });
    bob_page.until("the call succeeds for bob", WITHIN, |p| {
        decided(p, &id).filter(|state| state == "succeeded")
    });

    // Where two people must approve, alice's approval leaves the call waiting: her card says so
    // and offers no second approval; bob's card still asks him, and his approval runs the call.
    let shared = common::propose_pending(
        &nodes[2].grpc,
        &agent,
        "globex",
        "lab.echo",
        &json!({"text": "two"}),
    );
    alice_page.until("the two-person call appears for alice", WITHIN, |p| {
        card(p, &shared)
    });
    bob_page.until("the two-person call appears for bob", WITHIN, |p| {
        card(p, &shared)
    });
    let on_card = |part: &str| format!("article[data-call-id=\"{shared}\"] {part}");
    alice_page.click(&on_card(".approve"));
    let note = alice_page.until("alice's card says she approved", WITHIN, |p| {
        p.text(&on_card(".mine"))
    });
    assert!(note.contains("You approved"), "{note}");
    assert_eq!(alice_page.text(&on_card(".approve")), None);
    assert!(
        alice_page.text(&on_card(".reject")).is_some(),
        "she may still reject"
    );
    let shown = bob_page.until("bob sees alice's approval", WITHIN, |p| {
        card(p, &shared).filter(|text| text.contains("Approvals 1 of 2"))
    });
    assert!(shown.contains("alice"), "{shown}");
    assert_eq!(bob_page.text(&on_card(".mine")), None);
    bob_page.click(&on_card(".approve"));
    alice_page.until("the two-person call succeeds for alice", WITHIN, |p| {
        decided(p, &shared).filter(|state| state == "succeeded")
    });

    // Carol's own call: its markup-looking argument stays text, and her approval is refused.
    let trap = r#"<img src=x onerror="document.title='pwned'">"#;
    let own = propose(&nodes[0].grpc, &carol, "lab.echo", &json!({"text": trap}));
    let carol_page = driver.session(1100, 900);
    sign_in(&carol_page, &nodes[2].http, &carol);
    let shown = carol_page.until("carol's call appears", WITHIN, |p| card(p, &own));
    assert!(shown.contains(trap), "the argument shows as text: {shown}");
    let images = carol_page.run(
        "return document.querySelectorAll('#pending img').length;",
        json!([]),
    );
    assert_eq!(images, json!(0), "no element was made from the argument");
    // What carol types stays while other calls come: the page's updates leave her box alone.
    let reason = format!("article[data-call-id=\"{own}\"] .reason");
    carol_page.type_into(&reason, "checking with finance");
    let next = propose(&nodes[1].grpc, &agent, "lab.echo", &json!({"text": "next"}));
    carol_page.until("the next call appears for carol", WITHIN, |p| {
        card(p, &next)
    });
    assert_eq!(
        typed(&carol_page, &reason),
        json!(["checking with finance", true])
    );
    carol_page.click(&format!("article[data-call-id=\"{own}\"] .approve"));
    let refusal = carol_page.until("the refusal shows", WITHIN, |p| {
        p.text(&format!("article[data-call-id=\"{own}\"] .refusal"))
            .filter(|t| !t.is_empty())
    });
    // Nor does a later event wipe the refusal she is reading.
    let later = propose(
        &nodes[2].grpc,
        &agent,
        "lab.echo",
        &json!({"text": "later"}),
    );
    carol_page.until("a later call appears for carol", WITHIN, |p| {
        card(p, &later)
    });
    assert_eq!(
        carol_page.text(&format!("article[data-call-id=\"{own}\"] .refusal")),
        Some(refusal.clone())
    );
    let cli_refusal = cli(
        &nodes[0].grpc,
        &carol,
        &["approvals", "approve", &own, "--reason", "mine", "--yes"],
    );
    assert_eq!(cli_refusal.status.code(), Some(3), "a refusal exits 3");
    let cli_said = String::from_utf8_lossy(&cli_refusal.stderr).into_owned();
    let (code, words) = refusal.split_once(": ").expect("CODE: message");
    assert!(words.contains("part of call"), "{refusal}");
    assert!(
        cli_said.contains(words),
        "gRPC said {cli_said:?}, the page {refusal:?}"
    );
    assert_eq!(code, "PERMISSION_DENIED", "{refusal}");
    assert_eq!(
        carol_page.run("return document.title;", json!([])),
        json!("Gatehouse approvals")
    );
    screenshot(&carol_page, "console-refusal.png");

    // The API without a token, with one that reviews nothing here, and with an approver's.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = |key: Option<&str>, path: &str, body: Option<Value>| {
        runtime.block_on(async {
            let url = format!("http://{}/api/v1/{path}", nodes[1].http);
            let http = reqwest::Client::new();
            let mut request = match &body {
                Some(body) => http.post(url).json(body),
                None => http.get(url),
            };
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        })
    };
    let list = "tenants/acme/calls";
    let (status, body) = api(None, list, None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("UNAUTHENTICATED"))
    );
    let (status, body) = api(Some(&agent), list, None);
    assert_eq!(status, 403, "{body}");
    let (status, body) = api(Some(&bob), list, None);
    assert_eq!(status, 200, "{body}");
    let listed = body["calls"].as_array().unwrap();
    assert!(listed.iter().any(|c| c["call_id"] == own), "{body}");
    let hash = listed.iter().find(|c| c["call_id"] == own).unwrap()["args_sha256"].clone();

    // The agent cannot approve over HTTP either; a body with a field the API does not take is
    // refused, not half-read; an approval naming other arguments is refused; none of it moved
    // the call.
    let approve = format!("calls/{own}/approve");
    let (status, body) = api(
        Some(&agent),
        &approve,
        Some(json!({"args_sha256": hash, "reason": "me"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("PERMISSION_DENIED"))
    );
    let (status, body) = api(
        Some(&bob),
        &approve,
        Some(json!({"args_sha256": hash, "reason": "ok", "approver": "alice"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    let (status, body) = api(
        Some(&bob),
        &approve,
        Some(json!({"args_sha256": "00".repeat(32), "reason": "ok"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("FAILED_PRECONDITION")),
        "{body}"
    );
    let (_, record) = api(Some(&bob), &format!("calls/{own}"), None);
    assert_eq!(record["call"]["state"], "pending", "{record}");
    assert_eq!(record["call"]["approvals"], json!([]), "{record}");
}
