//! The MCP front over real HTTP with built-in upstreams: one node, rmcp's own client for
//! what MCP clients do, raw JSON-RPC over reqwest for what a broken client does, and approvals
//! over gRPC as an approver would give them.
//!
//! Tenant `acme`: the agent `bot`, the approver `alice`; built-in upstreams `demo` (`demo.echo`,
//! read-only), `bank` (`bank.echo`, destructive, `amount` an integer) and `vault`
//! (`vault.echo`, denied by policy). Tenant `globex`: the agent `gina` and `other.echo`.

use gatehouse_cluster::grants::BuiltinTool;
use gatehouse_cluster::grants::Grants;
use gatehouse_fronts::mcp::McpSettings;
use gatehouse_node::server::NodeHandle;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::{bearer, jsonrpc_message, principal, resource};
use gatehouse_tests::{NodeOptions, one_node};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, JsonObject, ProtocolVersion, ReadResourceRequestParams,
    ResourceContents, TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const BOT: &str = "gate_bot-key-000000000000000000000000";
const ALICE: &str = "gate_alice-key-00000000000000000000000";
const GINA: &str = "gate_gina-key-000000000000000000000000";
const MAX_BODY: usize = 64 * 1024;
const DEADLINE: Duration = Duration::from_secs(20);

/// rmcp's HTTP client transport with a bearer key (a macro: its client type is rmcp's own
/// reqwest, not this crate's).
macro_rules! transport {
    ($url:expr, $key:expr) => {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri($url.to_owned())
                .auth_header($key.to_owned()),
        )
    };
}

struct Fixture {
    node: NodeHandle,
    dir: tempfile::TempDir,
}

impl Fixture {
    async fn start() -> Fixture {
        let (node, dir) = one_node(NodeOptions {
            mcp: McpSettings {
                max_body_bytes: MAX_BODY,
                ..McpSettings::default()
            },
            grants: Grants::default()
                .with_builtins("acme", BuiltinTool::ALL)
                .with_builtins("globex", [BuiltinTool::Echo]),
            ..NodeOptions::default()
        })
        .await
        .unwrap();
        let fixture = Fixture { node, dir };
        fixture.apply(resources()).await;
        fixture.wait_placed().await;
        fixture
    }

    fn audit_dir(&self) -> std::path::PathBuf {
        gatehouse_cluster::node_files::NodeFiles::new(&self.dir.path().join("node-1"))
            .unwrap()
            .audit_dir()
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.node.http_addr)
    }

    async fn apply(&self, resources: Vec<pb::Resource>) {
        let key = self.node.admin_key.clone().unwrap();
        let mut client = RegistryServiceClient::connect(format!("http://{}", self.node.grpc_addr))
            .await
            .unwrap();
        client
            .apply(bearer(pb::ApplyRequest { resources }, &key))
            .await
            .unwrap();
    }

    /// Until both tenants have a home: approved calls are run by their tenant's home.
    async fn wait_placed(&self) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let placed = {
                let registry = self.node.cluster.registry.read();
                ["acme", "globex"]
                    .iter()
                    .all(|t| registry.placement(t).is_some())
            };
            if placed {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "tenants not placed");
            let mut applied = self.node.cluster.applied.clone();
            let _ = tokio::time::timeout(Duration::from_millis(200), applied.changed()).await;
        }
    }

    async fn client(&self, key: &str) -> RunningService<RoleClient, ClientConfig> {
        let transport = transport!(self.url(), key);
        ClientConfig::default().serve(transport).await.unwrap()
    }

    async fn approvals(&self) -> ApprovalServiceClient<tonic::transport::Channel> {
        ApprovalServiceClient::connect(format!("http://{}", self.node.grpc_addr))
            .await
            .unwrap()
    }

    async fn approve(&self, call_id: &str) {
        let mut approvals = self.approvals().await;
        let record = approvals
            .get(bearer(
                pb::GetCallRecordRequest {
                    call_id: call_id.into(),
                },
                ALICE,
            ))
            .await
            .unwrap()
            .into_inner()
            .call
            .unwrap();
        approvals
            .approve(bearer(
                pb::ApproveCallRequest {
                    call_id: call_id.into(),
                    args_sha256: record.args_sha256,
                    reason: "looks right".into(),
                },
                ALICE,
            ))
            .await
            .unwrap();
    }

    async fn reject(&self, call_id: &str, reason: &str) {
        self.approvals()
            .await
            .reject(bearer(
                pb::RejectCallRequest {
                    call_id: call_id.into(),
                    reason: reason.into(),
                },
                ALICE,
            ))
            .await
            .unwrap();
    }
}

fn resources() -> Vec<pb::Resource> {
    let acme = Some("acme");
    vec![
        resource("Tenant", "acme", None, json!({})),
        resource("Tenant", "globex", None, json!({})),
        principal("bot", BOT, json!({"acme": ["agent"]}), Some("bot-user")),
        principal(
            "alice",
            ALICE,
            json!({"acme": ["approver"]}),
            Some("alice-user"),
        ),
        principal(
            "gina",
            GINA,
            json!({"globex": ["agent"]}),
            Some("gina-user"),
        ),
        resource("Upstream", "demo", acme, json!({"type": "builtin"})),
        resource("Upstream", "bank", acme, json!({"type": "builtin"})),
        resource("Upstream", "vault", acme, json!({"type": "builtin"})),
        resource(
            "Tool",
            "demo.echo",
            acme,
            json!({
                "description": "Answers with its arguments.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                "approvalMode": "read_only",
            }),
        ),
        resource(
            "Tool",
            "bank.echo",
            acme,
            json!({
                "description": "Moves money (answers with its arguments).",
                "inputSchema": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
                "approvalMode": "destructive",
            }),
        ),
        resource(
            "Tool",
            "vault.echo",
            acme,
            json!({"inputSchema": {"type": "object"}, "approvalMode": "read_only"}),
        ),
        resource("Policy", "no-vault", acme, json!({"deny": ["vault.*"]})),
        resource(
            "Upstream",
            "other",
            Some("globex"),
            json!({"type": "builtin"}),
        ),
        resource(
            "Tool",
            "other.echo",
            Some("globex"),
            json!({"inputSchema": {"type": "object"}, "approvalMode": "read_only"}),
        ),
    ]
}

fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(o) => o,
        _ => panic!("arguments are an object"),
    }
}

fn call(name: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments))
}

/// `structuredContent.error` of an error result.
fn error_of(result: &CallToolResult) -> &Value {
    assert_eq!(result.is_error, Some(true), "an error result: {result:?}");
    &result
        .structured_content
        .as_ref()
        .expect("structured content")["error"]
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn meta_of<'a>(result: &'a CallToolResult, key: &str) -> Option<&'a Value> {
    result.meta.as_ref().and_then(|m| m.get(key))
}

async fn names(client: &RunningService<RoleClient, ClientConfig>) -> Vec<String> {
    client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}

/// Polls `gatehouse.call_status` until the call is final.
async fn settle(
    client: &RunningService<RoleClient, ClientConfig>,
    call_id: &str,
) -> CallToolResult {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let status = client
            .call_tool(call(
                "gatehouse.call_status",
                json!({"call_id": call_id, "wait_ms": 2000}),
            ))
            .await
            .unwrap();
        let state = status
            .structured_content
            .as_ref()
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str);
        if !matches!(state, Some("pending" | "approved" | "executing")) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "call {call_id} never settled"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_shows_exactly_the_tenants_tools_and_the_gateways_own() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    assert_eq!(
        names(&bot).await,
        [
            "bank.echo",
            "demo.echo",
            "gatehouse.call_status",
            "gatehouse.load_toolset"
        ],
        "vault.echo is denied by policy; globex's tool is not acme's"
    );
    let gina = fixture.client(GINA).await;
    assert_eq!(
        names(&gina).await,
        [
            "gatehouse.call_status",
            "gatehouse.load_toolset",
            "other.echo"
        ]
    );
    bot.cancel().await.unwrap();
    gina.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_call_answers_with_the_upstreams_result_and_its_envelope() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    let result = bot
        .call_tool(call("demo.echo", json!({"text": "hello"})))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(result.structured_content.as_ref().unwrap()["text"], "hello");
    assert_eq!(text_of(&result), "hello");
    let call_id = meta_of(&result, "dev.gatehouse/call-id")
        .and_then(Value::as_str)
        .expect("a call id");
    assert!(call_id.starts_with("call_"), "{call_id}");
    assert_eq!(
        meta_of(&result, "dev.gatehouse/effective-mode"),
        Some(&json!("read_only"))
    );
    assert_eq!(
        meta_of(&result, "dev.gatehouse/trace-id"),
        Some(&json!(call_id.trim_start_matches("call_")))
    );
    assert!(meta_of(&result, "dev.gatehouse/policy-decision-id").is_some());
    bot.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_call_is_pending_until_approved_then_call_status_gives_its_result() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    let pending = bot
        .call_tool(call("bank.echo", json!({"amount": 5})))
        .await
        .unwrap();
    let error = error_of(&pending);
    assert_eq!(error["code"], "approval_pending");
    assert_eq!(error["retryable"], true);
    assert!(error["expires_at"].is_string(), "{error}");
    let call_id = error["call_id"].as_str().unwrap().to_owned();
    assert_eq!(
        meta_of(&pending, "dev.gatehouse/call-id"),
        Some(&json!(call_id)),
        "the envelope is on error results too"
    );
    assert_eq!(
        meta_of(&pending, "dev.gatehouse/effective-mode"),
        Some(&json!("destructive"))
    );

    let status = bot
        .call_tool(call("gatehouse.call_status", json!({"call_id": call_id})))
        .await
        .unwrap();
    assert_eq!(status.is_error, Some(false));
    assert_eq!(
        status.structured_content.as_ref().unwrap()["state"],
        "pending"
    );

    // Another tenant's agent sees neither the tool nor the call.
    let gina = fixture.client(GINA).await;
    let theirs = gina
        .call_tool(call("gatehouse.call_status", json!({"call_id": call_id})))
        .await
        .unwrap();
    assert_eq!(error_of(&theirs)["code"], "not_found");
    let foreign = gina
        .call_tool(call("bank.echo", json!({"amount": 5})))
        .await
        .unwrap();
    assert_eq!(error_of(&foreign)["code"], "unknown_tool");

    fixture.approve(&call_id).await;
    let done = settle(&bot, &call_id).await;
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(done.structured_content, Some(json!({"amount": 5})));
    assert_eq!(
        meta_of(&done, "dev.gatehouse/call-id"),
        Some(&json!(call_id))
    );

    // The call's envelope as a resource, for its own agent only.
    let uri = format!("gatehouse://calls/{call_id}");
    let read = bot
        .read_resource(ReadResourceRequestParams::new(uri.clone()))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("text contents");
    };
    let envelope: Value = serde_json::from_str(text).unwrap();
    assert_eq!(envelope["state"], "succeeded");
    assert_eq!(envelope["tool"], "bank.echo");
    assert!(
        gina.read_resource(ReadResourceRequestParams::new(uri))
            .await
            .is_err()
    );
    bot.cancel().await.unwrap();
    gina.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_call_ends_as_an_error_result_that_says_so() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    let pending = bot
        .call_tool(call("bank.echo", json!({"amount": 900})))
        .await
        .unwrap();
    let call_id = error_of(&pending)["call_id"].as_str().unwrap().to_owned();
    fixture.reject(&call_id, "too much").await;
    let ended = settle(&bot, &call_id).await;
    let error = error_of(&ended);
    assert_eq!(error["code"], "rejected");
    assert_eq!(error["retryable"], false);
    assert!(
        text_of(&ended).contains("rejected by alice: too much"),
        "{}",
        text_of(&ended)
    );
    bot.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_declaring_client_gets_a_task_that_completes_after_approval() {
    let fixture = Fixture::start().await;
    let config = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("tasks-client", "1.0"),
    );
    let client = config.serve(transport!(fixture.url(), BOT)).await.unwrap();
    let response = client
        .call_tool_once(call("bank.echo", json!({"amount": 7})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("a task, got {response:?}");
    };
    let task_id = created.task.task_id.clone();
    assert_eq!(created.task.status, TaskStatus::Working);
    let working = client
        .get_task(GetTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    assert_eq!(working.task.status(), TaskStatus::Working);

    fixture.approve(&task_id).await;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let done = loop {
        let task = client
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap()
            .task;
        if task.status().is_terminal() {
            break task;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never ended"
        );
        let mut applied = fixture.node.cluster.applied.clone();
        let _ = tokio::time::timeout(Duration::from_millis(200), applied.changed()).await;
    };
    let TaskPayload::Completed { result } = done.payload else {
        panic!("completed, got {:?}", done.payload);
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(result.structured_content, Some(json!({"amount": 7})));
    client.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_structured_error_results() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    let unknown = bot.call_tool(call("demo.nope", json!({}))).await.unwrap();
    let error = error_of(&unknown);
    assert_eq!(error["code"], "unknown_tool");
    assert!(error["hint"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(text_of(&unknown).starts_with("unknown_tool: "));
    assert!(meta_of(&unknown, "dev.gatehouse/trace-id").is_some());

    let bad = bot
        .call_tool(call("bank.echo", json!({"amount": "lots"})))
        .await
        .unwrap();
    assert_eq!(error_of(&bad)["code"], "invalid_arguments");
    assert_eq!(error_of(&bad)["retryable"], false);

    let denied = bot.call_tool(call("vault.echo", json!({}))).await.unwrap();
    assert_eq!(error_of(&denied)["code"], "denied_by_policy");
    bot.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

/// Posts one JSON-RPC body with MCP's headers; `session` names an open session.
async fn post(
    url: &str,
    key: Option<&str>,
    session: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    request.send().await.unwrap()
}

/// The JSON-RPC message of a response, whether sent as JSON or as an event stream.
async fn message(response: reqwest::Response) -> Value {
    jsonrpc_message(&response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_get_the_http_status_and_json_rpc_codes_of_the_spec() {
    let fixture = Fixture::start().await;
    let url = fixture.url();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

    let missing = post(&url, None, None, ping).await;
    assert_eq!(missing.status(), 401);
    assert!(
        missing.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let wrong = post(&url, Some("gate_wrong"), None, ping).await;
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().contains_key("www-authenticate"));

    let malformed = post(&url, Some(BOT), None, "{\"jsonrpc\": \"2.0\", ").await;
    assert_eq!(malformed.status(), 400);
    assert_eq!(message(malformed).await["error"]["code"], -32700);

    let not_jsonrpc = post(&url, Some(BOT), None, r#"{"hello": "world"}"#).await;
    assert_eq!(message(not_jsonrpc).await["error"]["code"], -32600);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(MAX_BODY)
    );
    assert_eq!(post(&url, Some(BOT), None, big).await.status(), 413);

    // A session, then a method MCP does not have.
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    });
    let opened = post(&url, Some(BOT), None, init.to_string()).await;
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = message(opened).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let accepted = post(&url, Some(BOT), Some(&session), initialized.to_string()).await;
    assert!(accepted.status().is_success());
    let unknown = json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method"});
    let answer = message(post(&url, Some(BOT), Some(&session), unknown.to_string()).await).await;
    assert_eq!(answer["error"]["code"], -32601);
    let bad_params =
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": 7}});
    let answer = post(&url, Some(BOT), Some(&session), bad_params.to_string()).await;
    assert_eq!(message(answer).await["error"]["code"], -32602);

    // A browser page from elsewhere is refused.
    let cross = reqwest::Client::new()
        .post(&url)
        .bearer_auth(BOT)
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(ping)
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_2026_client_lists_and_calls() {
    let fixture = Fixture::start().await;
    let client = ClientConfig::default()
        .serve_with_lifecycle(
            transport!(fixture.url(), BOT),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert!(names(&client).await.contains(&"demo.echo".to_owned()));
    let result = client
        .call_tool(call("demo.echo", json!({"text": "stateless"})))
        .await
        .unwrap();
    assert_eq!(
        result.structured_content.as_ref().unwrap()["text"],
        "stateless"
    );
    assert!(meta_of(&result, "dev.gatehouse/call-id").is_some());
    client.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operating_guide_explains_approvals_and_call_status() {
    let fixture = Fixture::start().await;
    let bot = fixture.client(BOT).await;
    let prompts = bot.list_all_prompts().await.unwrap();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "operating_guide");
    let guide = bot
        .get_prompt(rmcp::model::GetPromptRequestParams::new("operating_guide"))
        .await
        .unwrap();
    let text = serde_json::to_string(&guide.messages).unwrap();
    for needle in [
        "approval_pending",
        "gatehouse.call_status",
        "gatehouse.load_toolset",
        "dev.gatehouse/idempotency-key",
        "retryable",
    ] {
        assert!(text.contains(needle), "the guide mentions {needle}");
    }
    assert!(
        bot.get_prompt(rmcp::model::GetPromptRequestParams::new("nope"))
            .await
            .is_err()
    );
    bot.read_resource(ReadResourceRequestParams::new("gatehouse://guide"))
        .await
        .unwrap();
    bot.cancel().await.unwrap();

    // Each get and read is a context pull in the audit log; the listing is not.
    fixture.node.audit.flush().await.unwrap();
    let records = gatehouse_audit::tail(&fixture.audit_dir(), 100).unwrap();
    let pulls: Vec<(String, String, String)> = records
        .iter()
        .filter(|r| {
            matches!(
                r.entry.kind,
                gatehouse_audit::Kind::PromptGet | gatehouse_audit::Kind::ResourceRead
            )
        })
        .map(|r| {
            (
                r.entry.target.clone().unwrap_or_default(),
                r.entry.outcome.clone(),
                r.entry.chain.join(","),
            )
        })
        .collect();
    assert_eq!(
        pulls,
        [
            (
                "operating_guide".into(),
                "succeeded".into(),
                "user:bot-user,agent:bot".into()
            ),
            (
                "nope".into(),
                "refused:not_found".into(),
                "user:bot-user,agent:bot".into()
            ),
            (
                "gatehouse://guide".into(),
                "succeeded".into(),
                "user:bot-user,agent:bot".into()
            ),
        ]
    );
    fixture.node.shutdown().await;
}

/// A client that counts `notifications/tools/list_changed`.
#[derive(Debug, Clone, Default)]
struct ListWatcher(Arc<tokio::sync::Notify>);

impl rmcp::ClientHandler for ListWatcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loading_a_toolset_widens_the_list_and_tells_the_session() {
    let fixture = Fixture::start().await;
    fixture
        .apply(vec![resource(
            "Policy",
            "lean",
            Some("acme"),
            json!({"defaultToolsets": [{"name": "demo"}]}),
        )])
        .await;
    let watcher = ListWatcher::default();
    let client = watcher
        .clone()
        .serve(transport!(fixture.url(), BOT))
        .await
        .unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let listed: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        listed,
        [
            "demo.echo",
            "gatehouse.call_status",
            "gatehouse.load_toolset"
        ]
    );
    let load = tools
        .iter()
        .find(|t| t.name == "gatehouse.load_toolset")
        .unwrap();
    assert!(
        load.description
            .as_deref()
            .is_some_and(|d| d.contains("bank (0 read, 1 write)")),
        "{:?}",
        load.description
    );

    let loaded = client
        .call_tool(call(
            "gatehouse.load_toolset",
            json!({"toolset": "bank", "include_write_tools": true}),
        ))
        .await
        .unwrap();
    assert_eq!(loaded.is_error, Some(false), "{loaded:?}");
    tokio::time::timeout(DEADLINE, watcher.0.notified())
        .await
        .expect("notifications/tools/list_changed");
    assert!(names_of(&client).await.contains(&"bank.echo".to_owned()));

    // Kept for the principal, not the session: a stateless client sees it too.
    let stateless = ClientConfig::default()
        .serve_with_lifecycle(
            transport!(fixture.url(), BOT),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    assert!(names(&stateless).await.contains(&"bank.echo".to_owned()));

    let unknown = client
        .call_tool(call("gatehouse.load_toolset", json!({"toolset": "nope"})))
        .await
        .unwrap();
    assert_eq!(error_of(&unknown)["code"], "not_found");
    client.cancel().await.unwrap();
    stateless.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

async fn names_of(client: &RunningService<RoleClient, ListWatcher>) -> Vec<String> {
    client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.into_owned())
        .collect()
}

/// A client's own idempotency key in `_meta`: the repeat answers with the recorded call and its
/// result, and the tool ran once (the built-in transfer logs every execution in its ledger,
/// outside the registry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_idempotency_key_answers_with_the_recorded_call_and_runs_once() {
    let fixture = Fixture::start().await;
    let acme = Some("acme");
    fixture
        .apply(vec![
            resource("Upstream", "ledger", acme, json!({"type": "builtin"})),
            resource(
                "Tool",
                "ledger.transfer",
                acme,
                json!({"inputSchema": {"type": "object"}, "approvalMode": "read_only"}),
            ),
        ])
        .await;
    let bot = fixture.client(BOT).await;
    let keyed = |amount: i64| {
        let mut params = call(
            "ledger.transfer",
            json!({"from": "alice", "to": "bob", "amount": amount}),
        );
        let mut meta = JsonObject::new();
        meta.insert(
            "dev.gatehouse/idempotency-key".to_owned(),
            json!("order-42"),
        );
        params.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(
            meta,
        )));
        params
    };
    let first = bot.call_tool(keyed(10)).await.unwrap();
    let again = bot.call_tool(keyed(10)).await.unwrap();
    let id = |r: &CallToolResult| meta_of(r, "dev.gatehouse/call-id").cloned();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    assert_eq!(id(&first), id(&again), "the repeat names the recorded call");
    assert_eq!(text_of(&again), text_of(&first), "and answers its result");
    // The same key with other arguments is a conflict, not a second call.
    let other = bot.call_tool(keyed(11)).await.unwrap();
    assert_eq!(error_of(&other)["code"], "conflict");

    let ledger = fixture
        .dir
        .path()
        .join("node-1/builtin/acme/demo-ledger.json");
    let ledger: Value = serde_json::from_slice(&std::fs::read(ledger).unwrap()).unwrap();
    assert_eq!(ledger["transfers"].as_array().unwrap().len(), 1, "{ledger}");
    assert_eq!(ledger["balances"]["alice"], 990);
    bot.cancel().await.unwrap();
    fixture.node.shutdown().await;
}

/// A tenant's budget for a tool: the call past it is refused with `rate_limited`, a retry-after
/// in milliseconds, and nothing run; other tools are not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_is_refused_with_a_retry_after_hint() {
    let fixture = Fixture::start().await;
    fixture
        .apply(vec![resource(
            "Policy",
            "budget",
            Some("acme"),
            json!({"budgets": [{"tools": "demo.*", "calls": 2, "perSeconds": 3600}]}),
        )])
        .await;
    let bot = fixture.client(BOT).await;
    for _ in 0..2 {
        let ok = bot
            .call_tool(call("demo.echo", json!({"text": "x"})))
            .await
            .unwrap();
        assert_eq!(ok.is_error, Some(false), "{ok:?}");
    }
    let refused = bot
        .call_tool(call("demo.echo", json!({"text": "x"})))
        .await
        .unwrap();
    let error = error_of(&refused);
    assert_eq!(error["code"], "rate_limited");
    assert_eq!(error["retryable"], true);
    // 2 calls per hour: a token comes back every 1,800 s.
    let after = error["retry_after_ms"].as_u64().expect("a retry-after");
    assert!(after > 1_700_000 && after <= 1_800_000, "{after}");
    let other = bot
        .call_tool(call("bank.echo", json!({"amount": 1})))
        .await
        .unwrap();
    assert_ne!(
        other
            .structured_content
            .as_ref()
            .and_then(|s| s.get("error"))
            .map(|e| e["code"].clone()),
        Some(json!("rate_limited"))
    );
    bot.cancel().await.unwrap();
    fixture.node.shutdown().await;
}
