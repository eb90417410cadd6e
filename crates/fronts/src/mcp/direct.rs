//! Stateless `tools/call`s answered straight from the `/mcp` route. rmcp serves every stateless
//! request by building a service for it, spawning that service's tasks and passing the message
//! through a one-shot transport; for the request agents send most, a `tools/call` of MCP
//! 2026-07-28, that machinery cost more than the call's own work.
//!
//! The direct path takes only requests rmcp would accept and hand to the handler's `tools/call`
//! as they are, runs them through the same code (`handler::run_call`) and writes the same
//! JSON-RPC response. Whatever it is not sure of goes to rmcp, which answers it as before: a
//! session id, an `Origin`, an `Accept` with parameters, a header given twice, an `Mcp-Name` in
//! base64, any `Mcp-Param-*`, another revision, incomplete request metadata, the gateway's own
//! tools. `tests/tests/t60_mcp_front.rs` sends one corpus both ways and compares the answers.

use super::Front;
use super::guard::Agent;
use super::handler::{Ran, run_call};
use super::render;
use super::tools::is_gateway_tool;
use axum::http::request::Parts;
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, GetMeta, ProtocolVersion,
    RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use std::sync::Arc;

// The names as `HeaderName`s, so that looking one up does not read the name's text again.
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");

/// The one revision the direct path answers.
const REVISION: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// A `tools/call` the direct path answers: its id, its params, and its `_meta`.
pub struct DirectCall {
    id: RequestId,
    params: CallToolRequestParams,
    meta: RequestMetaObject,
}

/// `message` as a call the direct path answers, when it and the request's headers are what
/// rmcp would accept and hand to the handler unchanged.
pub fn take(front: &Front, parts: &Parts, message: ClientJsonRpcMessage) -> Option<DirectCall> {
    if !front.settings.direct_calls || !headers_fit(&front.hosts, &parts.headers) {
        return None;
    }
    let ClientJsonRpcMessage::Request(request) = message else {
        return None;
    };
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return None;
    };
    let name = call.params.name.as_ref();
    let meta = request.request.get_meta();
    let fits = !is_gateway_tool(name)
        && only(&parts.headers, &MCP_NAME) == Some(name)
        && !name.starts_with("=?")
        && meta.protocol_version() == Some(REVISION)
        && meta.missing_required_keys(&REVISION).is_empty();
    if !fits {
        return None;
    }
    let mut call = request.request;
    // As rmcp's service does: the request's `_meta` becomes the handler's context.
    let meta = std::mem::take(call.get_meta_mut());
    let ClientRequest::CallToolRequest(call) = call else {
        return None;
    };
    Some(DirectCall {
        id: request.id,
        params: call.params,
        meta,
    })
}

/// Answers `call` as rmcp would: one JSON-RPC response, as `application/json`. A result an
/// executor just made is passed through as it is (`render::passed_through`).
pub async fn answer(
    front: &Arc<Front>,
    agent: &Agent,
    headers: &HeaderMap,
    call: DirectCall,
) -> Response {
    let DirectCall { id, params, meta } = call;
    let tasks_declared = meta
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks());
    let ran = run_call(front, agent, params, &meta, Some(headers), tasks_declared).await;
    if let Ran::Settled(envelope) = &ran
        && let Some(body) = render::passed_through(&id, envelope)
    {
        return json_response(body);
    }
    let response = ran.into_response();
    let message = ServerJsonRpcMessage::response(ServerResult::from(response), id);
    match serde_json::to_vec(&message) {
        Ok(body) => json_response(body),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("serializing the answer: {e}\n"),
        )
            .into_response(),
    }
}

fn json_response(body: Vec<u8>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The headers of a stateless 2026-07-28 `tools/call` that rmcp accepts, each given once.
fn headers_fit(hosts: &AllowedHosts, headers: &HeaderMap) -> bool {
    !headers.contains_key(&MCP_SESSION_ID)
        && !headers.contains_key(header::ORIGIN)
        && !headers
            .keys()
            .any(|name| name.as_str().starts_with("mcp-param-"))
        && only(headers, &MCP_PROTOCOL_VERSION) == Some(REVISION.as_str())
        && only(headers, &MCP_METHOD) == Some("tools/call")
        && only(headers, &header::CONTENT_TYPE).is_some_and(is_json)
        && only(headers, &header::ACCEPT).is_some_and(accepts_json_and_events)
        && only(headers, &header::HOST).is_some_and(|host| hosts.allow(host))
}

/// The header's value, when it is given exactly once and is visible ASCII.
fn only<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split_once(';')
        .map_or(content_type, |(essence, _)| essence);
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// Both media types named, with no parameters anywhere (a weight, say, is rmcp's to read).
fn accepts_json_and_events(accept: &str) -> bool {
    if accept.contains(';') || accept.contains('"') {
        return false;
    }
    let named = |wanted: &str| {
        accept
            .split(',')
            .any(|entry| entry.trim().eq_ignore_ascii_case(wanted))
    };
    named("application/json") && named("text/event-stream")
}

/// The hosts `/mcp` answers, read once from `McpSettings::allowed_hosts` by rmcp's rule: any
/// host when the list is empty or disabled (`*`), else a listed host, on the listed port when
/// the entry names one. Names are compared ignoring ASCII case.
#[derive(Debug)]
pub struct AllowedHosts {
    /// `None`: any host.
    listed: Option<Vec<(String, Option<u16>)>>,
}

impl AllowedHosts {
    pub fn new(entries: &[String]) -> AllowedHosts {
        if entries.is_empty() || entries.iter().any(|entry| entry == "*") {
            return AllowedHosts { listed: None };
        }
        let listed = entries
            .iter()
            .map(|entry| entry.trim())
            .filter(|entry| !entry.is_empty())
            .map(|entry| match Authority::try_from(entry) {
                Ok(authority) => (
                    unbracketed(authority.host()).to_owned(),
                    authority.port_u16(),
                ),
                Err(_) => (unbracketed(entry).to_owned(), None),
            })
            .collect();
        AllowedHosts {
            listed: Some(listed),
        }
    }

    /// Whether a request with this `Host` header is answered.
    pub fn allow(&self, host: &str) -> bool {
        let Some(listed) = &self.listed else {
            return true;
        };
        let Ok(host) = Authority::try_from(host) else {
            return false;
        };
        let (name, port) = (unbracketed(host.host()), host.port_u16());
        listed.iter().any(|(listed_name, listed_port)| {
            listed_name.eq_ignore_ascii_case(name) && listed_port.is_none_or(|p| port == Some(p))
        })
    }
}

/// The host without an IPv6 literal's brackets; names are compared ignoring ASCII case.
fn unbracketed(host: &str) -> &str {
    host.trim_matches('[').trim_matches(']')
}

#[cfg(test)]
mod tests {
    use super::super::settings::McpSettings;
    use super::*;

    fn hosts(listed: &[&str]) -> AllowedHosts {
        AllowedHosts::new(&listed.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn hosts_are_matched_as_rmcp_matches_them() {
        let default = AllowedHosts::new(&McpSettings::default().allowed_hosts);
        assert!(default.allow("127.0.0.1:8080"));
        assert!(default.allow("LOCALHOST"));
        assert!(default.allow("[::1]:80"));
        assert!(!default.allow("evil.example:8080"));
        assert!(!default.allow("localhost.evil.example"));
        assert!(!default.allow("bad host"));
        let pinned = hosts(&["gate.example:443"]);
        assert!(pinned.allow("gate.example:443"));
        assert!(!pinned.allow("gate.example:8443"));
        assert!(!pinned.allow("gate.example"));
        let spaced = hosts(&[" Gate.Example ", "[::1]:8080", ""]);
        assert!(spaced.allow("gate.example"));
        assert!(spaced.allow("[::1]:8080"));
        assert!(!spaced.allow("[::1]:8081"));
        assert!(!hosts(&[" "]).allow("anything.example"));
        assert!(hosts(&["*"]).allow("anything.example"));
        assert!(hosts(&[]).allow("anything.example"));
    }

    #[test]
    fn only_plain_accept_and_content_types_are_taken() {
        assert!(accepts_json_and_events(
            "application/json, text/event-stream"
        ));
        assert!(accepts_json_and_events(
            "Text/Event-Stream,application/JSON"
        ));
        assert!(!accepts_json_and_events("application/json"));
        assert!(!accepts_json_and_events(
            "application/json;q=0, text/event-stream"
        ));
        assert!(!accepts_json_and_events("*/*"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(!is_json("application/jsonx"));
        assert!(!is_json("text/plain"));
    }
}
