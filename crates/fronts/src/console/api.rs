//! The approvals API in JSON over HTTP (`/api/v1`): the same `ApprovalService` methods the
//! gRPC listener serves, called with the request's `Authorization` header as their metadata, so
//! it has the same authentication, the same checks, the same audit and the same errors, said as
//! an HTTP status and `{"error": {"code", "message"}}`. The console is its first client; scripts
//! may use it too.
//!
//! Only a bearer token authenticates: no cookie, so a page on another origin cannot act with an
//! approver's browser; no CORS header, so it cannot read an answer either.

// A handler's early answer is an HTTP response, made once per request: its size is no cost.
#![allow(clippy::result_large_err)]

use crate::services::approval::Approvals;
use crate::services::convert::{approval_mode_to, call_state_to};
use crate::services::json::{event_json, record_json};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_server::ApprovalService;
use gatehouse_registry::{ApprovalMode, CallState};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::time::Duration;
use tonic::metadata::MetadataMap;

/// How often an idle event stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `tonic::Request` for `message`, authenticated by the HTTP request's bearer token only.
fn as_grpc<T>(headers: &HeaderMap, message: T) -> tonic::Request<T> {
    let mut only_auth = HeaderMap::new();
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        only_auth.insert(header::AUTHORIZATION, value.clone());
    }
    let mut request = tonic::Request::new(message);
    *request.metadata_mut() = MetadataMap::from_headers(only_auth);
    request
}

/// A gRPC status as an HTTP answer: the status code HTTP APIs conventionally pair with it.
pub fn error(status: &tonic::Status) -> Response {
    use tonic::Code;
    let http = match status.code() {
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    let code = format!("{:?}", status.code());
    let body = json!({"error": {"code": screaming(&code), "message": status.message()}});
    let mut response = (http, Json(body)).into_response();
    if http == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"gatehouse\""),
        );
    }
    response
}

/// `PermissionDenied` as `PERMISSION_DENIED`, as gRPC's own names read.
fn screaming(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn invalid(message: impl Into<String>) -> Response {
    error(&tonic::Status::invalid_argument(message.into()))
}

/// A JSON body of type `T`, or the error a client can act on.
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, Response> {
    let bytes = if bytes.is_empty() { &b"{}"[..] } else { bytes };
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("the request body: {e}")))
}

fn answered<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Result<T, Response> {
    result
        .map(tonic::Response::into_inner)
        .map_err(|s| error(&s))
}

/// A registry enum from its snake_case name, as the files and the JSON spell it.
fn named<T: DeserializeOwned>(what: &str, text: &str) -> Result<T, Response> {
    serde_json::from_value(Value::String(text.to_owned()))
        .map_err(|_| invalid(format!("{what} {text:?} is not one of its names")))
}

/// `GET /api/v1/me`: who the token is, and the tenants whose calls it may review or decide.
pub async fn me(State(approvals): State<Approvals>, headers: HeaderMap) -> Response {
    match approvals.me(as_grpc(&headers, ()).metadata()).await {
        Ok(me) => Json(json!({
            "principal": me.principal,
            "person": me.person,
            "tenants": me.tenants.iter().map(|(tenant, approver)| json!({"tenant": tenant, "approver": approver})).collect::<Vec<_>>(),
        }))
        .into_response(),
        Err(status) => error(&status),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    state: Option<String>,
    tool: Option<String>,
    mode: Option<String>,
    page_size: Option<u32>,
    page_token: Option<String>,
}

/// `GET /api/v1/tenants/{tenant}/calls`: a page of the tenant's unfinished calls, or of those in
/// `state`.
pub async fn list(
    State(approvals): State<Approvals>,
    Path(tenant): Path<String>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let result = async {
        let Query(query) = query.map_err(|e| invalid(e.body_text()))?;
        let state = match &query.state {
            Some(s) => call_state_to(named::<CallState>("state", s)?),
            None => pb::CallState::Unspecified,
        };
        let mode = match &query.mode {
            Some(m) => approval_mode_to(named::<ApprovalMode>("mode", m)?),
            None => pb::ApprovalMode::Unspecified,
        };
        let request = pb::ListCallsRequest {
            tenant,
            state: state as i32,
            page_size: query.page_size.unwrap_or(0),
            page_token: query.page_token.unwrap_or_default(),
            tool: query.tool.unwrap_or_default(),
            mode: mode as i32,
        };
        let page = answered(approvals.list_pending(as_grpc(&headers, request)).await)?;
        Ok::<_, Response>(Json(json!({
            "calls": page.calls.iter().map(record_json).collect::<Vec<_>>(),
            "next_page_token": page.next_page_token,
        })))
    };
    result.await.into_response()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    from: Option<u64>,
}

/// `GET /api/v1/tenants/{tenant}/watch`: the tenant's changes as server-sent events, each with
/// the applied index as its id. From `from`, or the `Last-Event-ID` a reconnecting client
/// sends; from 0, the whole unfinished set first, then a `resync` event.
pub async fn watch(
    State(approvals): State<Approvals>,
    Path(tenant): Path<String>,
    query: Result<Query<WatchQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let Ok(Query(query)) = query else {
        return invalid("from must be a log index");
    };
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let request = pb::WatchCallsRequest {
        tenant,
        from_index: resume.or(query.from).unwrap_or(0),
    };
    let events = match approvals.watch_pending(as_grpc(&headers, request)).await {
        Ok(events) => events.into_inner(),
        Err(status) => return error(&status),
    };
    let events = events.map(|event| {
        Ok::<_, Infallible>(match event {
            Ok(event) => {
                let name = match &event.event {
                    Some(pb::approval_event::Event::Resync(_)) => "resync",
                    Some(pb::approval_event::Event::Change(_)) | None => "change",
                };
                Event::default()
                    .id(event.index.to_string())
                    .event(name)
                    .data(event_json(&event).to_string())
            }
            // The stream ends after this: the client resumes from its last id.
            Err(status) => Event::default().event("error").data(
                json!({"code": screaming(&format!("{:?}", status.code())), "message": status.message()})
                    .to_string(),
            ),
        })
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// `GET /api/v1/calls/{id}`: the call, and the tool's description and input schema as the
/// registry has them now, to show the arguments against.
pub async fn get(
    State(approvals): State<Approvals>,
    Path(call_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let request = pb::GetCallRecordRequest { call_id };
    let call = match answered(approvals.get(as_grpc(&headers, request)).await) {
        Ok(answer) => answer.call.unwrap_or_default(),
        Err(response) => return response,
    };
    let tool = approvals
        .tool(&call.tenant, &call.tool)
        .map(|(description, input_schema)| json!({"description": description, "input_schema": input_schema}));
    Json(json!({"call": record_json(&call), "tool": tool})).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Approve {
    args_sha256: String,
    #[serde(default)]
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reason {
    #[serde(default)]
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resolve {
    outcome: String,
    #[serde(default)]
    reason: String,
}

/// The answer to a decision: the call's record after it, and the log index it was applied at.
fn decided(call: Option<pb::CallRecord>, log_index: u64) -> Response {
    Json(json!({"log_index": log_index, "call": record_json(&call.unwrap_or_default())}))
        .into_response()
}

/// `POST /api/v1/calls/{id}/{approve|reject|cancel|resolve}`.
pub async fn decide(
    State(approvals): State<Approvals>,
    Path((call_id, verb)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let result = async {
        Ok::<_, Response>(match verb.as_str() {
            "approve" => {
                let Approve {
                    args_sha256,
                    reason,
                } = body(&bytes)?;
                let request = pb::ApproveCallRequest {
                    call_id,
                    args_sha256,
                    reason,
                };
                let a = answered(approvals.approve(as_grpc(&headers, request)).await)?;
                decided(a.call, a.log_index)
            }
            "reject" => {
                let Reason { reason } = body(&bytes)?;
                let request = pb::RejectCallRequest { call_id, reason };
                let a = answered(approvals.reject(as_grpc(&headers, request)).await)?;
                decided(a.call, a.log_index)
            }
            "cancel" => {
                let Reason { reason } = body(&bytes)?;
                let request = pb::CancelCallRequest { call_id, reason };
                let a = answered(approvals.cancel(as_grpc(&headers, request)).await)?;
                decided(a.call, a.log_index)
            }
            "resolve" => {
                let Resolve { outcome, reason } = body(&bytes)?;
                let outcome = match outcome.as_str() {
                    "succeeded" => pb::ResolveOutcome::Succeeded,
                    "failed" => pb::ResolveOutcome::Failed,
                    other => {
                        return Err(invalid(format!("outcome {other:?}: succeeded or failed")));
                    }
                };
                let request = pb::ResolveCallRequest {
                    call_id,
                    outcome: outcome as i32,
                    reason,
                };
                let a = answered(approvals.resolve(as_grpc(&headers, request)).await)?;
                decided(a.call, a.log_index)
            }
            other => {
                return Err(error(&tonic::Status::not_found(format!(
                    "no action {other:?}: approve, reject, cancel or resolve"
                ))));
            }
        })
    };
    result.await.unwrap_or_else(|response| response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_grpc_names_with_their_http_codes() {
        let denied = error(&tonic::Status::permission_denied("no"));
        assert_eq!(denied.status(), StatusCode::FORBIDDEN);
        let unknown = error(&tonic::Status::unauthenticated("who"));
        assert_eq!(unknown.status(), StatusCode::UNAUTHORIZED);
        assert!(unknown.headers().contains_key(header::WWW_AUTHENTICATE));
        assert_eq!(
            error(&tonic::Status::failed_precondition("expired")).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(screaming("PermissionDenied"), "PERMISSION_DENIED");
        assert_eq!(screaming("NotFound"), "NOT_FOUND");
    }

    #[test]
    fn only_the_bearer_token_reaches_the_service() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
        headers.insert(header::COOKIE, "session=1".parse().unwrap());
        headers.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        let request = as_grpc(&headers, ());
        let keys: Vec<_> = request.metadata().keys().collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer k");
    }
}
