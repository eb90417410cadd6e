//! HTTP/JSON upstreams. A tool with an `http` binding becomes its method and path, `{arg}`s
//! filled from the arguments, the rest in the query string (GET, DELETE) or a JSON body; a tool
//! without one POSTs its arguments to `{url}/{tool}`. The call's idempotency key, ids, skill
//! context and trace context travel in headers. A 2xx answer is the tool's result, any other
//! status the tool's error; a connection failure or timeout means the call could not be carried
//! out.

use super::resilience::Attempt;
use super::tool_result;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gatehouse_actors::{ExecError, Execution};
use gatehouse_registry::http_path;
use gatehouse_registry::redact;
use gatehouse_registry::resource::HttpBinding;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Map, Value};
use std::time::Duration;

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

/// The request one call becomes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Request {
    pub method: Method,
    pub url: Url,
    /// JSON text.
    pub body: Option<String>,
}

/// Maps a call onto its request: pure, so every mapping rule is tested without a server.
///
/// The path is built as text and set on the base URL, and the URL is used only if it carries
/// exactly that path: `url` (WHATWG) would otherwise resolve a `..` or `%2e%2e` segment and
/// send the request somewhere else. Arguments were checked by the pipeline
/// (`http_path::segment_text`); they are checked again here, for a record written before.
pub(super) fn request(
    base: &str,
    tool: &str,
    binding: Option<&HttpBinding>,
    arguments: &str,
) -> Result<Request, ExecError> {
    let invalid = |what: String| ExecError { message: what };
    let Some(binding) = binding else {
        let url = with_path(base, &format!("/{}", percent_encode(tool)))?;
        return Ok(Request {
            method: Method::POST,
            url,
            body: Some(arguments.to_owned()),
        });
    };
    let mut rest: Map<String, Value> = match serde_json::from_str(arguments) {
        Ok(Value::Object(object)) => object,
        Ok(Value::Null) | Err(_) if arguments.trim().is_empty() => Map::new(),
        _ => return Err(invalid("the arguments are not a JSON object".into())),
    };
    let placeholders = binding.placeholders().ok_or_else(|| {
        invalid(format!(
            "the tool's http path {} has unpaired braces",
            binding.path
        ))
    })?;
    let mut path = binding.path.clone();
    for name in placeholders {
        let value = rest
            .remove(name)
            .filter(|v| !v.is_null())
            .ok_or_else(|| invalid(format!("argument {name} is required: the path holds it")))?;
        let text = http_path::segment_text(&value)
            .map_err(|why| invalid(format!("argument {name} {why}")))?;
        path = path.replacen(&format!("{{{name}}}"), &percent_encode(&text), 1);
    }
    let method = Method::from_bytes(binding.method.as_bytes())
        .map_err(|_| invalid(format!("{} is not an HTTP method", binding.method)))?;
    let mut url = with_path(base, &path)?;
    if binding.uses_query() {
        if !rest.is_empty() {
            let mut query = url.query_pairs_mut();
            for (name, value) in &rest {
                match value {
                    Value::Null => {}
                    Value::Array(items) => {
                        for item in items {
                            query.append_pair(name, &query_text(item));
                        }
                    }
                    other => {
                        query.append_pair(name, &query_text(other));
                    }
                }
            }
        }
        return Ok(Request {
            method,
            url,
            body: None,
        });
    }
    Ok(Request {
        method,
        url,
        body: Some(Value::Object(rest).to_string()),
    })
}

/// The upstream's base URL with `path` after its own path, or an error if the URL would not
/// carry `path` byte for byte (a dot segment resolved, a character re-encoded).
fn with_path(base: &str, path: &str) -> Result<Url, ExecError> {
    let mut url = Url::parse(base).map_err(|e| ExecError {
        message: format!("the upstream's url {}: {e}", redact::url(base)),
    })?;
    let full = format!("{}{path}", url.path().trim_end_matches('/'));
    url.set_path(&full);
    if url.path() != full {
        return Err(ExecError {
            message: format!(
                "the request path {full} would be sent as {}: not sent",
                url.path()
            ),
        });
    }
    Ok(url)
}

fn query_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// RFC 3986: everything but the unreserved characters is escaped, `/` and `%` included, so an
/// argument stays one path segment and reaches the upstream as the agent wrote it.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One attempt of the request.
pub(super) async fn attempt(
    client: &reqwest::Client,
    request: &Request,
    execution: &Execution,
    traceparent: &str,
    bearer: Option<&str>,
    timeout: Duration,
) -> Attempt {
    let url = &request.url;
    let mut builder = client
        .request(request.method.clone(), url.clone())
        .timeout(timeout)
        .header("Idempotency-Key", &execution.idempotency_key)
        .header("Gatehouse-Call-Id", execution.call_id.to_string())
        .header("Gatehouse-Tenant", &execution.tenant)
        .header("traceparent", traceparent);
    if let Some(body) = &request.body {
        builder = builder
            .header(CONTENT_TYPE, "application/json")
            .body(body.clone());
    }
    if let Some(context) = &execution.skill_context {
        builder = builder.header(
            "Gatehouse-Skill-Context",
            URL_SAFE_NO_PAD.encode(context.as_bytes()),
        );
    }
    if let Some(token) = bearer {
        let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {token}")) else {
            return Attempt::refused(ExecError {
                message: "the upstream's credential has characters a header cannot carry".into(),
            });
        };
        value.set_sensitive(true);
        builder = builder.header(AUTHORIZATION, value);
    }
    let url = redact::url(url.as_str());
    tracing::debug!(call = %execution.call_id, tool = %execution.tool, method = %request.method, %url, "calling http upstream");
    let unreachable = |e: reqwest::Error| {
        Attempt::transient(Err(ExecError {
            message: if e.is_timeout() {
                format!("{url} did not answer within {timeout:?}")
            } else {
                format!("calling {url}: {}", e.without_url())
            },
        }))
    };
    let mut response = match builder.send().await {
        Ok(response) => response,
        Err(e) => return unreachable(e),
    };
    let status = response.status();
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Attempt::answered_error(ExecError {
                        message: format!("{url} answered more than {MAX_ANSWER_BYTES} bytes"),
                    });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => return unreachable(e),
        }
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    if !status.is_success() {
        let text = if text.trim().is_empty() {
            format!("the upstream answered {status}")
        } else {
            text
        };
        let output = tool_result(text, None, true);
        return if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            Attempt::transient(Ok(output))
        } else {
            Attempt::answered(output)
        };
    }
    let structured = serde_json::from_str::<Value>(&text).ok();
    Attempt::answered(tool_result(text, structured, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(method: &str, path: &str) -> HttpBinding {
        HttpBinding {
            method: method.into(),
            path: path.into(),
        }
    }

    #[test]
    fn without_a_binding_the_arguments_are_posted_to_the_tools_path() {
        let r = request("http://h/api/", "search", None, r#"{"q":1}"#).unwrap();
        assert_eq!(r.method, Method::POST);
        assert_eq!(r.url.as_str(), "http://h/api/search");
        assert_eq!(r.body.as_deref(), Some(r#"{"q":1}"#));
    }

    #[test]
    fn path_arguments_are_encoded_and_the_rest_go_to_the_query_or_body() {
        let args = json!({"id": "a b?c", "n": 3, "tags": ["x", "y"], "none": null}).to_string();
        let get = request("http://h", "t", Some(&binding("GET", "/pets/{id}")), &args).unwrap();
        assert_eq!(get.method, Method::GET);
        assert_eq!(get.url.path(), "/pets/a%20b%3Fc");
        assert_eq!(get.url.query(), Some("n=3&tags=x&tags=y"));
        assert_eq!(get.body, None);

        let put = request("http://h", "t", Some(&binding("PUT", "/pets/{n}")), &args).unwrap();
        assert_eq!(put.url.as_str(), "http://h/pets/3");
        let body: Value = serde_json::from_str(put.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"id": "a b?c", "tags": ["x", "y"], "none": null})
        );
    }

    #[test]
    fn the_url_crate_resolves_encoded_dot_segments_so_they_never_reach_it() {
        // Why the path is checked after it is set: WHATWG URL parsing treats `%2e%2e` as `..`.
        let parsed = Url::parse("http://h/tenants/acme/items/%2E%2E/summary").unwrap();
        assert_eq!(parsed.path(), "/tenants/acme/summary");
        let route = binding("GET", "/tenants/acme/items/{id}/summary");
        for id in ["..", ".", "%2e%2e", "%2E.", "a/b", "a\\b", "a%2Fb", ""] {
            let args = json!({ "id": id }).to_string();
            let err = request("http://h", "t", Some(&route), &args).unwrap_err();
            assert!(err.message.contains("argument id"), "{id:?}: {err}");
        }
        let args = json!({"id": "..."}).to_string();
        let ok = request("http://h", "t", Some(&route), &args).unwrap();
        assert_eq!(ok.url.path(), "/tenants/acme/items/.../summary");
    }

    #[test]
    fn the_path_joins_the_base_urls_own_path_and_is_never_rewritten() {
        let route = binding("GET", "/items/{id}");
        let args = json!({"id": "a%2e%2e"}).to_string();
        let r = request("http://h/api/v1/", "t", Some(&route), &args).unwrap();
        assert_eq!(r.url.as_str(), "http://h/api/v1/items/a%252e%252e");
        // A literal dot segment that slipped past validation is refused, not resolved.
        let sneaky = binding("GET", "/a/../{id}");
        let err = request("http://h", "t", Some(&sneaky), &args).unwrap_err();
        assert!(err.message.contains("not sent"), "{err}");
    }

    #[test]
    fn a_missing_path_argument_is_an_error() {
        let err = request("http://h", "t", Some(&binding("DELETE", "/p/{id}")), "{}").unwrap_err();
        assert!(err.message.contains("argument id is required"), "{err}");
    }
}
