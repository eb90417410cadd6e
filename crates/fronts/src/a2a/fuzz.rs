//! Fuzzes what the A2A front reads out of a peer's message (`task::request_of`: one data part
//! `{"tool": ..., "arguments": {...}}`), through both bindings' own readers: the JSON-RPC
//! binding's ProtoJSON params (`protojson_conv::from_value`, as a2a-server calls it) and the gRPC
//! binding's protobuf conversion (`pbconv`, as a2a-grpc calls it). Messages are generated with a
//! known verdict (how many data parts, a tool name that is blank, padded or not a string,
//! arguments that are an object, absent, null or something else), with odd unicode and deep
//! nesting, and their JSON is damaged at random.
//!
//! Properties: a message is read exactly when it has one data part naming a non-blank tool with
//! object (or absent, or null) arguments, and then gives the trimmed tool and those arguments;
//! anything else is refused as an invalid request that shows the expected shape; both bindings
//! read the same task from the same message (numbers as doubles, which is all
//! `google.protobuf.Value` carries); damaged params are read or refused without a panic, and
//! what is read obeys the same rule.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use super::task::{Request, request_of};
use a2a::{Message, Part, PartContent, Role, SendMessageRequest};
use a2a_pb::{pbconv, protojson_conv};
use gatehouse_gateway::pipeline::ErrorCode;
use gatehouse_testkit::fuzz::config;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn odd_string() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "\\PC{0,12}",
        "[ \t\n\u{a0}\u{85}\u{2028}\u{feff}\u{202e}é𝄞\"\\\\]{0,6}"
    ]
}

/// JSON as `google.protobuf.Value` can carry it exactly: numbers are doubles (integers within
/// 2^53 stay exact), a few levels deep.
fn json_value() -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|n| json!(n as f64)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        odd_string().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(odd_string(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(odd_string(), json_value(), 0..5)
        .prop_map(|m| m.into_iter().collect())
}

/// A data part's value and what reading it must give: the task, or `None` for a refusal.
fn data_part() -> impl Strategy<Value = (Value, Option<Request>)> {
    let tool = prop_oneof![
        ("[ \t]{0,2}", "[a-z]{1,8}\\.[A-Za-z_]{1,8}", "[ \t\n]{0,2}")
            .prop_map(|(a, t, b)| (Some(json!(format!("{a}{t}{b}"))), Some(t))),
        "[ \t\n\u{a0}\u{2028}]{0,4}".prop_map(|blank| (Some(json!(blank)), None)),
        prop_oneof![
            Just(json!(7)),
            Just(json!(null)),
            Just(json!(["a.b"])),
            Just(json!({"name": "a.b"}))
        ]
        .prop_map(|v| (Some(v), None)),
        Just((None, None)),
    ];
    let arguments = prop_oneof![
        object().prop_map(|o| (Some(Value::Object(o.clone())), Some(Value::Object(o)))),
        Just((None, Some(json!({})))),
        Just((Some(Value::Null), Some(json!({})))),
        json_value()
            .prop_filter("not an object", |v| !v.is_object() && !v.is_null())
            .prop_map(|v| (Some(v), None)),
    ];
    (tool, arguments, object()).prop_map(|((tool, name), (args, read_args), extra)| {
        let mut data: Map<String, Value> = extra
            .into_iter()
            .filter(|(k, _)| k != "tool" && k != "arguments")
            .collect();
        data.extend(tool.map(|t| ("tool".to_owned(), t)));
        data.extend(args.map(|a| ("arguments".to_owned(), a)));
        let read = name
            .zip(read_args)
            .map(|(tool, arguments)| Request { tool, arguments });
        (Value::Object(data), read)
    })
}

fn other_part() -> impl Strategy<Value = Part> {
    prop_oneof![
        odd_string().prop_map(Part::text),
        odd_string().prop_map(|u| Part {
            content: PartContent::Url(u),
            ..Part::text("")
        }),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|r| Part {
            content: PartContent::Raw(r),
            ..Part::text("")
        }),
    ]
}

/// A message of other parts and 0 to 3 data parts, and what reading it must give.
fn message() -> impl Strategy<Value = (Message, Option<Request>)> {
    (
        prop::collection::vec(other_part(), 0..3),
        prop::collection::vec(data_part(), 0..4),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(mut parts, data, at)| {
            let read = match data.as_slice() {
                [(_, read)] => read.clone(),
                _ => None,
            };
            for (value, _) in data {
                parts.insert(at.index(parts.len() + 1), Part::data(value));
            }
            let mut message = Message::new(Role::User, parts);
            message.message_id = "m-1".into();
            (message, read)
        })
}

fn check(
    read: Result<Request, gatehouse_gateway::pipeline::GatewayError>,
    expected: &Option<Request>,
) -> Result<(), TestCaseError> {
    match (read, expected) {
        (Ok(read), Some(expected)) => prop_assert_eq!(&read, expected),
        (Err(e), None) => {
            prop_assert_eq!(e.code, ErrorCode::InvalidRequest);
            prop_assert!(
                e.message.contains("\"tool\": \"upstream.tool\""),
                "{}",
                e.message
            );
        }
        (read, expected) => prop_assert!(false, "read {:?}, expected {:?}", read, expected),
    }
    Ok(())
}

/// What the rule says of any message: the reference the damaged inputs are held to.
fn rule(message: &Message) -> Option<Request> {
    let data: Vec<&Value> = message
        .parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Data(v) => Some(v),
            _ => None,
        })
        .collect();
    let [one] = data.as_slice() else { return None };
    let tool = one.get("tool")?.as_str()?.trim();
    let arguments = match one.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args.clone(),
        Some(_) => return None,
    };
    (!tool.is_empty()).then(|| Request {
        tool: tool.to_owned(),
        arguments,
    })
}

fn request(message: Message) -> SendMessageRequest {
    SendMessageRequest {
        message,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// Replaces the node at `path` (indexes into objects and arrays, as far as they go) with `with`.
fn replace(value: &mut Value, path: &[prop::sample::Index], with: Value) {
    let next = match value {
        Value::Object(m) if !m.is_empty() && !path.is_empty() => {
            let key = m.keys().nth(path[0].index(m.len())).cloned();
            key.and_then(|k| m.get_mut(&k))
        }
        Value::Array(a) if !a.is_empty() && !path.is_empty() => {
            let i = path[0].index(a.len());
            a.get_mut(i)
        }
        _ => None,
    };
    match next {
        Some(child) => replace(child, &path[1..], with),
        None => *value = with,
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn a_message_is_read_exactly_when_it_holds_one_well_formed_data_part((message, expected) in message()) {
        check(request_of(&message), &expected)?;
    }

    #[test]
    fn both_bindings_read_the_same_task((message, expected) in message()) {
        let sent = request(message);
        let params = protojson_conv::to_value(&sent).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let over_json: SendMessageRequest = protojson_conv::from_value(params).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(request_of(&over_json.message), &expected)?;
        let over_grpc = pbconv::from_proto_send_message_request(&pbconv::to_proto_send_message_request(&sent));
        check(request_of(&over_grpc.message), &expected)?;
    }

    #[test]
    fn damaged_params_are_read_or_refused_by_the_same_rule(
        (message, _) in message(),
        path in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        with in json_value(),
        depth in 0usize..64,
    ) {
        let mut params = protojson_conv::to_value(&request(message)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Two levels a step: up to what the JSON-RPC envelope's reader lets through (127).
        let mut deep = with;
        for _ in 0..depth {
            deep = json!({"a": [deep]});
        }
        replace(&mut params, &path, deep);
        if let Ok(read) = protojson_conv::from_value::<SendMessageRequest>(params) {
            check(request_of(&read.message), &rule(&read.message))?;
        }
    }
}
