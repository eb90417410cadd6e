//! Looking at a running node from outside: Prometheus metrics on the HTTP listener scraped over
//! real HTTP, `/readyz`, and the gRPC health and reflection services over a real tonic channel.
//! One node.
//!
//! Tenant `acme`: the agent `bot`, the approver `alice`; built-in upstreams `demo` (`demo.echo`,
//! read-only, `text` required) and `bank` (`bank.echo`, destructive), and the HTTP upstream
//! `down` (`down.fetch`) at a loopback port nobody listens on, whose breaker opens after one
//! failure. Tenant `globex` has no calls.

use futures::StreamExt;
use gatehouse_cluster::grants::BuiltinTool;
use gatehouse_cluster::grants::Grants;
use gatehouse_gateway::metrics::MetricsSettings;
use gatehouse_node::server::NodeHandle;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_proto::v1::gateway_service_client::GatewayServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::{bearer, principal, resource};
use gatehouse_tests::{NodeOptions, one_node};
use serde_json::{Value, json};
use std::time::Duration;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const BOT: &str = "gate_bot-key-000000000000000000000000";
const ALICE: &str = "gate_alice-key-00000000000000000000000";
const DEADLINE: Duration = Duration::from_secs(20);

async fn start() -> (NodeHandle, tempfile::TempDir) {
    let (node, dir) = one_node(NodeOptions {
        grants: Grants::default().with_builtins("acme", [BuiltinTool::Echo]),
        // This test reads the per-tenant series, which the operator must ask for.
        metrics: MetricsSettings {
            tenant_labels: true,
            token: None,
        },
        ..NodeOptions::default()
    })
    .await
    .unwrap();
    let mut registry = RegistryServiceClient::connect(grpc_url(&node))
        .await
        .unwrap();
    registry
        .apply(bearer(
            pb::ApplyRequest {
                resources: resources(&dead_url()),
            },
            node.admin_key.as_deref().unwrap(),
        ))
        .await
        .unwrap();
    (node, dir)
}

fn grpc_url(node: &NodeHandle) -> String {
    format!("http://{}", node.grpc_addr)
}

/// A loopback URL nothing listens on: a port the kernel handed out and that was closed again.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

fn resources(dead_url: &str) -> Vec<pb::Resource> {
    let acme = Some("acme");
    vec![
        resource("Tenant", "acme", None, json!({})),
        resource("Tenant", "globex", None, json!({})),
        principal("bot", BOT, json!({"acme": ["agent"]}), None),
        principal("alice", ALICE, json!({"acme": ["approver"]}), None),
        resource("Upstream", "demo", acme, json!({"type": "builtin"})),
        resource("Upstream", "bank", acme, json!({"type": "builtin"})),
        resource(
            "Tool",
            "demo.echo",
            acme,
            json!({
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                "approvalMode": "read_only",
            }),
        ),
        resource(
            "Tool",
            "bank.echo",
            acme,
            json!({"inputSchema": {"type": "object"}, "approvalMode": "destructive"}),
        ),
        resource(
            "Upstream",
            "down",
            acme,
            json!({
                "type": "http",
                "url": dead_url,
                "timeoutMs": 2000,
                "retries": {"attempts": 0},
                "circuitBreaker": {"failures": 1, "cooldownMs": 600000},
            }),
        ),
        resource(
            "Tool",
            "down.fetch",
            acme,
            json!({"inputSchema": {"type": "object"}, "approvalMode": "read_only"}),
        ),
    ]
}

/// Calls a tool over gRPC as `bot`: the envelope's state, or the refusal's status code.
async fn call(node: &NodeHandle, tool: &str, arguments: Value) -> Result<i32, tonic::Code> {
    let mut gateway = GatewayServiceClient::connect(grpc_url(node)).await.unwrap();
    gateway
        .call_tool(bearer(
            pb::CallToolRequest {
                tenant: "acme".into(),
                tool: tool.into(),
                arguments_json: arguments.to_string(),
                idempotency_key: None,
            },
            BOT,
        ))
        .await
        .map(|r| r.into_inner().envelope.unwrap().state)
        .map_err(|s| s.code())
}

/// `GET /metrics` over HTTP: the body, after checking the exposition format's content type.
async fn scrape(node: &NodeHandle) -> String {
    let response = reqwest::get(format!("http://{}/metrics", node.http_addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    response.text().await.unwrap()
}

/// The value of the one sample named exactly `series` (name and labels as printed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().unwrap())
}

fn must(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
}

#[tokio::test]
async fn metrics_count_calls_by_outcome_and_show_pending_approvals_and_raft() {
    let (node, _dir) = start().await;

    assert_eq!(
        call(&node, "demo.echo", json!({"text": "hi"})).await,
        Ok(pb::CallState::Succeeded as i32)
    );
    assert_eq!(
        call(&node, "demo.echo", json!({})).await,
        Err(tonic::Code::InvalidArgument)
    );
    assert_eq!(
        call(&node, "nothere.echo", json!({})).await,
        Err(tonic::Code::NotFound)
    );
    assert_eq!(
        call(&node, "bank.echo", json!({"amount": 5})).await,
        Ok(pb::CallState::Pending as i32)
    );

    assert_eq!(
        call(&node, "down.fetch", json!({})).await,
        Ok(pb::CallState::Failed as i32)
    );

    let text = scrape(&node).await;
    for (series, value) in [
        (
            r#"gatehouse_calls_total{outcome="failed",tenant="acme",tool="down.fetch"}"#,
            1.0,
        ),
        // One failure opened it.
        (
            r#"gatehouse_upstream_breaker_state{upstream="Upstream/acme/down"}"#,
            2.0,
        ),
        (
            r#"gatehouse_calls_total{outcome="succeeded",tenant="acme",tool="demo.echo"}"#,
            1.0,
        ),
        (
            r#"gatehouse_calls_total{outcome="refused:invalid_arguments",tenant="acme",tool="demo.echo"}"#,
            1.0,
        ),
        // A tool that does not exist is no label of its own.
        (
            r#"gatehouse_calls_total{outcome="refused:unknown_tool",tenant="acme",tool="_unknown"}"#,
            1.0,
        ),
        (
            r#"gatehouse_calls_total{outcome="pending",tenant="acme",tool="bank.echo"}"#,
            1.0,
        ),
        (r#"gatehouse_approvals_pending{tenant="acme"}"#, 1.0),
        (r#"gatehouse_approvals_pending{tenant="globex"}"#, 0.0),
        (
            r#"gatehouse_call_duration_seconds_bucket{tenant="acme",tool="demo.echo",le="+Inf"}"#,
            2.0,
        ),
        (
            r#"gatehouse_call_duration_seconds_count{tenant="acme",tool="demo.echo"}"#,
            2.0,
        ),
        ("gatehouse_raft_leader_id", 1.0),
        ("gatehouse_tenant_actor_restarts_total", 0.0),
    ] {
        assert_eq!(must(&text, series), value, "{series}");
    }
    assert!(!text.contains("nothere"), "{text}");
    assert!(text.contains("# HELP gatehouse_calls_total "), "{text}");
    assert!(text.contains("# TYPE gatehouse_call_duration_seconds histogram"));
    assert!(
        sample(
            &text,
            r#"gatehouse_call_duration_seconds_bucket{tenant="acme",tool="demo.echo",le="0.001"}"#
        )
        .is_some(),
        "{text}"
    );
    assert!(must(&text, "gatehouse_raft_term") >= 1.0);
    let applied = must(&text, "gatehouse_raft_applied_index");
    let committed = must(&text, "gatehouse_raft_committed_index");
    let last_log = must(&text, "gatehouse_raft_last_log_index");
    // Bootstrap, the admin, the admission, the resources and the pending call at least.
    assert!(applied >= 4.0 && committed >= 4.0, "{text}");
    // One Raft metrics snapshot gives both (the commit index is read a moment apart).
    assert!(applied <= last_log, "{text}");
    assert!(must(&text, "gatehouse_tenant_actors_active") >= 1.0);

    // The gauge is read from the registry at each scrape: a rejection takes the call off it.
    let pending = pending_call(&node).await;
    ApprovalServiceClient::connect(grpc_url(&node))
        .await
        .unwrap()
        .reject(bearer(
            pb::RejectCallRequest {
                call_id: pending,
                reason: "no".into(),
            },
            ALICE,
        ))
        .await
        .unwrap();
    let text = scrape(&node).await;
    assert_eq!(
        must(&text, r#"gatehouse_approvals_pending{tenant="acme"}"#),
        0.0
    );
    node.shutdown().await;
}

async fn pending_call(node: &NodeHandle) -> String {
    let registry = node.cluster.registry.read();
    let mut pending = registry
        .calls_of("acme")
        .filter(|c| c.state == gatehouse_registry::CallState::Pending);
    let call = pending.next().expect("one pending call");
    assert!(pending.next().is_none());
    call.spec.id.to_string()
}

#[tokio::test]
async fn readyz_answers_ready_on_a_healthy_node() {
    let (node, _dir) = start().await;
    let response = reqwest::get(format!("http://{}/readyz", node.http_addr))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.starts_with("ready, leader 1, applied "), "{body}");
    node.shutdown().await;
}

async fn health_of(health: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    let status = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    ServingStatus::try_from(status).unwrap()
}

#[tokio::test]
async fn grpc_health_serves_every_service_until_the_node_stops() {
    let (node, _dir) = start().await;
    let channel = Channel::from_shared(grpc_url(&node))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    assert_eq!(health_of(&mut health, "").await, ServingStatus::Serving);
    for service in gatehouse_fronts::grpc_health::SERVICES {
        assert_eq!(
            health_of(&mut health, service).await,
            ServingStatus::Serving,
            "{service}"
        );
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "gatehouse.v1.NoSuchService".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);

    // What shutdown says first, while the listener still answers.
    node.grpc_health.stopping().await;
    assert_eq!(health_of(&mut health, "").await, ServingStatus::NotServing);
    assert_eq!(
        health_of(&mut health, "gatehouse.v1.GatewayService").await,
        ServingStatus::NotServing
    );
    node.shutdown().await;
}

#[tokio::test]
async fn a_stopping_node_refuses_new_calls_as_unavailable_and_is_not_ready() {
    let (node, _dir) = start().await;
    assert_eq!(
        call(&node, "demo.echo", json!({"text": "before"})).await,
        Ok(pb::CallState::Succeeded as i32)
    );
    let pending = call(&node, "bank.echo", json!({"amount": 1})).await;
    assert_eq!(pending, Ok(pb::CallState::Pending as i32));
    let pending = pending_call(&node).await;

    node.stop_accepting().await;

    let mut gateway = GatewayServiceClient::connect(grpc_url(&node))
        .await
        .unwrap();
    let refused = gateway
        .call_tool(bearer(
            pb::CallToolRequest {
                tenant: "acme".into(),
                tool: "demo.echo".into(),
                arguments_json: json!({"text": "after"}).to_string(),
                idempotency_key: None,
            },
            BOT,
        ))
        .await
        .expect_err("a new call is refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("stopping"), "{refused:?}");

    let ready = reqwest::get(format!("http://{}/readyz", node.http_addr))
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(
        ready.text().await.unwrap(),
        "not ready: the node is stopping\n"
    );

    // What is already in goes on: the pending call can still be decided here.
    ApprovalServiceClient::connect(grpc_url(&node))
        .await
        .unwrap()
        .reject(bearer(
            pb::RejectCallRequest {
                call_id: pending,
                reason: "stopping".into(),
            },
            ALICE,
        ))
        .await
        .expect("an approver still acts on a stopping node");
    node.shutdown().await;
}

#[tokio::test]
async fn a_health_watcher_hears_not_serving_and_does_not_hold_the_stop_open() {
    let (node, _dir) = start().await;
    let channel = Channel::from_shared(grpc_url(&node))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut watch = HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap().status;
    assert_eq!(ServingStatus::try_from(first), Ok(ServingStatus::Serving));

    let stopping = tokio::spawn(node.shutdown());
    let heard = tokio::time::timeout(DEADLINE, watch.next())
        .await
        .expect("the watcher hears the node stop")
        .unwrap()
        .unwrap()
        .status;
    assert_eq!(
        ServingStatus::try_from(heard),
        Ok(ServingStatus::NotServing)
    );
    tokio::time::timeout(DEADLINE, stopping)
        .await
        .expect("the node stops although a watch stream was open")
        .unwrap();
}

#[tokio::test]
async fn reflection_lists_the_gatehouse_services_in_v1_and_v1alpha() {
    use tonic_reflection::pb::{v1, v1alpha};
    let (node, _dir) = start().await;
    let channel = Channel::from_shared(grpc_url(&node))
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut client = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut answers = client
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = tokio::time::timeout(DEADLINE, answers.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let names: Vec<String> = match answer.message_response.unwrap() {
        v1::server_reflection_response::MessageResponse::ListServicesResponse(list) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("not a service list: {other:?}"),
    };
    for expected in [
        "gatehouse.v1.RegistryService",
        "gatehouse.v1.ApprovalService",
        "gatehouse.v1.ClusterService",
        "gatehouse.v1.GatewayService",
        "gatehouse.v1.SnapshotService",
        "gatehouse.v1.RaftService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }

    // A file describing a service comes back too, which is what `grpcurl describe` needs.
    let request = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                "gatehouse.v1.GatewayService".into(),
            ),
        ),
    };
    let mut answers = client
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.next().await.unwrap().unwrap();
    match answer.message_response.unwrap() {
        v1::server_reflection_response::MessageResponse::FileDescriptorResponse(files) => {
            assert!(!files.file_descriptor_proto.is_empty());
        }
        other => panic!("not a file: {other:?}"),
    }

    let mut old = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let request = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let answer = old
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .unwrap()
        .into_inner()
        .next()
        .await
        .unwrap()
        .unwrap();
    match answer.message_response.unwrap() {
        v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(list) => {
            assert!(
                list.service
                    .iter()
                    .any(|s| s.name == "gatehouse.v1.GatewayService"),
                "{list:?}"
            );
        }
        other => panic!("not a service list: {other:?}"),
    }
    node.shutdown().await;
}
