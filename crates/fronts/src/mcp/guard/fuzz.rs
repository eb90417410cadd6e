//! Fuzzes the MCP front's JSON-RPC check (`check_jsonrpc`), which every POST to `/mcp` passes
//! before rmcp sees it: random bytes, random JSON, messages assembled from right and wrong
//! parts (version, id, method, params, result), valid messages damaged byte by byte, and deep
//! nesting.
//!
//! Properties: the check always answers (no panic, no stack overflow); a refusal is HTTP 400
//! carrying one JSON-RPC 2.0 error object; bytes that are not JSON get -32700, JSON that is not
//! one JSON-RPC 2.0 message gets -32600 (with the request's id when it is a valid id, else null),
//! and a message of the right shape is passed on or, for a known method whose params do not fit,
//! refused with -32602 and its id; messages of known methods with fitting params, and of
//! unknown methods, are passed on.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use super::{MCP_METHODS, check_jsonrpc};
use crate::jsonrpc_error::{INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};
use axum::http::StatusCode;
use gatehouse_testkit::fuzz::config;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The check's answer: `None` when the message goes on, else the error's code and the id the
/// error answers, after checking that the refusal has the one shape every refusal has.
fn answer(bytes: &[u8]) -> Result<Option<(i64, Value)>, TestCaseError> {
    let Err(response) = check_jsonrpc(bytes) else {
        return Ok(None);
    };
    prop_assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = futures::executor::block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let body: Value =
        serde_json::from_slice(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&body["jsonrpc"], "2.0");
    prop_assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{}",
        body
    );
    let keys: Vec<&String> = body
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    prop_assert_eq!(keys.len(), 3, "{}", body);
    let code = body["error"]["code"]
        .as_i64()
        .ok_or_else(|| TestCaseError::fail("no code"))?;
    Ok(Some((code, body["id"].clone())))
}

/// What JSON-RPC 2.0 itself says of a JSON value, before any method is looked at: `Some` with
/// the code and the id to answer with, or `None` for a message of the right shape.
fn shape_error(value: &Value) -> Option<(i64, Value)> {
    let Value::Object(message) = value else {
        return Some((INVALID_REQUEST.into(), Value::Null));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    // The ids rmcp carries: strings, and integers of i64 (written plainly or as exact floats).
    let id_ok = match &id {
        Value::Null | Value::String(_) => true,
        Value::Number(n) => {
            n.is_i64()
                || n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 2f64.powi(53))
        }
        _ => false,
    };
    let request = message.get("method").is_some_and(Value::is_string);
    let response = message.contains_key("id")
        && (message.contains_key("result") || message.contains_key("error"));
    let version = message.get("jsonrpc") == Some(&json!("2.0"));
    (!version || !id_ok || !(request || response))
        .then(|| (INVALID_REQUEST.into(), if id_ok { id } else { Value::Null }))
}

fn any_json() -> impl Strategy<Value = Value> {
    gatehouse_testkit::fuzz::json("\\PC{0,12}", "[a-z]{0,8}")
}

fn part(
    name: &'static str,
    values: Vec<Value>,
) -> impl Strategy<Value = Option<(&'static str, Value)>> {
    prop::option::of(
        prop_oneof![prop::sample::select(values), any_json()].prop_map(move |v| (name, v)),
    )
}

/// Messages assembled from right and wrong versions, ids, methods, params and results.
fn message() -> impl Strategy<Value = Value> {
    let methods: Vec<Value> = MCP_METHODS
        .iter()
        .chain(&["notifications/initialized", "no/such", ""])
        .map(|m| json!(m))
        .collect();
    (
        part("jsonrpc", vec![json!("2.0"), json!("1.0"), json!(2.0)]),
        part(
            "id",
            vec![
                json!(1),
                json!("a"),
                json!(null),
                json!(1.5e300),
                json!(u64::MAX),
                json!([1]),
            ],
        ),
        part("method", methods),
        part(
            "params",
            vec![
                json!({}),
                json!({"name": "demo.echo", "arguments": {}}),
                json!({"name": 7}),
            ],
        ),
        part("result", vec![json!({})]),
    )
        .prop_map(|(a, b, c, d, e)| {
            Value::Object(
                [a, b, c, d, e]
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            )
        })
}

/// Checks the answer for a JSON value against the model; returns the answer.
fn check_value(value: &Value) -> Result<Option<(i64, Value)>, TestCaseError> {
    let got = answer(value.to_string().as_bytes())?;
    match shape_error(value) {
        Some(expected) => prop_assert_eq!(got.clone(), Some(expected)),
        None => {
            if let Some((code, id)) = &got {
                prop_assert_eq!(*code, i64::from(INVALID_PARAMS));
                prop_assert_eq!(id, value.get("id").unwrap_or(&Value::Null));
            }
        }
    }
    Ok(got)
}

fn request(id: impl Into<Value>, method: &str, params: Option<Value>) -> Value {
    let mut m = Map::from_iter([
        ("jsonrpc".to_owned(), json!("2.0")),
        ("id".to_owned(), id.into()),
    ]);
    m.insert("method".into(), json!(method));
    if let Some(params) = params {
        m.insert("params".into(), params);
    }
    Value::Object(m)
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn random_bytes_get_a_parse_error_exactly_when_they_are_not_json(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let got = answer(&bytes)?;
        match serde_json::from_slice::<Value>(&bytes) {
            Err(_) => prop_assert_eq!(got, Some((PARSE_ERROR.into(), Value::Null))),
            Ok(value) => prop_assert_eq!(got, check_value(&value)?),
        }
    }

    #[test]
    fn random_json_is_judged_by_its_shape(value in any_json()) {
        check_value(&value)?;
    }

    #[test]
    fn assembled_messages_are_judged_by_their_shape(value in message()) {
        check_value(&value)?;
    }

    #[test]
    fn fitting_and_unknown_messages_pass_and_misfits_are_invalid_params(
        id in any::<i64>(),
        too_big in (i64::MAX as u64 + 1)..=u64::MAX,
        fraction in any::<f64>().prop_filter("a finite fraction", |f| f.is_finite() && f.fract() != 0.0),
        name in "\\PC{1,16}",
        unknown in "[a-z]{1,8}/[a-z]{1,8}",
        cursor in prop::option::of("\\PC{0,8}"),
    ) {
        let arguments = json!({"text": name});
        for fits in [
            request(id, "ping", None),
            request(id, "tools/list", Some(cursor.map_or(json!({}), |c| json!({"cursor": c})))),
            request(id, "tools/call", Some(json!({"name": name, "arguments": arguments}))),
            request(id, "prompts/get", Some(json!({"name": name}))),
            request(id, &unknown, Some(json!({"any": [name]}))),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ] {
            prop_assert_eq!(answer(fits.to_string().as_bytes())?, None, "{}", fits);
        }
        for misfit in [
            request(id, "tools/call", Some(json!({"name": id, "arguments": arguments}))),
            request(id, "tools/call", Some(json!({"arguments": {}}))),
            request(id, "prompts/get", Some(json!([name]))),
            request(id, "resources/read", Some(json!({"uri": 5}))),
        ] {
            prop_assert_eq!(answer(misfit.to_string().as_bytes())?, Some((INVALID_PARAMS.into(), json!(id))), "{}", misfit);
        }
        // Valid JSON-RPC ids that rmcp cannot carry: the request is refused, not its params.
        for unsupported in [request(too_big, "ping", None), request(fraction, "ping", None)] {
            let got = answer(unsupported.to_string().as_bytes())?;
            prop_assert_eq!(got, Some((INVALID_REQUEST.into(), Value::Null)), "{}", unsupported);
        }
    }

    #[test]
    fn damaged_messages_are_answered_as_their_bytes_deserve(
        id in any::<i64>(),
        at in any::<prop::sample::Index>(),
        how in 0u8..3,
        with in any::<u8>(),
    ) {
        let mut bytes = request(id, "tools/call", Some(json!({"name": "demo.echo", "arguments": {"n": 1}})))
            .to_string()
            .into_bytes();
        let i = at.index(bytes.len());
        match how {
            0 => bytes[i] = with,
            1 => bytes.truncate(i),
            _ => bytes.insert(i, with),
        }
        let got = answer(&bytes)?;
        match serde_json::from_slice::<Value>(&bytes) {
            Err(_) => prop_assert_eq!(got, Some((PARSE_ERROR.into(), Value::Null))),
            Ok(value) => prop_assert_eq!(got, check_value(&value)?),
        }
    }

    #[test]
    /// serde_json reads at most 127 levels; a call's arguments start two levels down.
    fn deep_nesting_is_refused_without_overflowing_the_stack(
        depth in prop_oneof![120usize..135, 1usize..50_000],
    ) {
        let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let expected = if depth <= 127 { INVALID_REQUEST } else { PARSE_ERROR };
        prop_assert_eq!(answer(deep.as_bytes())?, Some((expected.into(), Value::Null)));
        let args = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{args}}}}}"#);
        let got = answer(call.as_bytes())?;
        let expected = (depth > 125).then(|| (PARSE_ERROR.into(), Value::Null));
        prop_assert_eq!(got, expected);
    }
}

/// `tools/call` requests with their params assembled from right and wrong parts: names,
/// arguments, `_meta` (with the revision's keys or others, or not an object), the fields of later
/// revisions, unknown ones; ids of every kind; now and then another method, a result beside the
/// params, or another version.
fn tools_call_message() -> impl Strategy<Value = Value> {
    let meta = prop_oneof![
        Just(json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "c", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        })),
        Just(json!({"progressToken": 3, "dev.gatehouse/idempotency-key": "k"})),
        Just(json!(null)),
        Just(json!([1])),
        any_json(),
    ];
    (
        prop::sample::select(vec![json!("2.0"), json!("2.0"), json!("2.0"), json!("1.0")]),
        prop_oneof![
            any::<i64>().prop_map(|n| json!(n)),
            "[a-z0-9-]{0,12}".prop_map(|s| json!(s)),
            Just(json!(u64::MAX)),
            Just(json!(1.5)),
            Just(json!(null)),
        ],
        prop::sample::select(vec!["tools/call", "tools/call", "tools/call", "tools/list"]),
        prop::option::of(prop_oneof![
            "[a-z.]{0,12}".prop_map(|s| json!(s)),
            Just(json!(7))
        ]),
        prop::option::of(prop_oneof![any_json(), Just(json!({"text": "hi", "n": 1}))]),
        prop::option::of(meta),
        prop::option::of(prop::sample::select(vec![
            ("requestState", json!("opaque")),
            ("inputResponses", json!({})),
            ("task", json!({"ttl": 1000})),
            ("zzz", json!(1)),
        ])),
        prop::option::of(Just(json!({}))),
    )
        .prop_map(
            |(version, id, method, name, arguments, meta, extra, result)| {
                let mut params = Map::new();
                if let Some(name) = name {
                    params.insert("name".into(), name);
                }
                if let Some(arguments) = arguments {
                    params.insert("arguments".into(), arguments);
                }
                if let Some(meta) = meta {
                    params.insert("_meta".into(), meta);
                }
                if let Some((key, value)) = extra {
                    params.insert(key.into(), value);
                }
                let mut message =
                    json!({"jsonrpc": version, "id": id, "method": method, "params": params});
                if let Some(result) = result {
                    message["result"] = result;
                }
                message
            },
        )
}

proptest! {
    #![proptest_config(config(256))]

    /// Whatever the quick reading of a `tools/call` takes, rmcp's own reading takes too and
    /// makes the same message of: the same request, params, `_meta` and id.
    #[test]
    fn the_tools_call_reading_is_rmcps(message in tools_call_message()) {
        let bytes = serde_json::to_vec(&message).unwrap();
        if let Some(quick) = super::tools_call(&bytes) {
            let rmcps = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(&bytes);
            prop_assert!(rmcps.is_ok(), "rmcp refuses {message} ({:?})", rmcps.err());
            let rmcps = rmcps.unwrap();
            prop_assert!(matches!(
                &rmcps,
                rmcp::model::ClientJsonRpcMessage::Request(r)
                    if matches!(r.request, rmcp::model::ClientRequest::CallToolRequest(_))
            ), "rmcp read {message} as {rmcps:?}");
            prop_assert_eq!(
                serde_json::to_value(&quick).unwrap(),
                serde_json::to_value(&rmcps).unwrap(),
                "{}", message
            );
        }
    }
}

#[test]
fn the_tools_call_reading_takes_the_requests_agents_send() {
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "demo.echo", "arguments": {"text": "hi"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
    }});
    assert!(super::tools_call(&serde_json::to_vec(&call).unwrap()).is_some());
}
