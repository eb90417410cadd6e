//! Fuzzes a running node's HTTP fronts end to end, as an authenticated agent: `/mcp` and the
//! A2A JSON-RPC binding (`/a2a`) with random bytes, random JSON and assembled JSON-RPC messages
//! (odd ids, known and unknown methods, dropped members, tool calls and `SendMessage` tasks with
//! random, deeply nested arguments). The gRPC binding has `fuzz_a2a_grpc.rs`.
//!
//! Properties: every request is answered, without a 5xx or a hang; `/mcp` answers bytes that are
//! not JSON with HTTP 400 and JSON-RPC -32700, and JSON that is not an object with 400 and
//! -32600; `/a2a` always answers one JSON-RPC 2.0 response (HTTP 200, a result or an error):
//! -32700 or -32600 for bytes that are not JSON, -32600 for JSON that is not a request, -32601
//! for an unknown method, and none of those for a request of a known method.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_testkit::fuzz;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::TestCluster;
use gatehouse_tests::mcp_wire::RawMcp;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};
use std::time::Duration;

const KEY: &str = "gate_fuzz-agent-000000000000000000000000";
/// Longer than any answer of a healthy node: a request still unanswered then hangs.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(fuzz::config(default_cases))
}

fn any_json() -> impl Strategy<Value = Value> + Clone {
    fuzz::json("\\PC{0,12}", "\\PC{0,6}")
}

/// Random JSON wrapped in up to 125 levels of objects and arrays (what a JSON-RPC body may hold).
fn nested() -> impl Strategy<Value = Value> {
    (any_json(), 0usize..62).prop_map(|(mut v, depth)| {
        for _ in 0..depth {
            v = json!([{"a": v}]);
        }
        v
    })
}

/// A body: random bytes, random JSON, or a JSON-RPC message of `methods` with random parts.
fn body(methods: &[&'static str], params: BoxedStrategy<Value>) -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        Just(json!(1)),
        Just(json!("x")),
        Just(json!(u64::MAX)),
        Just(json!(0.5)),
        any_json()
    ];
    let method = prop_oneof![
        prop::sample::select(methods.to_vec()).prop_map(Value::from),
        any_json()
    ];
    let gone = prop::collection::vec(prop::bool::weighted(0.15), 3);
    let message = (id, method, params, gone).prop_map(|(id, method, params, gone)| {
        let mut m = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        for (key, _) in ["id", "params", "jsonrpc"]
            .iter()
            .zip(&gone)
            .filter(|(_, g)| **g)
        {
            m.as_object_mut().map(|o| o.remove(*key));
        }
        m.to_string().into_bytes()
    });
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => any_json().prop_map(|v| v.to_string().into_bytes()),
        4 => message,
    ]
}

fn start() -> TestCluster {
    let cluster = TestCluster::new(&[1]).expect("a one-node cluster");
    let resources = vec![
        resource("Tenant", "acme", None, json!({})),
        principal("fuzz-agent", KEY, json!({"acme": ["agent"]}), Some("dana")),
    ];
    let index = cluster
        .block_on(cluster.admin(1).apply(resources))
        .expect("applied");
    cluster
        .wait_for_applied(1, index, ANSWER_WITHIN)
        .expect("caught up");
    cluster
}

/// What `request` resolves to, on the harness's runtime, unless it hangs.
fn answered<T>(
    cluster: &TestCluster,
    request: impl Future<Output = T>,
) -> Result<T, TestCaseError> {
    cluster
        .block_on(async { tokio::time::timeout(ANSWER_WITHIN, request).await })
        .map_err(|_| TestCaseError::fail("no answer in time"))
}

fn check_mcp(cluster: &TestCluster, mcp: &RawMcp, bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let sent = serde_json::from_slice::<Value>(&bytes).ok();
    let answer = answered(cluster, mcp.post("tools/call", None, bytes, true))?
        .map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
    prop_assert!(
        answer.status < 500,
        "HTTP {}: {}",
        answer.status,
        answer.text
    );
    match sent {
        None => prop_assert_eq!((answer.status, answer.error_code()), (400, Some(-32700))),
        Some(v) if !v.is_object() => {
            prop_assert_eq!((answer.status, answer.error_code()), (400, Some(-32600)))
        }
        Some(_) => {}
    }
    Ok(())
}

/// Posts `bytes` to `/a2a` as the agent: the HTTP status and the JSON answer.
fn post_a2a(
    cluster: &TestCluster,
    http: &reqwest::Client,
    bytes: Vec<u8>,
) -> Result<(u16, Value), TestCaseError> {
    let url = format!("http://{}/a2a", cluster.node(1).http_addr);
    let request = http
        .post(url)
        .bearer_auth(KEY)
        .header("A2A-Version", "1.0")
        .body(bytes)
        .send();
    answered(cluster, async {
        let response = request.await?;
        Ok::<_, reqwest::Error>((response.status().as_u16(), response.json::<Value>().await?))
    })?
    .map_err(|e| TestCaseError::fail(e.to_string()))
}

fn check_a2a(
    cluster: &TestCluster,
    http: &reqwest::Client,
    bytes: Vec<u8>,
) -> Result<(), TestCaseError> {
    let sent = serde_json::from_slice::<Value>(&bytes).ok();
    let (status, answer) = post_a2a(cluster, http, bytes)?;
    prop_assert_eq!(status, 200, "{}", answer);
    prop_assert_eq!(&answer["jsonrpc"], "2.0");
    prop_assert!(
        answer.get("result").is_some() != answer.get("error").is_some(),
        "{}",
        answer
    );
    let code = answer["error"]["code"].as_i64();
    let method = sent
        .as_ref()
        .and_then(|v| v.get("method"))
        .and_then(Value::as_str);
    let is_request = sent.as_ref().is_some_and(|v| {
        v["jsonrpc"] == "2.0"
            && method.is_some_and(|m| !m.is_empty())
            && v.get("id")
                .is_some_and(|id| id.is_null() || id.is_string() || id.is_i64())
    });
    match &sent {
        // a2a-server reads the request as it parses it: a member of the wrong type ends the
        // reading (-32600) before a syntax error (or too deep a nesting) further on is seen.
        None => prop_assert!(matches!(code, Some(-32700 | -32600)), "{}", answer),
        Some(_) if !is_request => prop_assert_eq!(code, Some(-32600), "{}", answer),
        Some(_) if !a2a_methods().contains(&method.unwrap_or_default()) => {
            prop_assert_eq!(code, Some(-32601))
        }
        Some(_) => prop_assert!(
            !matches!(code, Some(-32700 | -32600 | -32601)),
            "{}",
            answer
        ),
    }
    Ok(())
}

fn a2a_methods() -> Vec<&'static str> {
    vec![
        "SendMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "GetExtendedAgentCard",
    ]
}

/// `SendMessage`'s params as the JSON binding takes them: one data part naming a tool.
fn send_params() -> impl Strategy<Value = Value> {
    let tool = prop_oneof![Just("demo.echo".to_owned()), "\\PC{0,12}"];
    (tool, nested(), "\\PC{1,12}").prop_map(|(tool, arguments, id)| {
        json!({"message": {"messageId": id, "role": "ROLE_USER",
            "parts": [{"data": {"tool": tool, "arguments": arguments}}]}})
    })
}

#[test]
fn the_http_fronts_answer_whatever_an_agent_sends() {
    let cluster = start();
    let mcp = RawMcp::new(
        &format!("http://{}/mcp", cluster.node(1).http_addr),
        Some(KEY),
    );
    // The agent gets through to both fronts: what follows is not refused at the door.
    let listed = cluster.block_on(mcp.list_tools()).expect("tools/list");
    assert!(listed.result().is_ok(), "{}", listed.text);
    let card = json!({"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}});
    let (_, card) = post_a2a(
        &cluster,
        &reqwest::Client::new(),
        card.to_string().into_bytes(),
    )
    .expect("an answer");
    assert!(card.get("result").is_some(), "{card}");
    let call = ("\\PC{0,12}", nested())
        .prop_map(|(name, arguments)| json!({"name": name, "arguments": arguments}));
    let mcp_params = prop_oneof![call, any_json()].boxed();
    let mcp_methods = [
        "tools/call",
        "tools/list",
        "ping",
        "initialize",
        "prompts/get",
        "no/such",
    ];
    runner(48)
        .run(&body(&mcp_methods, mcp_params), |bytes| {
            check_mcp(&cluster, &mcp, bytes)
        })
        .unwrap_or_else(|e| panic!("/mcp: {e}"));

    let http = reqwest::Client::new();
    let a2a_params = prop_oneof![send_params(), any_json()].boxed();
    let mut methods = a2a_methods();
    methods.extend(["", "message/send", "tasks/get"]);
    runner(48)
        .run(&body(&methods, a2a_params), |bytes| {
            check_a2a(&cluster, &http, bytes)
        })
        .unwrap_or_else(|e| panic!("/a2a: {e}"));
}
