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
pub(super) fn request(
    base: &str,
    tool: &str,
    binding: Option<&HttpBinding>,
    arguments: &str,
) -> Result<Request, ExecError> {
    let base = base.trim_end_matches('/');
    let invalid = |what: String| ExecError { message: what };
    let Some(binding) = binding else {
        let url = Url::parse(&format!("{base}/{tool}")).map_err(|e| {
            invalid(format!(
                "the upstream's url {}: {e}",
                redact::url(&format!("{base}/{tool}"))
            ))
        })?;
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
        let text = match &value {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => value.to_string(),
            _ => {
                return Err(invalid(format!(
                    "argument {name} must be a string or number"
                )));
            }
        };
        path = path.replacen(&format!("{{{name}}}"), &percent_encode(&text), 1);
    }
    let method = Method::from_bytes(binding.method.as_bytes())
        .map_err(|_| invalid(format!("{} is not an HTTP method", binding.method)))?;
    let mut url = Url::parse(&format!("{base}{path}")).map_err(|e| {
        invalid(format!(
            "the url {}: {e}",
            redact::url(&format!("{base}{path}"))
        ))
    })?;
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

fn query_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// RFC 3986: everything but the unreserved characters is escaped, `/` included, so an argument
/// stays one path segment.
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
        let args = json!({"id": "a b/c", "n": 3, "tags": ["x", "y"], "none": null}).to_string();
        let get = request("http://h", "t", Some(&binding("GET", "/pets/{id}")), &args).unwrap();
        assert_eq!(get.method, Method::GET);
        assert_eq!(get.url.path(), "/pets/a%20b%2Fc");
        assert_eq!(get.url.query(), Some("n=3&tags=x&tags=y"));
        assert_eq!(get.body, None);

        let put = request("http://h", "t", Some(&binding("PUT", "/pets/{n}")), &args).unwrap();
        assert_eq!(put.url.as_str(), "http://h/pets/3");
        let body: Value = serde_json::from_str(put.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"id": "a b/c", "tags": ["x", "y"], "none": null})
        );
    }

    #[test]
    fn a_missing_path_argument_is_an_error() {
        let err = request("http://h", "t", Some(&binding("DELETE", "/p/{id}")), "{}").unwrap_err();
        assert!(err.message.contains("argument id is required"), "{err}");
    }
}
