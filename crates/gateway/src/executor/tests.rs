use super::*;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use gatehouse_registry::call::CallId;
use gatehouse_registry::{Command, Proposal};
use serde_json::json;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

pub(super) fn registry(yaml: &str) -> SharedRegistry {
    let text = format!(
        "apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: acme}}\nspec: {{}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: globex}}\nspec: {{}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: dev, tenant: acme}}\n\
         spec: {{type: builtin}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: docs}}\n\
         spec: {{type: mcp, url: 'http://127.0.0.1:9/mcp'}}\n{yaml}"
    );
    SharedRegistry::new(gatehouse_testkit::yaml::registry(&text))
}

/// acme's grants: every built-in tool, and the credentials the tests name.
pub(super) fn grants() -> Arc<Grants> {
    Arc::new(
        Grants::default()
            .with_builtins("acme", BuiltinTool::ALL)
            .with_credential("svc", CredentialSource::Env("SVC_TOKEN".into()), &["acme"])
            .with_credential("kb", CredentialSource::Env("KB_TOKEN".into()), &["acme"])
            .with_credential(
                "unset",
                CredentialSource::Env("NOT_SET_ANYWHERE".into()),
                &["acme"],
            ),
    )
}

/// An executor over `registry` with acme's grants.
pub(super) fn node_executor(registry: SharedRegistry) -> NodeExecutor {
    NodeExecutor::new(registry, grants())
}

pub(super) fn execution(tenant: &str, tool: &str, arguments: Value) -> Execution {
    Execution {
        call_id: CallId::from_random(7),
        claim_id: None,
        tenant: tenant.into(),
        tool: tool.into(),
        arguments: arguments.to_string(),
        idempotency_key: CallId::from_random(7).to_string(),
        skill_context: None,
        end_user: Some("john".into()),
        retry_safe: false,
        trace_parent: None,
    }
}

pub(super) fn result(out: &ToolOutput) -> Value {
    serde_json::from_str(&out.result_json).expect("a CallToolResult is JSON")
}

#[tokio::test]
async fn echo_answers_with_the_arguments_as_text_and_structured_content() {
    let executor = node_executor(registry(""));
    let out = executor
        .execute(execution("acme", "dev.echo", json!({"a": 1})))
        .await
        .unwrap();
    assert!(!out.is_error);
    assert_eq!(
        result(&out),
        json!({"content": [{"type": "text", "text": "{\"a\":1}"}], "isError": false,
               "structuredContent": {"a": 1}})
    );
}

#[tokio::test]
async fn sleep_answers_after_the_time_asked_for() {
    let executor = node_executor(registry(""));
    let started = std::time::Instant::now();
    let out = executor
        .execute(execution("acme", "dev.sleep", json!({"ms": 50})))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(result(&out)["structuredContent"], json!({"slept_ms": 50}));
    let bad = executor
        .execute(execution("acme", "dev.sleep", json!({"ms": "soon"})))
        .await
        .unwrap();
    assert!(bad.is_error);
}

#[tokio::test]
async fn fail_answers_an_error_result_and_unknown_builtins_do_not_run() {
    let executor = node_executor(registry(""));
    let out = executor
        .execute(execution("acme", "dev.fail", json!({})))
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(result(&out)["isError"], json!(true));
    let err = executor
        .execute(execution("acme", "dev.nope", json!({})))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("built-in tool nope is not enabled for tenant acme"),
        "{err}"
    );
}

#[tokio::test]
async fn an_upstream_of_another_tenant_is_not_found_and_an_unreachable_mcp_upstream_is_an_error() {
    let executor = node_executor(registry(""));
    let err = executor
        .execute(execution("globex", "dev.echo", json!({})))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("not declared for tenant globex"),
        "{err}"
    );
    let err = executor
        .execute(execution("acme", "docs.search", json!({})))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("connecting to the mcp upstream http://127.0.0.1:9/mcp"),
        "{err}"
    );
}

/// What the fake upstream saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: String,
}

type Log = Arc<Mutex<Vec<Seen>>>;

async fn answer(
    State(log): State<Log>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, String) {
    log.lock().unwrap().push(Seen {
        path: path.clone(),
        headers,
        body,
    });
    match path.as_str() {
        "ok" => (StatusCode::OK, r#"{"ok":true,"n":3}"#.into()),
        "text" => (StatusCode::OK, "plain words".into()),
        "boom" => (StatusCode::UNPROCESSABLE_ENTITY, "bad amount".into()),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            (StatusCode::OK, "{}".into())
        }
        _ => (StatusCode::NOT_FOUND, String::new()),
    }
}

async fn fake_upstream() -> (SocketAddr, Log) {
    let log = Log::default();
    let app = Router::new()
        .route("/api/{*path}", post(answer))
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, log)
}

fn http_upstream(addr: SocketAddr, extra: &str) -> String {
    format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: svc}}\n\
         spec: {{type: http, url: 'http://{addr}/api/', {extra}}}\n"
    )
}

#[tokio::test]
async fn http_posts_the_arguments_with_the_call_headers_and_the_credential() {
    let (addr, log) = fake_upstream().await;
    let env: HashMap<String, String> = [("SVC_TOKEN".to_owned(), "s3cret\n".to_owned())].into();
    let executor =
        node_executor(registry(&http_upstream(addr, "credential: svc"))).with_env(Arc::new(env));
    let mut call = execution("acme", "svc.ok", json!({"amount": 5}));
    call.skill_context = Some("Be brief.\nÜber alles: refunds".into());
    let out = executor.execute(call.clone()).await.unwrap();
    assert!(!out.is_error);
    assert_eq!(
        result(&out),
        json!({"content": [{"type": "text", "text": r#"{"ok":true,"n":3}"#}], "isError": false,
               "structuredContent": {"ok": true, "n": 3}})
    );

    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    let header = |name: &str| {
        req.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(req.path, "ok");
    assert_eq!(req.body, r#"{"amount":5}"#);
    assert_eq!(header("content-type").as_deref(), Some("application/json"));
    assert_eq!(
        header("idempotency-key"),
        Some(call.idempotency_key.clone())
    );
    assert_eq!(header("gatehouse-call-id"), Some(call.call_id.to_string()));
    assert_eq!(header("gatehouse-tenant").as_deref(), Some("acme"));
    assert_eq!(header("authorization").as_deref(), Some("Bearer s3cret"));
    let trace = header("traceparent").unwrap();
    let hex = &call.call_id.to_string()["call_".len()..];
    assert!(
        trace.starts_with(&format!("00-{hex}-")) && trace.ends_with("-01"),
        "{trace}"
    );
    let context = decode_context(&header("gatehouse-skill-context").unwrap());
    assert_eq!(context, "Be brief.\nÜber alles: refunds");
}

fn decode_context(text: &str) -> String {
    use base64::Engine;
    assert!(!text.contains('=') && !text.contains('+') && !text.contains('/'));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn http_answers_other_than_2xx_are_tool_errors_and_text_is_passed_as_text() {
    let (addr, log) = fake_upstream().await;
    let executor = node_executor(registry(&http_upstream(addr, "trusted: false")));
    let out = executor
        .execute(execution("acme", "svc.boom", json!({})))
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(result(&out)["content"][0]["text"], json!("bad amount"));
    let out = executor
        .execute(execution("acme", "svc.text", json!({})))
        .await
        .unwrap();
    assert!(!out.is_error);
    assert_eq!(result(&out)["content"][0]["text"], json!("plain words"));
    assert!(result(&out).get("structuredContent").is_none());
    let seen = log.lock().unwrap();
    assert!(
        seen.iter().all(|s| !s.headers.contains_key("authorization")
            && !s.headers.contains_key("gatehouse-skill-context")),
        "no credential and no context were named"
    );
}

#[tokio::test]
async fn http_timeouts_and_refused_connections_are_exec_errors() {
    let (addr, _log) = fake_upstream().await;
    let executor = node_executor(registry(&http_upstream(addr, "timeoutMs: 100")));
    let err = executor
        .execute(execution("acme", "svc.slow", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("did not answer within"), "{err}");

    // A port that was just free: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let executor = node_executor(registry(&http_upstream(closed, "timeoutMs: 2000")));
    let err = executor
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("calling http://"), "{err}");
}

#[tokio::test]
async fn an_upstream_urls_secrets_never_reach_the_error() {
    // A port that was just free: nothing listens there, and the error names the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let yaml = format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: svc}}\n\
         spec: {{type: http, url: 'http://{closed}/api?api_key=k3y-s3cret&region=eu'}}\n"
    );
    let err = node_executor(registry(&yaml))
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap_err();
    assert!(!err.message.contains("k3y-s3cret"), "{err}");
    assert!(err.message.contains("api_key=redacted"), "{err}");
}

#[tokio::test]
async fn credentials_are_read_at_call_time() {
    let (addr, log) = fake_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let grants =
        Grants::default().with_credential("svc", CredentialSource::File(path.clone()), &["acme"]);
    let executor = NodeExecutor::new(
        registry(&http_upstream(addr, "credential: svc")),
        Arc::new(grants),
    );
    let err = executor
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("reading"), "{err}");
    assert!(log.lock().unwrap().is_empty(), "nothing sent without it");

    std::fs::write(&path, "first").unwrap();
    executor
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap();
    std::fs::write(&path, "rotated").unwrap();
    executor
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap();
    let bearers: Vec<_> = log
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.headers["authorization"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(bearers, ["Bearer first", "Bearer rotated"]);

    let missing = node_executor(registry(&http_upstream(addr, "credential: unset")))
        .with_env(Arc::new(HashMap::<String, String>::new()));
    let err = missing
        .execute(execution("acme", "svc.ok", json!({})))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("\"unset\": its environment variable is not set"),
        "{err}"
    );
    assert!(!err.message.contains("NOT_SET_ANYWHERE"), "{err}");
}

#[tokio::test]
async fn only_credentials_granted_to_the_calling_tenant_are_read_and_never_the_old_form() {
    let (addr, log) = fake_upstream().await;
    let env: HashMap<String, String> = [("SVC_TOKEN".to_owned(), "s3cret".to_owned())].into();
    // A shared upstream naming acme's credential: globex's calls are refused.
    let shared = node_executor(registry(&http_upstream(addr, "credential: svc")))
        .with_env(Arc::new(env.clone()));
    refused_unsent(
        &shared,
        "globex",
        &log,
        "not one this node grants to tenant globex",
    )
    .await;
    // What an earlier version stored: a file of the node. Never read, never sent.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, "peer_secret").unwrap();
    let old = node_executor(registry(""));
    let stored: Resource = serde_json::from_value(json!({
        "kind": "Upstream",
        "apiVersion": "gatehouse.dev/v1",
        "metadata": {"name": "svc", "tenant": "acme"},
        "spec": {"type": "http", "url": format!("http://{addr}/api/"),
                 "credential": {"file": key.display().to_string()}},
    }))
    .unwrap();
    let written_before = Proposal {
        request_id: uuid::Uuid::from_u128(2),
        at: 0,
        command: Command::Put {
            resources: vec![stored],
        },
    };
    old.registry
        .write()
        .unwrap()
        .apply(2, &written_before)
        .expect("apply does not validate: what a log holds is applied");
    let old = old.with_env(Arc::new(env));
    refused_unsent(&old, "acme", &log, "`credential: NAME`").await;
}

/// Calls `svc.ok` for `tenant` and expects a refusal saying `why`, with nothing sent upstream.
async fn refused_unsent(executor: &NodeExecutor, tenant: &str, log: &Log, why: &str) {
    let err = executor
        .execute(execution(tenant, "svc.ok", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains(why), "{err}");
    assert!(log.lock().unwrap().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_credential_file_in_the_data_directory_is_never_read() {
    let (addr, log) = fake_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("admin.key"), "gate_admin").unwrap();
    // A link made after the configuration was checked.
    let link = dir.path().join("svc.key");
    std::os::unix::fs::symlink(data.join("admin.key"), &link).unwrap();
    let grants = Grants::default()
        .with_credential("svc", CredentialSource::File(link), &["acme"])
        .guarding(&data);
    let executor = NodeExecutor::new(
        registry(&http_upstream(addr, "credential: svc")),
        Arc::new(grants),
    );
    refused_unsent(&executor, "acme", &log, "data directory").await;
}

#[tokio::test]
async fn built_in_tools_run_only_for_tenants_they_are_enabled_for_each_in_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants::default()
        .with_builtins("acme", [BuiltinTool::Transfer])
        .with_builtins("globex", [BuiltinTool::Echo]);
    let registry = registry(
        "---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {name: dev, tenant: globex}\n\
         spec: {type: builtin}\n",
    );
    let executor =
        NodeExecutor::new(registry, Arc::new(grants)).with_state_dir(dir.path().to_owned());
    let transfer = json!({"from": "alice", "to": "bob", "amount": 5});
    let out = executor
        .execute(execution("acme", "dev.transfer", transfer.clone()))
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    let err = executor
        .execute(execution("globex", "dev.transfer", transfer))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("built-in tool transfer is not enabled for tenant globex"),
        "{err}"
    );
    let err = executor
        .execute(execution("acme", "dev.echo", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("not enabled for tenant acme"), "{err}");
    assert!(builtin::ledger_path(&dir.path().join("acme")).exists());
    assert!(!dir.path().join("globex").exists());
    assert!(!builtin::ledger_path(dir.path()).exists());
}
