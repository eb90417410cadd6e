//! The A2A front with the official Python SDK's client (`a2a-sdk`), over both of the card's
//! interfaces, JSON-RPC and gRPC: the card, a read-only task and its artifact, a destructive task
//! waiting in `TASK_STATE_AUTH_REQUIRED` until an approver acts over gRPC, a rejected approval, a
//! cancelled task, and the refusals (a peer without the agent role, a text-only message, a user
//! the tenant does not allow). Skips, saying so, without python3.

use gatehouse_registry::CallState;
use gatehouse_testkit::python::A2aClient;
use gatehouse_tests::mcp_fixture::{
    ACME, BOT, CAROL, ECHO, GINA, LONE, McpFixture, SETTLE, TRANSFER,
};
use serde_json::{Value, json};

const TRANSPORTS: [&str; 2] = ["jsonrpc", "grpc"];

const COMPLETED: &str = "TASK_STATE_COMPLETED";
const AUTH_REQUIRED: &str = "TASK_STATE_AUTH_REQUIRED";
const REJECTED: &str = "TASK_STATE_REJECTED";
const CANCELED: &str = "TASK_STATE_CANCELED";

fn card_url(fixture: &McpFixture) -> String {
    format!("http://{}", fixture.cluster.node(1).http_addr)
}

fn client(fixture: &McpFixture, transport: &str, key: &str) -> Option<A2aClient> {
    Some(A2aClient::new(&card_url(fixture), transport, Some(key))?.deadline(SETTLE.as_secs_f64()))
}

fn task(answer: &Value) -> &Value {
    let task = &answer["task"];
    assert!(task.is_object(), "a task in {answer}");
    task
}

fn state(answer: &Value) -> &str {
    task(answer)["state"].as_str().unwrap_or_default()
}

fn id(answer: &Value) -> String {
    task(answer)["id"].as_str().expect("a task id").to_owned()
}

fn transfer_args(amount: u64) -> Value {
    json!({"from": "alice", "to": "bob", "amount": amount})
}

/// The data of the task's `result` artifact.
fn result_data(task: &Value) -> &Value {
    let artifacts = task["artifacts"].as_array().expect("artifacts");
    let result = artifacts
        .iter()
        .find(|a| a["name"] == "result")
        .unwrap_or_else(|| panic!("a result artifact in {task}"));
    &result["parts"][0]["data"]
}

#[test]
fn the_card_offers_both_interfaces_and_the_extended_card_the_callers_tools() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    let Some(bot) = client(&fixture, "jsonrpc", BOT) else {
        return Ok(());
    };
    let node = fixture.cluster.node(1);
    let card = &bot.run(&["card"])?["card"];
    assert_eq!(card["name"], "Gatehouse");
    let interfaces = card["supportedInterfaces"].as_array().expect("interfaces");
    let url_of = |binding: &str| {
        interfaces
            .iter()
            .find(|i| i["protocolBinding"] == binding)
            .and_then(|i| i["url"].as_str())
            .unwrap_or_else(|| panic!("a {binding} interface in {card}"))
            .to_owned()
    };
    assert_eq!(url_of("JSONRPC"), format!("http://{}/a2a", node.http_addr));
    assert_eq!(url_of("GRPC"), node.grpc_addr.to_string());
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["extendedAgentCard"], true);
    assert!(card["securitySchemes"]["bearer"].is_object(), "{card}");
    let public = card.to_string();
    for tool in [ECHO, TRANSFER, "other.echo"] {
        assert!(
            !public.contains(tool),
            "the public card names {tool}: {public}"
        );
    }

    for transport in TRANSPORTS {
        let skills = |key: &str| -> anyhow::Result<Vec<String>> {
            let answer = client(&fixture, transport, key)
                .expect("python")
                .run(&["extended-card"])?;
            let card = &answer["card"];
            Ok(card["skills"]
                .as_array()
                .unwrap_or_else(|| panic!("skills in {answer}"))
                .iter()
                .filter_map(|s| s["id"].as_str().map(str::to_owned))
                .collect())
        };
        let bots = skills(BOT)?;
        for tool in [ECHO, TRANSFER] {
            assert!(
                bots.iter().any(|s| s == tool),
                "{transport}: {tool} in {bots:?}"
            );
        }
        assert!(!bots.iter().any(|s| s.starts_with("other.")), "{bots:?}");
        let ginas = skills(GINA)?;
        assert!(ginas.iter().any(|s| s == "other.echo"), "{ginas:?}");
        assert!(!ginas.iter().any(|s| s.starts_with("demo.")), "{ginas:?}");
    }
    Ok(())
}

#[test]
fn a_read_only_task_completes_with_the_tools_result_as_its_artifact() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    for transport in TRANSPORTS {
        let Some(bot) = client(&fixture, transport, BOT) else {
            return Ok(());
        };
        let text = format!("hello over {transport}");
        let answer = bot.send(ECHO, &json!({"text": text}))?;
        assert_eq!(state(&answer), COMPLETED, "{answer}");
        let data = result_data(task(&answer));
        assert_eq!(data["structuredContent"]["text"], text.as_str(), "{answer}");
        let metadata = &task(&answer)["metadata"];
        assert_eq!(metadata["dev.gatehouse/effective-mode"], "read_only");
        assert_eq!(metadata["dev.gatehouse/call-id"], task(&answer)["id"]);

        // The task is the call's record: GetTask reads it back.
        let got = bot.run(&["get", &id(&answer)])?;
        assert_eq!(state(&got), COMPLETED, "{got}");
        assert_eq!(result_data(task(&got)), data);

        // The audit names the user, the agent and the peer that delegated it.
        let audited = fixture.audited_calls(ACME, ECHO)?;
        let record = audited
            .iter()
            .find(|r| r.entry.call_id.as_deref() == Some(id(&answer).as_str()))
            .unwrap_or_else(|| panic!("an audit record of {}", id(&answer)));
        assert_eq!(record.entry.chain, ["user:john", "agent:bot", "peer:bot"]);
    }
    Ok(())
}

#[test]
fn a_destructive_task_waits_for_approval_over_grpc_and_then_completes() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    for (n, transport) in TRANSPORTS.into_iter().enumerate() {
        let Some(bot) = client(&fixture, transport, BOT) else {
            return Ok(());
        };
        let amount = 10 + n as u64;
        let answer = bot.send(TRANSFER, &transfer_args(amount))?;
        assert_eq!(state(&answer), AUTH_REQUIRED, "{answer}");
        let call_id = id(&answer);
        let expected = format!("approvers act on call {call_id}");
        assert!(
            task(&answer)["statusText"]
                .as_str()
                .is_some_and(|t| t.contains(&expected)),
            "{answer}"
        );
        assert!(fixture.upstream.transfers().len() == n, "nothing ran yet");

        // A subscriber follows the task from AUTH_REQUIRED to the end; the approver acts only
        // once its stream has delivered the task.
        let ready = tempfile::NamedTempFile::new()?.into_temp_path();
        std::fs::remove_file(&ready)?;
        let subscriber = bot.spawn(&[
            "--ready-file",
            ready.to_str().unwrap(),
            "subscribe",
            &call_id,
        ])?;
        let deadline = std::time::Instant::now() + SETTLE;
        while !ready.exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the subscription never opened"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let watching = bot.run(&["get", &call_id])?;
        assert_eq!(state(&watching), AUTH_REQUIRED, "{watching}");
        fixture.approve(&call_id)?;

        let done = bot.run(&["wait", &call_id, &format!("{COMPLETED},TASK_STATE_FAILED")])?;
        assert_eq!(state(&done), COMPLETED, "{done}");
        assert_eq!(
            result_data(task(&done))["structuredContent"]["amount"],
            amount
        );
        let transfers = fixture.upstream.transfers();
        assert_eq!(transfers.len(), n + 1, "ran exactly once: {transfers:?}");

        let followed = subscriber.finish()?;
        let states: Vec<&str> = followed["events"]
            .as_array()
            .unwrap_or_else(|| panic!("events in {followed}"))
            .iter()
            .filter_map(|e| e["state"].as_str())
            .collect();
        assert_eq!(states.first(), Some(&AUTH_REQUIRED), "{followed}");
        assert_eq!(states.last(), Some(&COMPLETED), "{followed}");
        assert!(
            followed["events"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["kind"] == "artifact"),
            "the result arrives as an artifact event: {followed}"
        );
    }
    Ok(())
}

#[test]
fn a_rejected_approval_ends_the_task_rejected_with_the_reason() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    for transport in TRANSPORTS {
        let Some(bot) = client(&fixture, transport, BOT) else {
            return Ok(());
        };
        let answer = bot.send(TRANSFER, &transfer_args(500))?;
        assert_eq!(state(&answer), AUTH_REQUIRED, "{answer}");
        let call_id = id(&answer);
        fixture.reject(&call_id, "not this month")?;
        let done = bot.run(&["wait", &call_id, REJECTED])?;
        assert_eq!(state(&done), REJECTED, "{done}");
        assert_eq!(
            task(&done)["statusText"],
            "rejected by carol: not this month",
            "{done}"
        );
    }
    assert!(
        fixture.upstream.transfers().is_empty(),
        "nothing rejected ran"
    );
    Ok(())
}

#[test]
fn peers_without_the_role_text_only_messages_and_unknown_users_are_refused() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    for transport in TRANSPORTS {
        let Some(bot) = client(&fixture, transport, BOT) else {
            return Ok(());
        };
        // carol approves in acme but is nobody's agent.
        let refused = bot.with_key(CAROL).send(ECHO, &json!({"text": "hi"}))?;
        assert_eq!(refused["error"]["status"], "PERMISSION_DENIED", "{refused}");
        let unknown = bot
            .with_key("not-a-key")
            .send(ECHO, &json!({"text": "hi"}))?;
        assert_eq!(unknown["error"]["status"], "UNAUTHENTICATED", "{unknown}");

        let text = bot.run(&["send-text", "please move 100 EUR to bob"])?;
        assert_eq!(text["error"]["code"], -32602, "{text}");
        let message = text["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("{\"tool\": \"upstream.tool\""), "{text}");

        // lone is an agent of acme, but acts for mallory, whom acme does not know.
        let delegated = bot.with_key(LONE).send(ECHO, &json!({"text": "hi"}))?;
        assert_eq!(state(&delegated), REJECTED, "{delegated}");
        let why = task(&delegated)["statusText"].as_str().unwrap_or_default();
        assert!(why.contains("mallory"), "{delegated}");

        // Arguments the tool's schema refuses end the task the same way.
        let invalid = bot.send(TRANSFER, &json!({"from": "alice"}))?;
        assert_eq!(state(&invalid), REJECTED, "{invalid}");
    }
    // Nothing refused ever reached the upstream.
    assert_eq!(fixture.upstream.count_for("echo"), 0);
    let refusals = fixture.audited_calls(ACME, ECHO)?;
    assert!(
        refusals.iter().any(
            |r| r.entry.chain == ["user:mallory", "agent:lone", "peer:lone"]
                && r.entry.outcome == "refused:denied_by_policy"
        ),
        "the user's refusal is audited with the whole chain: {refusals:?}"
    );
    Ok(())
}

#[test]
fn a_pending_task_is_cancelled_once_and_a_repeated_message_finds_its_task() -> anyhow::Result<()> {
    let fixture = McpFixture::start()?;
    for transport in TRANSPORTS {
        let Some(bot) = client(&fixture, transport, BOT) else {
            return Ok(());
        };
        let message_id = format!("transfer-{transport}");
        let args = transfer_args(7).to_string();
        let first = bot.run(&["send", TRANSFER, &args, "--message-id", &message_id])?;
        assert_eq!(state(&first), AUTH_REQUIRED, "{first}");
        let again = bot.run(&["send", TRANSFER, &args, "--message-id", &message_id])?;
        assert_eq!(id(&again), id(&first), "the same message is the same task");

        let cancelled = bot.run(&["cancel", &id(&first)])?;
        assert_eq!(state(&cancelled), CANCELED, "{cancelled}");
        let twice = bot.run(&["cancel", &id(&first)])?;
        assert_eq!(twice["error"]["code"], -32002, "not cancelable: {twice}");
        let missing = bot.run(&["get", "call_nothing_here"])?;
        assert_eq!(missing["error"]["code"], -32001, "{missing}");

        let listed = bot.run(&["list"])?;
        let tasks = listed["tasks"].as_array().expect("tasks");
        assert!(
            tasks
                .iter()
                .any(|t| t["id"] == id(&first).as_str() && t["state"] == CANCELED),
            "{listed}"
        );
    }
    let pending = fixture
        .cluster
        .node(1)
        .cluster
        .registry
        .read()
        .calls_of(ACME)
        .filter(|c| c.state == CallState::Pending)
        .count();
    assert_eq!(pending, 0, "both transports' tasks were cancelled");
    Ok(())
}
