use super::*;

fn call(end_user: &str) -> Call {
    let mut spec = gatehouse_testkit::calls::destructive(
        "call_0001",
        "acme",
        "bank.transfer",
        "ops-bot",
        r#"{"amount":5,"iban":"DE00 1234"}"#,
        2,
        1_795_500_060_000,
    );
    spec.chain.end_user = Some(end_user.into());
    Call::new(spec, 1_795_500_000_000)
}

fn notice(call: Call, event: NotifyEvent) -> Notice {
    Notice {
        at: call.created_at,
        call,
        event,
    }
}

#[test]
fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
    // Computed apart, with Python's hmac module.
    assert_eq!(
        signature(b"whsec-test", 1_795_500_000, br#"{"event":"waiting"}"#),
        "v1=eb39d5b59c35cb416bce5190a14689eeef49bdb58bfa4207b632f3e235cd528d"
    );
    assert_ne!(
        signature(b"whsec-test", 1_795_500_001, br#"{"event":"waiting"}"#),
        signature(b"whsec-test", 1_795_500_000, br#"{"event":"waiting"}"#),
        "the timestamp is signed too, so an old body cannot be replayed with a new time"
    );
}

#[test]
fn the_json_body_summarises_without_the_arguments() {
    let waiting = call("dana");
    let digest = waiting.spec.args_sha256.clone();
    let body = body(
        WebhookFormat::Json,
        "ops-hook",
        &notice(waiting, NotifyEvent::Waiting),
        &console_link("https://gate.example/", &CallId("call_0001".into())),
    );
    assert_eq!(body["event"], "waiting");
    assert_eq!(body["event_id"], "call_0001.waiting");
    assert_eq!(
        body["call"]["approvals"],
        json!({"given": 0, "required": 2})
    );
    assert_eq!(body["call"]["proposed_by"]["end_user"], "dana");
    assert_eq!(body["call"]["expires_at"], "2026-11-24T06:01:00.000Z");
    assert_eq!(
        body["console_url"],
        "https://gate.example/console#call=call_0001"
    );
    let text = body.to_string();
    assert_eq!(body["call"]["args_sha256"], digest.as_str());
    assert!(
        !text.contains("DE00"),
        "arguments never leave in a notice: {text}"
    );
}

#[test]
fn slack_text_cannot_ping_or_link_from_names_or_reasons() {
    let mut rejected = call("<!channel>");
    rejected.rejections.push(Verdict {
        principal: "ann".into(),
        person: None,
        at: 1_795_500_030_000,
        note: "<https://evil.example|click here> & <@U123>".into(),
    });
    rejected.state = CallState::Rejected;
    let body = body(
        WebhookFormat::Slack,
        "ops-hook",
        &notice(rejected, NotifyEvent::Decided),
        "https://gate.example/console#call=call_0001",
    );
    let text = body["text"].as_str().unwrap();
    assert!(text.starts_with("*Rejected by ann: "), "{text}");
    assert!(text.contains("&lt;!channel&gt;"), "{text}");
    assert!(text.contains("&lt;https://evil.example|click here&gt; &amp; &lt;@U123&gt;"));
    // The console link is the one link the message makes.
    assert_eq!(text.matches('<').count(), 1, "{text}");
    assert!(
        text.contains(
            "<https://gate.example/console#call=call_0001|Open in the Gatehouse console>"
        )
    );
    assert_eq!(body["blocks"][0]["text"]["text"], text);
    assert!(!text.contains("DE00"));
}
