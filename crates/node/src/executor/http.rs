//! HTTP/JSON upstreams: one POST of the arguments to `{url}/{tool}`, with the call's idempotency
//! key, ids and skill context in headers. A 2xx answer is the tool's result, any other status
//! the tool's error; a connection failure or timeout means the call could not be carried out.

use super::tool_result;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use gatehouse_registry::resource::UpstreamSpec;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde_json::Value;
use std::time::Duration;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Answers past this size are refused rather than held in memory.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

pub(super) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        // A redirect would turn the POST into a GET or carry the credential elsewhere: the
        // upstream's declared URL is the only place a call goes.
        .redirect(reqwest::redirect::Policy::none())
        // Upstreams are reached directly; a proxy named in the environment is not the admin's
        // declaration.
        .no_proxy()
        .build()
        .unwrap_or_default()
}

pub(super) async fn call(
    client: &reqwest::Client,
    upstream: &UpstreamSpec,
    tool: &str,
    execution: &Execution,
    bearer: Option<String>,
) -> Result<ToolOutput, ExecError> {
    let base = upstream.url.as_deref().ok_or_else(|| ExecError {
        message: "the http upstream has no url".into(),
    })?;
    let url = format!("{}/{tool}", base.trim_end_matches('/'));
    let timeout = upstream
        .timeout_ms
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let mut request = client
        .post(&url)
        .timeout(timeout)
        .header(CONTENT_TYPE, "application/json")
        .header("Idempotency-Key", &execution.idempotency_key)
        .header("Gatehouse-Call-Id", execution.call_id.to_string())
        .header("Gatehouse-Tenant", &execution.tenant)
        .body(execution.arguments.clone());
    if let Some(context) = &execution.skill_context {
        request = request.header(
            "Gatehouse-Skill-Context",
            URL_SAFE_NO_PAD.encode(context.as_bytes()),
        );
    }
    if let Some(token) = bearer {
        let mut value =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| ExecError {
                message: "the upstream's credential has characters a header cannot carry".into(),
            })?;
        value.set_sensitive(true);
        request = request.header(AUTHORIZATION, value);
    }
    tracing::debug!(call = %execution.call_id, tool = %execution.tool, %url, "calling http upstream");
    let unreachable = |e: reqwest::Error| ExecError {
        message: if e.is_timeout() {
            format!("{url} did not answer within {timeout:?}")
        } else {
            format!("calling {url}: {e}")
        },
    };
    let mut response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(ExecError {
                message: format!("{url} answered more than {MAX_ANSWER_BYTES} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !status.is_success() {
        let text = if text.trim().is_empty() {
            format!("the upstream answered {status}")
        } else {
            text
        };
        return Ok(tool_result(text, None, true));
    }
    let structured = serde_json::from_str::<Value>(&text).ok();
    Ok(tool_result(text, structured, false))
}
