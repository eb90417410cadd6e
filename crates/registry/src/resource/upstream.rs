use super::Problem;
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

/// Where tools come from. Credentials are named, never stored: each node reads them from its own
/// environment or files, so snapshots and backups carry no secrets.
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

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
        if let Some(cred) = &self.credential
            && cred.env.is_some() == cred.file.is_some()
        {
            problems.push(Problem::new(
                "spec.credential",
                "name exactly one of env or file",
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
