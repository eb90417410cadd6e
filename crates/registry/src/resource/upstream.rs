use super::{Problem, is_valid_name};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamKind {
    /// An MCP server over streamable HTTP.
    Mcp,
    /// A plain HTTP/JSON service.
    Http,
    /// An A2A peer the gateway delegates to.
    A2a,
    /// A tool the gateway itself provides.
    Builtin,
}

/// Where tools come from. Credentials are named, never stored: each node finds the name in its
/// operator's configuration, so snapshots and backups carry no secrets and a tenant's admin
/// cannot point a node at its own files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamSpec {
    #[serde(rename = "type")]
    pub kind: UpstreamKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether the upstream's own tool annotations may set its tools' declared maximum mode.
    #[serde(default)]
    pub trusted: bool,
    /// The upstream dedupes by the call's idempotency key, so a call may be re-claimed safely.
    #[serde(default)]
    pub honours_idempotency_key: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<CredentialRef>,
    /// How long one attempt may take; 30 s when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retries of a failed attempt, for retry-safe calls only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RetryPolicy>,
    /// When each node stops calling an upstream that keeps failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit_breaker: Option<BreakerPolicy>,
    /// How often the leader lists an MCP upstream's tools again; 300 s when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_seconds: Option<u64>,
}

/// Retries after a transport error, a 5xx or a 429, with a doubling pause between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// The pause before the first retry.
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: default_attempts(),
            backoff_ms: default_backoff_ms(),
        }
    }
}

fn default_attempts() -> u32 {
    2
}

fn default_backoff_ms() -> u64 {
    100
}

/// After `failures` failed calls in a row the breaker opens: calls fail at once for
/// `cooldownMs`, then one probe goes through and its outcome closes or reopens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BreakerPolicy {
    #[serde(default = "default_failures")]
    pub failures: u32,
    #[serde(default = "default_cooldown_ms")]
    pub cooldown_ms: u64,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failures: default_failures(),
            cooldown_ms: default_cooldown_ms(),
        }
    }
}

fn default_failures() -> u32 {
    5
}

fn default_cooldown_ms() -> u64 {
    30_000
}

/// Longest an attempt may be given, and longest pause between refreshes or after failures: a
/// day.
const MAX_MS: u64 = 24 * 60 * 60 * 1000;
/// Most retries of one call.
const MAX_RETRIES: u32 = 10;

/// How an Upstream names the secret it is called with: by the name of a credential the operator
/// declared in the nodes' configuration (`credential: stripe`), which says where the secret is
/// and which tenants may use it. The registry never holds a path or a variable name a node
/// would read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "the name of a credential the operator declared, as `credential: NAME`"
)]
pub enum CredentialRef {
    /// The name of an operator-declared credential.
    Named(String),
    /// The form earlier versions stored (`{env: VAR}` or `{file: PATH}`): still read from old
    /// logs and snapshots, refused when proposed, and never used by a node.
    Legacy(LegacyCredential),
}

/// An environment variable or file of the node, as earlier versions let an Upstream name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyCredential {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl CredentialRef {
    /// The operator credential's name; `None` for the old form, which is never used.
    pub fn name(&self) -> Option<&str> {
        match self {
            CredentialRef::Named(name) => Some(name),
            CredentialRef::Legacy(_) => None,
        }
    }
}

/// What an Upstream naming its credential the old way is told.
pub const LEGACY_CREDENTIAL: &str = "names a variable or file of the node, which Upstreams may \
     no longer do: the operator declares credentials in the nodes' configuration and grants \
     them to tenants; name one here, as `credential: NAME` (ask the operator for the name)";

impl UpstreamSpec {
    pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
    pub const DEFAULT_REFRESH_SECONDS: u64 = 300;

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms.unwrap_or(Self::DEFAULT_TIMEOUT_MS))
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retries.unwrap_or_default()
    }

    pub fn breaker_policy(&self) -> BreakerPolicy {
        self.circuit_breaker.unwrap_or_default()
    }

    pub fn refresh_every(&self) -> std::time::Duration {
        std::time::Duration::from_secs(
            self.refresh_seconds
                .unwrap_or(Self::DEFAULT_REFRESH_SECONDS),
        )
    }

    pub(super) fn validate(&self, problems: &mut Vec<Problem>) {
        match (&self.url, self.kind) {
            (None, UpstreamKind::Mcp | UpstreamKind::Http | UpstreamKind::A2a) => problems.push(
                Problem::new("spec.url", "required for mcp, http and a2a upstreams"),
            ),
            (Some(url), _) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                problems.push(Problem::new(
                    "spec.url",
                    "must be an http:// or https:// URL",
                ))
            }
            _ => {}
        }
        if let Some(url) = &self.url
            && crate::redact::has_userinfo(url)
        {
            problems.push(Problem::new(
                "spec.url",
                "holds userinfo (user:password@): secrets never go in the url; use a \
                 credential the operator declares, `credential: NAME`",
            ));
        }
        match &self.credential {
            Some(CredentialRef::Legacy(_)) => {
                problems.push(Problem::new("spec.credential", LEGACY_CREDENTIAL))
            }
            Some(CredentialRef::Named(name)) if !is_valid_name(name) => problems.push(Problem::new(
                "spec.credential",
                format!(
                    "{name:?} is not a credential name: 1 to 128 of a-z, 0-9, '-', '_' and '.', \
                     starting with a letter or digit"
                ),
            )),
            Some(CredentialRef::Named(_)) | None => {}
        }
        if self.kind == UpstreamKind::Builtin && self.credential.is_some() {
            problems.push(Problem::new(
                "spec.credential",
                "built-in upstreams run in the node and take no credential",
            ));
        }
        if let Some(ms) = self.timeout_ms
            && !(1..=MAX_MS).contains(&ms)
        {
            problems.push(Problem::new(
                "spec.timeoutMs",
                format!("must be from 1 to {MAX_MS}"),
            ));
        }
        if let Some(retries) = &self.retries {
            if retries.attempts > MAX_RETRIES {
                problems.push(Problem::new(
                    "spec.retries.attempts",
                    format!("must be at most {MAX_RETRIES}"),
                ));
            }
            if retries.backoff_ms > MAX_MS {
                problems.push(Problem::new(
                    "spec.retries.backoffMs",
                    format!("must be at most {MAX_MS}"),
                ));
            }
        }
        if let Some(breaker) = &self.circuit_breaker {
            if breaker.failures == 0 {
                problems.push(Problem::new(
                    "spec.circuitBreaker.failures",
                    "must be above 0",
                ));
            }
            if !(1..=MAX_MS).contains(&breaker.cooldown_ms) {
                problems.push(Problem::new(
                    "spec.circuitBreaker.cooldownMs",
                    format!("must be from 1 to {MAX_MS}"),
                ));
            }
        }
        if let Some(seconds) = self.refresh_seconds {
            if self.kind != UpstreamKind::Mcp {
                problems.push(Problem::new(
                    "spec.refreshSeconds",
                    "only mcp upstreams list their tools",
                ));
            }
            if !(1..=MAX_MS / 1000).contains(&seconds) {
                problems.push(Problem::new(
                    "spec.refreshSeconds",
                    format!("must be from 1 to {}", MAX_MS / 1000),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> UpstreamSpec {
        serde_norway::from_str(yaml).expect("an upstream spec")
    }

    fn problems(spec: &UpstreamSpec) -> Vec<String> {
        let mut problems = Vec::new();
        spec.validate(&mut problems);
        problems.into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn resilience_settings_default_when_absent_or_partly_given() {
        let spec =
            parse("{type: mcp, url: 'http://a/mcp', retries: {attempts: 4}, circuitBreaker: {}}");
        assert_eq!(spec.timeout(), std::time::Duration::from_secs(30));
        assert_eq!(
            spec.retry_policy(),
            RetryPolicy {
                attempts: 4,
                backoff_ms: 100
            }
        );
        assert_eq!(spec.breaker_policy(), BreakerPolicy::default());
        assert_eq!(spec.refresh_every(), std::time::Duration::from_secs(300));
        assert!(problems(&spec).is_empty());
    }

    #[test]
    fn a_credential_is_named_and_the_old_form_still_reads_but_is_refused() {
        let named = parse("{type: http, url: 'https://api.example', credential: stripe}");
        assert_eq!(
            named.credential,
            Some(CredentialRef::Named("stripe".into()))
        );
        assert_eq!(
            named.credential.as_ref().and_then(CredentialRef::name),
            Some("stripe")
        );
        assert!(problems(&named).is_empty());

        // What an earlier version stored still deserializes (old logs and snapshots load), and
        // serializes back as it was, but it is refused when proposed and names no credential.
        let stored =
            r#"{"type":"http","url":"http://h","credential":{"file":"/data/cluster.key"}}"#;
        let old: UpstreamSpec = serde_json::from_str(stored).unwrap();
        assert_eq!(
            old.credential,
            Some(CredentialRef::Legacy(LegacyCredential {
                env: None,
                file: Some("/data/cluster.key".into())
            }))
        );
        assert_eq!(
            serde_json::to_value(&old).unwrap()["credential"],
            serde_json::json!({"file": "/data/cluster.key"})
        );
        assert_eq!(old.credential.as_ref().and_then(CredentialRef::name), None);
        assert_eq!(problems(&old), ["spec.credential"]);

        for bad in ["'/data/cluster.key'", "'../admin.key'", "STRIPE", "''"] {
            let spec = parse(&format!(
                "{{type: http, url: 'http://h', credential: {bad}}}"
            ));
            assert_eq!(problems(&spec), ["spec.credential"], "{bad}");
        }
        let odd: Result<UpstreamSpec, _> =
            serde_norway::from_str("{type: http, url: 'http://h', credential: {path: /x}}");
        assert!(
            odd.unwrap_err().to_string().contains("`credential: NAME`"),
            "what is expected is said"
        );
        let builtin = parse("{type: builtin, credential: stripe}");
        assert_eq!(problems(&builtin), ["spec.credential"]);
    }

    #[test]
    fn a_url_with_userinfo_is_refused() {
        for url in [
            "https://user:pw@api.example/v1",
            "https://token@api.example",
        ] {
            let spec = parse(&format!("{{type: http, url: '{url}'}}"));
            assert_eq!(problems(&spec), ["spec.url"], "{url}");
        }
        let fine = parse("{type: http, url: 'https://api.example/users/@me'}");
        assert!(problems(&fine).is_empty());
    }

    #[test]
    fn out_of_range_resilience_settings_are_each_reported() {
        let spec = parse(
            "{type: http, url: 'http://a', timeoutMs: 0, retries: {attempts: 11}, \
             circuitBreaker: {failures: 0, cooldownMs: 0}, refreshSeconds: 0}",
        );
        assert_eq!(
            problems(&spec),
            [
                "spec.timeoutMs",
                "spec.retries.attempts",
                "spec.circuitBreaker.failures",
                "spec.circuitBreaker.cooldownMs",
                "spec.refreshSeconds",
                "spec.refreshSeconds",
            ]
        );
    }
}
