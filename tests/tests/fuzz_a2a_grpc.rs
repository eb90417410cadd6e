//! Fuzzes a running node's A2A gRPC binding end to end (`lf.a2a.v1.A2AService/SendMessage`, as
//! an authenticated agent): random bytes, and protobuf encodings of a valid request (its data
//! part's tool a string, a list, or an infinite double; its argument NaN or not) with a byte
//! changed, cut or added. The bytes go on the wire as they are, so the server's own decoder
//! (prost, then a2a-grpc's conversion, then the front) is what is fuzzed.
//!
//! Properties: every request is answered within a deadline with a response or a status, never
//! one that means the server failed (`UNKNOWN`, `UNAVAILABLE`, `CANCELLED`: a panic or a dropped
//! connection); and the node answers a well-formed request afterwards.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_testkit::fuzz;
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::TestCluster;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use prost::Message as _;
use prost::bytes::{Buf, BufMut};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

const KEY: &str = "gate_fuzz-peer-0000000000000000000000000";
/// Longer than any answer of a healthy node: a request still unanswered then hangs.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(fuzz::config(default_cases))
}

#[test]
fn the_grpc_binding_answers_whatever_a_peer_sends() {
    let cluster = TestCluster::new(&[1]).expect("a one-node cluster");
    let resources = vec![
        resource("Tenant", "acme", None, json!({})),
        principal("fuzz-peer", KEY, json!({"acme": ["agent"]}), Some("dana")),
    ];
    let index = cluster
        .block_on(cluster.admin(1).apply(resources))
        .expect("applied");
    cluster
        .wait_for_applied(1, index, ANSWER_WITHIN)
        .expect("caught up");
    let grpc = cluster.block_on(connect(&cluster));
    runner(64)
        .run(&grpc_body(), |bytes| check_grpc(&cluster, &grpc, bytes))
        .unwrap_or_else(|e| panic!("gRPC SendMessage: {e}"));
    // Still serving: a well-formed request is answered (with a task refused: no such tool).
    let valid = encoded(&ProtoValue::text("demo.echo"), false);
    let answer = cluster.block_on(send(&grpc, valid));
    assert!(answer.is_ok(), "{answer:?}");
}

// The A2A gRPC binding's SendMessageRequest, as much of it as a data part needs (lf.a2a.v1).
#[derive(Clone, PartialEq, prost::Message)]
struct SendMessageRequest {
    #[prost(message, optional, tag = "2")]
    message: Option<ProtoMessage>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoMessage {
    #[prost(string, tag = "1")]
    message_id: String,
    #[prost(int32, tag = "4")]
    role: i32,
    #[prost(message, repeated, tag = "5")]
    parts: Vec<ProtoPart>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoPart {
    #[prost(message, optional, tag = "4")]
    data: Option<ProtoValue>,
}
// google.protobuf.Value, Struct and ListValue.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoValue {
    #[prost(oneof = "Kind", tags = "2, 3, 5, 6")]
    kind: Option<Kind>,
}
#[derive(Clone, PartialEq, prost::Oneof)]
enum Kind {
    #[prost(double, tag = "2")]
    Number(f64),
    #[prost(string, tag = "3")]
    Text(String),
    #[prost(message, tag = "5")]
    Struct(ProtoStruct),
    #[prost(message, tag = "6")]
    List(ProtoList),
}
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoStruct {
    #[prost(btree_map = "string, message", tag = "1")]
    fields: BTreeMap<String, ProtoValue>,
}
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoList {
    #[prost(message, repeated, tag = "1")]
    values: Vec<ProtoValue>,
}

impl ProtoValue {
    fn text(s: &str) -> ProtoValue {
        ProtoValue {
            kind: Some(Kind::Text(s.into())),
        }
    }
}

/// A valid request for `tool` with one argument `n` (a double such as NaN, when asked), encoded.
fn encoded(tool: &ProtoValue, nan: bool) -> Vec<u8> {
    let n = ProtoValue {
        kind: Some(Kind::Number(if nan { f64::NAN } else { 1.0 })),
    };
    let arguments = ProtoValue {
        kind: Some(Kind::Struct(ProtoStruct {
            fields: BTreeMap::from([("n".into(), n)]),
        })),
    };
    let data = ProtoStruct {
        fields: BTreeMap::from([
            ("tool".into(), tool.clone()),
            ("arguments".into(), arguments),
        ]),
    };
    let part = ProtoPart {
        data: Some(ProtoValue {
            kind: Some(Kind::Struct(data)),
        }),
    };
    let message = ProtoMessage {
        message_id: "m-fuzz".into(),
        role: 1,
        parts: vec![part],
    };
    SendMessageRequest {
        message: Some(message),
    }
    .encode_to_vec()
}

fn grpc_body() -> impl Strategy<Value = Vec<u8>> {
    let tool = prop_oneof![
        Just(ProtoValue::text("demo.echo")),
        Just(ProtoValue {
            kind: Some(Kind::Number(f64::INFINITY))
        }),
        Just(ProtoValue {
            kind: Some(Kind::List(ProtoList {
                values: vec![ProtoValue::text("a.b")]
            }))
        }),
    ];
    let damaged = (
        tool,
        any::<bool>(),
        any::<prop::sample::Index>(),
        0u8..3,
        any::<u8>(),
    )
        .prop_map(|(tool, nan, at, how, with)| {
            let mut bytes = encoded(&tool, nan);
            let i = at.index(bytes.len());
            match how {
                0 => bytes[i] ^= with | 1,
                1 => bytes.truncate(i),
                _ => bytes.insert(i, with),
            }
            bytes
        });
    prop_oneof![1 => prop::collection::vec(any::<u8>(), 0..200), 3 => damaged]
}

/// Bytes as they are, both ways: what the server makes of them is the point.
#[derive(Debug, Clone, Copy, Default)]
struct Raw;
impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}
impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}
impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

type Grpc = tonic::client::Grpc<tonic::transport::Channel>;

async fn connect(cluster: &TestCluster) -> Grpc {
    let endpoint = format!("http://{}", cluster.addr(1));
    let channel = tonic::transport::Endpoint::from_shared(endpoint).expect("a URI");
    Grpc::new(channel.connect().await.expect("connects"))
}

async fn send(grpc: &Grpc, bytes: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
    let mut grpc = grpc.clone();
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut request = tonic::Request::new(bytes);
    let metadata = request.metadata_mut();
    metadata.insert(
        "authorization",
        format!("Bearer {KEY}").parse().expect("ASCII"),
    );
    metadata.insert("a2a-version", "1.0".parse().expect("ASCII"));
    let path = http::uri::PathAndQuery::from_static("/lf.a2a.v1.A2AService/SendMessage");
    grpc.unary(request, path, Raw)
        .await
        .map(tonic::Response::into_inner)
}

fn check_grpc(cluster: &TestCluster, grpc: &Grpc, bytes: Vec<u8>) -> Result<(), TestCaseError> {
    let answer = cluster
        .block_on(async { tokio::time::timeout(ANSWER_WITHIN, send(grpc, bytes)).await })
        .map_err(|_| TestCaseError::fail("no answer in time"))?;
    if let Err(status) = answer {
        use tonic::Code;
        let failed = matches!(
            status.code(),
            Code::Unknown | Code::Unavailable | Code::Cancelled
        );
        prop_assert!(!failed, "{:?}", status);
    }
    Ok(())
}
