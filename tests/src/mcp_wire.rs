//! `RawMcp`: MCP as bytes on the wire, for tests that must send what a well-behaved client
//! never would (malformed JSON-RPC, oversized bodies, no credentials) and for the benchmark's
//! load generator, which must cost the client as little as possible.
//!
//! It speaks the 2026-07-28 revision statelessly: every request carries `MCP-Protocol-Version`,
//! `Mcp-Method` (and `Mcp-Name` for a named target), and in `params._meta` the protocol version,
//! client info and client capabilities, so no `initialize` is needed. One `reqwest::Client`
//! keeps its connections alive across requests.

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

/// The stateless revision.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// One HTTP answer: status, and the JSON-RPC message it carried (`Value::Null` if the body was
/// empty or not JSON; then `text` says what it was).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub message: Value,
    pub text: String,
}

impl Answer {
    /// The JSON-RPC `result`, or an error naming the JSON-RPC error or the status.
    pub fn result(&self) -> anyhow::Result<&Value> {
        if let Some(result) = self.message.get("result") {
            return Ok(result);
        }
        bail!("no result (HTTP {}): {}", self.status, self.text)
    }

    /// The JSON-RPC error code, if the answer was an error.
    pub fn error_code(&self) -> Option<i64> {
        self.message
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_i64)
    }
}

#[derive(Debug)]
pub struct RawMcp {
    http: reqwest::Client,
    url: String,
    key: Option<String>,
    next_id: AtomicU64,
}

impl RawMcp {
    /// A client of the MCP endpoint `url`, sending `key` as `Authorization: Bearer` if given.
    pub fn new(url: &str, key: Option<&str>) -> RawMcp {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()
            .expect("an HTTP client");
        RawMcp {
            http,
            url: url.to_owned(),
            key: key.map(str::to_owned),
            next_id: AtomicU64::new(1),
        }
    }

    /// The same endpoint with another key (or none), sharing nothing.
    pub fn with_key(&self, key: Option<&str>) -> RawMcp {
        RawMcp::new(&self.url, key)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A complete request body for `method` with `params`, the per-request metadata added.
    pub fn body(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut params = match params {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let meta = params
            .entry("_meta")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .expect("_meta is an object");
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            PROTOCOL_VERSION.into(),
        );
        meta.insert(
            "io.modelcontextprotocol/clientInfo".into(),
            json!({"name": "gatehouse-tests", "version": "0"}),
        );
        // A request may declare capabilities of its own (the tasks extension, say).
        meta.entry("io.modelcontextprotocol/clientCapabilities")
            .or_insert_with(|| json!({}));
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Sends a JSON-RPC request and reads its answer.
    pub async fn request(&self, method: &str, params: Value) -> anyhow::Result<Answer> {
        let body = self.body(method, params);
        // The target the revision names in `Mcp-Name`: a tool's or prompt's name, a resource's
        // URI, a task's id.
        let name = ["name", "uri", "taskId"]
            .iter()
            .find_map(|field| body["params"][field].as_str())
            .map(str::to_owned);
        let bytes = serde_json::to_vec(&body)?;
        self.post(method, name.as_deref(), bytes, true).await
    }

    pub async fn list_tools(&self) -> anyhow::Result<Answer> {
        self.request("tools/list", json!({})).await
    }

    pub async fn call_tool(&self, name: &str, arguments: Value) -> anyhow::Result<Answer> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// POSTs `body` as it is, with the headers a stateless request of `method` carries
    /// (`Mcp-Name` if `name` is given) and the key if `with_key`.
    pub async fn post(
        &self,
        method: &str,
        name: Option<&str>,
        body: Vec<u8>,
        with_key: bool,
    ) -> anyhow::Result<Answer> {
        let mut request = self
            .http
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", PROTOCOL_VERSION)
            .header("Mcp-Method", method);
        if let Some(name) = name {
            request = request.header("Mcp-Name", header_value(name));
        }
        if let (true, Some(key)) = (with_key, &self.key) {
            request = request.bearer_auth(key);
        }
        let response = request
            .body(body)
            .send()
            .await
            .with_context(|| format!("POST {}", self.url))?;
        let status = response.status().as_u16();
        let event_stream = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let text = response.text().await?;
        let message = if event_stream {
            last_event_message(&text)
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        Ok(Answer {
            status,
            message,
            text,
        })
    }
}

impl RawMcp {
    /// POSTs only the headers of a request that declares `declared` body bytes, and reads the
    /// status the server answers without waiting for the body. A server that refuses an
    /// oversized body by its declared length answers at once; sending the body itself would
    /// race the server closing the connection.
    pub async fn declared_length_status(&self, declared: usize) -> anyhow::Result<u16> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = self.url.strip_prefix("http://").context("an http:// URL")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        let mut head = format!(
            "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n\
             MCP-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Length: {declared}\r\n"
        );
        if let Some(key) = &self.key {
            head.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        let mut answer = [0u8; 64];
        let mut read = 0;
        while read < 12 {
            let n = stream.read(&mut answer[read..]).await?;
            if n == 0 {
                bail!("the server closed the connection without an answer");
            }
            read += n;
        }
        let line = String::from_utf8_lossy(&answer[..read]);
        line.get(9..12)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("not an HTTP status line: {line:?}"))
    }
}

/// As rmcp's client writes `Mcp-Name`: as it is if it is printable ASCII without leading or
/// trailing blanks, otherwise base64 in `=?base64?...?=`.
fn header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && !value.starts_with("=?base64?");
    if plain {
        value.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(value))
    }
}

/// The last JSON-RPC response in an SSE body: the final answer to the request.
fn last_event_message(text: &str) -> Value {
    let mut last = Value::Null;
    for event in text.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        if data.is_empty() {
            continue;
        }
        if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n"))
            && (message.get("result").is_some() || message.get("error").is_some())
        {
            last = message;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stateless_body_carries_the_per_request_metadata() {
        let client = RawMcp::new("http://127.0.0.1:1/mcp", None);
        let body = client.body("tools/call", json!({"name": "echo", "arguments": {}}));
        let meta = &body["params"]["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert!(meta["io.modelcontextprotocol/clientCapabilities"].is_object());
        assert_eq!(body["params"]["name"], "echo");
        let again = client.body("tools/list", json!({}));
        assert_ne!(body["id"], again["id"], "every request gets its own id");
    }

    #[test]
    fn the_last_response_of_an_event_stream_is_the_answer() {
        let text = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n\
                    data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"ok\":true}}\n\n";
        assert_eq!(last_event_message(text)["result"]["ok"], true);
        assert_eq!(last_event_message("data: not json\n\n"), Value::Null);
    }

    #[test]
    fn names_outside_printable_ascii_go_as_base64() {
        assert_eq!(header_value("demo.echo"), "demo.echo");
        assert_eq!(header_value("é"), "=?base64?w6k=?=");
    }
}
