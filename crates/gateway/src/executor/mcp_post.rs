//! A `tools/call` posted to an MCP upstream by the calling task (`mcp.rs` says when), and its
//! answer read from the response. The answer to a `tools/call` is read as what the spec says it
//! is, a `CallToolResult`, instead of as rmcp's `ServerJsonRpcMessage`, whose untagged enums are
//! tried one variant after another (about 5 us of a call's CPU; README, "The MCP front"). The
//! request is built once per session (`Direct` in `mcp.rs`), not through rmcp's per-call
//! request building, and posted on the calling thread's keep-alive connections (`keep_alive.rs`)
//! rather than through reqwest, whose layers turned the request's URI back into text and parsed
//! it again on every call (redirect and retry policies, the URL conversion; about a twentieth of
//! the gateway's CPU per call).

use super::as_sent;
use super::keep_alive;
use super::mcp::Called;
use crate::error::sentence;
use bytes::Bytes;
use futures::StreamExt;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rmcp::model::{CallToolResult, ErrorData, JsonRpcVersion2_0, RequestId};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use sse_stream::SseStream;
use std::io;

/// The most of a JSON answer, or of a call's whole event stream, that is read (rmcp's client
/// bounds a JSON answer, and each event, by the same).
pub(super) const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// The most of an error status's body that is read for a JSON-RPC error in it.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// The most of an error body that goes into the failure's message.
const SHOWN_ERROR_BODY: usize = 512;

/// The `Host` header of requests to `url`, as hyper's client writes it when a request has none:
/// the host, and the port unless it is the scheme's own. Made once per session and carried in
/// its headers, so the client does not format it again for every call.
pub(super) fn host(url: &Uri) -> Option<HeaderValue> {
    let host = url.host()?;
    let default_port = match url.scheme_str() {
        Some("https" | "wss") => 443,
        _ => 80,
    };
    match url.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    }
    .ok()
}

/// Where a call goes and the headers it carries (`Accept`, `Content-Type`, the protocol version,
/// the session id, the credential).
pub(super) struct Target<'a> {
    pub url: &'a Uri,
    pub headers: &'a HeaderMap,
    /// The request names a session: a 404 means the upstream forgot it.
    pub in_session: bool,
}

/// Posts `body` (the JSON-RPC request `id`) on a keep-alive connection of this thread's, and
/// reads what came of it.
pub(super) async fn post(to: Target<'_>, id: &RequestId, body: Vec<u8>) -> Called {
    // Origin-form, as HTTP/1.1 sends a request to a server (the `Host` is in the headers).
    let path = to
        .url
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let mut request = Request::post(Uri::from(path));
    if let Some(headers) = request.headers_mut() {
        headers.clone_from(to.headers);
    }
    let request = match request.body(Full::new(Bytes::from(body))) {
        Ok(request) => request,
        Err(e) => return Called::Failed(format!("building the request: {e}")),
    };
    match keep_alive::send(to.url, request).await {
        Ok((response, connection)) => {
            let called = read_answer(id, response, to.in_session).await;
            keep_alive::keep(connection);
            called
        }
        Err(e) => Called::Failed(sentence(&e)),
    }
}

/// The next piece of the body, trailers skipped.
async fn next_chunk(body: &mut Incoming) -> Result<Option<Bytes>, hyper::Error> {
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            return Ok(Some(data));
        }
    }
    Ok(None)
}

/// The call's answer in the upstream's response: a JSON body, or the first event of a stream
/// that answers this call (notifications, the server's requests and other answers are
/// skipped).
async fn read_answer(id: &RequestId, response: Response<Incoming>, in_session: bool) -> Called {
    let (head, mut body) = response.into_parts();
    let status = head.status;
    if status == StatusCode::NOT_FOUND && in_session {
        return Called::Expired;
    }
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Called::Failed("the upstream accepted the call without answering it".into());
    }
    let content_type = head
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let json = content_type.starts_with("application/json");
    if !status.is_success() {
        let (read, whole) = Box::pin(read_prefix(&mut body, MAX_ERROR_BODY)).await;
        // A JSON-RPC error for this call is the upstream's refusal of it.
        if json
            && whole
            && let Some(refused @ Called::Refused(_)) = answer_in(id, &read)
        {
            return refused;
        }
        let shown = String::from_utf8_lossy(&read[..read.len().min(SHOWN_ERROR_BODY)]);
        let cut = if whole && read.len() <= SHOWN_ERROR_BODY {
            ""
        } else {
            " (cut short)"
        };
        return Called::Failed(format!("HTTP {status}: {shown}{cut}"));
    }
    if json {
        return match read_body(&mut body, MAX_ANSWER).await {
            Ok(read) => answer_in(id, &read)
                .unwrap_or_else(|| Called::Failed("the upstream answered another request".into())),
            Err(e) => Called::Failed(e.to_string()),
        };
    }
    if content_type.starts_with("text/event-stream") {
        // Boxed: a stream's reader is far larger a future than a JSON body's, and every call's
        // future would otherwise have room for it.
        return Box::pin(answer_in_stream(id, body)).await;
    }
    Called::Failed(format!(
        "the upstream answered with content type {content_type:?}"
    ))
}

/// Room made up front for a body of declared length: what the upstream declares is not trusted
/// with more.
const PREALLOCATED: usize = 64 * 1024;

/// The response's body, refused past `max` bytes.
async fn read_body(response: &mut Incoming, max: usize) -> io::Result<Vec<u8>> {
    let declared = hyper::body::Body::size_hint(response).exact().unwrap_or(0);
    let declared = usize::try_from(declared).unwrap_or(usize::MAX);
    let mut body = Vec::with_capacity(declared.min(max).min(PREALLOCATED));
    while let Some(chunk) = next_chunk(response).await.map_err(io::Error::other)? {
        if body.len() + chunk.len() > max {
            return Err(too_large(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `max` bytes of the response's body, and whether that is all of it. A body
/// that is too long, or that breaks off, still says what it said until then.
async fn read_prefix(response: &mut Incoming, max: usize) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        match next_chunk(response).await {
            Ok(Some(chunk)) if body.len() + chunk.len() > max => {
                body.extend_from_slice(&chunk[..max - body.len()]);
                return (body, false);
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return (body, true),
            Err(_) => return (body, false),
        }
    }
}

fn too_large(max: usize) -> io::Error {
    io::Error::other(format!("the upstream's answer is larger than {max} bytes"))
}

/// The first event of the stream that answers the call; the stream is read up to
/// [`MAX_ANSWER`] bytes in all.
async fn answer_in_stream(id: &RequestId, response: Incoming) -> Called {
    let chunks = futures::stream::unfold((Some(response), 0usize), |(response, read)| async move {
        let mut response = response?;
        let chunk: io::Result<_> = match next_chunk(&mut response).await {
            Ok(Some(chunk)) if read + chunk.len() > MAX_ANSWER => Err(too_large(MAX_ANSWER)),
            Ok(Some(chunk)) => {
                let read = read + chunk.len();
                return Some((Ok(chunk), (Some(response), read)));
            }
            Ok(None) => return None,
            Err(e) => Err(io::Error::other(e)),
        };
        Some((chunk, (None, read)))
    });
    let mut events = std::pin::pin!(SseStream::from_bytes_stream(chunks));
    while let Some(event) = events.next().await {
        let data = match event {
            Ok(event) => event.data,
            Err(e) => return Called::Failed(format!("reading the upstream's stream: {e}")),
        };
        if let Some(called) = data.and_then(|data| answer_in(id, data.as_bytes())) {
            return called;
        }
    }
    Called::Failed("the upstream's stream ended without an answer".into())
}

/// One JSON-RPC message from the upstream, as far as telling this call's answer needs.
#[derive(Deserialize)]
struct Message<'a> {
    #[allow(dead_code)]
    jsonrpc: JsonRpcVersion2_0,
    id: Option<RequestId>,
    /// Present on a request or notification of the server's, which answers nothing.
    method: Option<IgnoredAny>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    error: Option<ErrorData>,
}

/// The call `id`'s answer in one message: its result (a `CallToolResult`, or a failure when it
/// is not one), or its JSON-RPC error. `None` when the message answers nothing of it: a
/// notification, a request of the server's, another request's answer, or not JSON-RPC at all.
pub(super) fn answer_in(id: &RequestId, message: &[u8]) -> Option<Called> {
    let message: Message<'_> = serde_json::from_slice(message).ok()?;
    if message.method.is_some() || message.id.as_ref() != Some(id) {
        return None;
    }
    match (message.result, message.error) {
        (Some(result), None) => Some(match as_sent::plain(result.get()) {
            Some(output) => Called::AnsweredAsSent(output),
            None => match serde_json::from_str::<CallToolResult>(result.get()) {
                Ok(result) => Called::Answered(result),
                Err(_) => Called::Failed(
                    "the upstream answered tools/call with another kind of result".into(),
                ),
            },
        }),
        (None, Some(error)) => Some(Called::Refused(error)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ServerJsonRpcMessage, ServerResult};
    use serde_json::json;

    fn id() -> RequestId {
        RequestId::String("gatehouse-7".into())
    }

    fn read(message: serde_json::Value) -> Option<Called> {
        answer_in(&id(), message.to_string().as_bytes())
    }

    /// What rmcp's client makes of the same message, for a result it takes for a tool's.
    fn as_rmcp_reads_it(message: &serde_json::Value) -> CallToolResult {
        match serde_json::from_value::<ServerJsonRpcMessage>(message.clone()).unwrap() {
            ServerJsonRpcMessage::Response(r) => match r.result {
                ServerResult::CallToolResult(result) => result,
                other => panic!("rmcp read {other:?}"),
            },
            other => panic!("rmcp read {other:?}"),
        }
    }

    #[test]
    fn a_tools_answer_is_read_as_rmcp_reads_it() {
        for result in [
            json!({"content": [{"type": "text", "text": "hi"}]}),
            json!({"content": [{"type": "text", "text": "no"}], "isError": true}),
            json!({"content": [], "structuredContent": {"n": 1}, "_meta": {"k": "v"}}),
            json!({"structuredContent": null}),
            json!({"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]}),
        ] {
            let message = json!({"jsonrpc": "2.0", "id": "gatehouse-7", "result": result});
            let read = match read(message.clone()) {
                Some(Called::Answered(read)) => read,
                // Kept as sent: the text must read as rmcp reads the answer's result.
                Some(Called::AnsweredAsSent(output)) => {
                    assert_eq!(output.result_json, result.to_string());
                    assert_eq!(output.is_error, result["isError"] == true);
                    serde_json::from_str(&output.result_json).unwrap()
                }
                _ => panic!("{message} was not read as an answer"),
            };
            assert_eq!(read, as_rmcp_reads_it(&message), "{message}");
        }
    }

    #[test]
    fn a_plain_text_answer_is_kept_as_the_upstream_wrote_it() {
        let result = r#"{"content":[{"type":"text","text":"caf\u00e9"}],"structuredContent":{"n":2.5e-7},"isError":false}"#;
        let message = format!(r#"{{"jsonrpc":"2.0","id":"gatehouse-7","result":{result}}}"#);
        let Some(Called::AnsweredAsSent(output)) = answer_in(&id(), message.as_bytes()) else {
            panic!("{message} was not kept as sent");
        };
        assert_eq!(output.result_json, result);
        assert!(!output.is_error);
    }

    /// Posts a call to a loopback upstream that answers every request with `status`, `content
    /// type` and `body`, and reads the answer as a call does.
    async fn answered_with(status: u16, content_type: &'static str, body: Vec<u8>) -> Called {
        let app = axum::Router::new().fallback(move || {
            let body = body.clone();
            async move {
                let status = axum::http::StatusCode::from_u16(status).unwrap();
                (
                    status,
                    [(axum::http::header::CONTENT_TYPE, content_type)],
                    body,
                )
            }
        });
        let url = serve(app, "/mcp").await;
        posted(&url, &HeaderMap::new()).await
    }

    /// A call posted to `url` with `headers`, as the executor posts it.
    async fn posted(url: &Uri, headers: &HeaderMap) -> Called {
        let to = Target {
            url,
            headers,
            in_session: false,
        };
        post(to, &id(), b"{}".to_vec()).await
    }

    #[tokio::test]
    async fn an_error_status_says_what_its_body_began_with_however_long_the_body_is() {
        let long = "the database is down; ".repeat(10_000).into_bytes();
        assert!(long.len() > MAX_ERROR_BODY);
        let Called::Failed(why) = answered_with(500, "text/plain", long).await else {
            panic!("an error status is a failure");
        };
        assert!(
            why.starts_with("HTTP 500 Internal Server Error: the database is down; the database"),
            "{why}"
        );
        assert!(why.ends_with(" (cut short)"), "{why}");
        assert!(why.len() < SHOWN_ERROR_BODY + 100, "{} bytes", why.len());

        let Called::Failed(why) = answered_with(503, "text/plain", b"try later".to_vec()).await
        else {
            panic!("an error status is a failure");
        };
        assert_eq!(why, "HTTP 503 Service Unavailable: try later");
    }

    #[tokio::test]
    async fn a_json_rpc_error_in_an_error_status_is_the_upstreams_refusal_unless_cut_short() {
        let error = json!({"jsonrpc": "2.0", "id": "gatehouse-7",
            "error": {"code": -32602, "message": "bad arguments"}});
        let body = error.to_string().into_bytes();
        let Called::Refused(e) = answered_with(400, "application/json", body).await else {
            panic!("a JSON-RPC error for this call is its refusal");
        };
        assert_eq!(e.message, "bad arguments");

        // Past what is read, the same error cannot be told from a body that breaks off.
        let padded = json!({"jsonrpc": "2.0", "id": "gatehouse-7",
            "error": {"code": -32602, "message": "bad arguments",
                      "data": "x".repeat(MAX_ERROR_BODY)}});
        let body = padded.to_string().into_bytes();
        let Called::Failed(why) = answered_with(400, "application/json", body).await else {
            panic!("a body cut short is not read as a refusal");
        };
        assert!(why.starts_with("HTTP 400 Bad Request: {"), "{why}");
        assert!(why.ends_with(" (cut short)"), "{why}");
    }

    #[test]
    fn only_this_calls_own_answer_or_error_counts() {
        let other_id = json!({"jsonrpc": "2.0", "id": "gatehouse-8", "result": {"content": []}});
        assert!(read(other_id).is_none());
        let numeric = json!({"jsonrpc": "2.0", "id": 7, "result": {"content": []}});
        assert!(read(numeric).is_none());
        let servers_request = json!({"jsonrpc": "2.0", "id": "gatehouse-7", "method": "ping"});
        assert!(read(servers_request).is_none());
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/progress"});
        assert!(read(notification).is_none());
        let not_json_rpc =
            json!({"jsonrpc": "1.0", "id": "gatehouse-7", "result": {"content": []}});
        assert!(read(not_json_rpc).is_none());
        assert!(answer_in(&id(), b"not json").is_none());

        let error = json!({"jsonrpc": "2.0", "id": "gatehouse-7",
            "error": {"code": -32602, "message": "bad arguments"}});
        let Some(Called::Refused(e)) = read(error) else {
            panic!("an error for this call is its refusal");
        };
        assert_eq!(e.message, "bad arguments");

        let listing = json!({"jsonrpc": "2.0", "id": "gatehouse-7", "result": {"tools": []}});
        let Some(Called::Failed(why)) = read(listing) else {
            panic!("a result that is no tool's result is a failure");
        };
        assert!(why.contains("another kind of result"), "{why}");
    }

    /// Serves `app` on a loopback port; its URL with `path`.
    async fn serve(app: axum::Router, path: &str) -> Uri {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}{path}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        url.parse().unwrap()
    }

    #[tokio::test]
    async fn an_upstream_that_redirects_is_not_followed_and_the_credential_stays_put() {
        // Where a hostile upstream points the gateway: it counts what reaches it.
        let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = reached.clone();
        let elsewhere = serve(
            axum::Router::new().fallback(move || {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "{}" }
            }),
            "/steal",
        )
        .await;
        let location = elsewhere.to_string();
        let upstream = serve(
            axum::Router::new().fallback(move || {
                let location = location.clone();
                async move {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, location)],
                    )
                }
            }),
            "/mcp",
        )
        .await;
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer upstream-secret"),
        );
        let Called::Failed(why) = posted(&upstream, &headers).await else {
            panic!("a redirect answers nothing");
        };
        assert!(why.starts_with("HTTP 307"), "{why}");
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn the_host_header_names_the_port_unless_it_is_the_schemes_own() {
        for (url, expected) in [
            ("http://127.0.0.1:8080/mcp", "127.0.0.1:8080"),
            ("http://up.example/mcp", "up.example"),
            ("http://up.example:80/mcp", "up.example"),
            ("http://up.example:443/mcp", "up.example:443"),
            ("https://up.example:443/mcp", "up.example"),
            ("https://up.example:80/mcp", "up.example:80"),
            ("http://[::1]:9000/mcp", "[::1]:9000"),
            ("http://user:secret@up.example:81/mcp", "up.example:81"),
        ] {
            let url: Uri = url.parse().unwrap();
            assert_eq!(host(&url).unwrap(), expected, "{url}");
        }
    }

    #[tokio::test]
    async fn a_call_carrying_its_sessions_host_reaches_the_upstream_with_that_host_once() {
        let app = axum::Router::new().fallback(|headers: HeaderMap| async move {
            let hosts: Vec<_> = headers.get_all(http::header::HOST).iter().collect();
            let result = json!({"content": [{"type": "text", "text": format!("{hosts:?}")}]});
            axum::Json(json!({"jsonrpc": "2.0", "id": "gatehouse-7", "result": result}))
        });
        let url = serve(app, "/mcp").await;
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HOST, host(&url).unwrap());
        let Called::AnsweredAsSent(output) = posted(&url, &headers).await else {
            panic!("the upstream answers");
        };
        let seen =
            serde_json::from_str::<serde_json::Value>(&output.result_json).unwrap()["content"]
                .clone();
        let authority = url.authority().unwrap().as_str();
        assert_eq!(seen[0]["text"], format!("[{authority:?}]"));
    }

    #[tokio::test]
    async fn an_upstream_that_is_not_listening_is_a_failure_that_says_why() {
        // A port that was just free: nothing listens on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url: Uri = format!("http://127.0.0.1:{port}/mcp").parse().unwrap();
        let Called::Failed(why) = posted(&url, &HeaderMap::new()).await else {
            panic!("no upstream, no answer");
        };
        assert!(why.to_lowercase().contains("connect"), "{why}");
        assert!(why.to_lowercase().contains("refused"), "{why}");
    }
}
