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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl UpstreamSpec {
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
        if self.timeout_ms == Some(0) {
            problems.push(Problem::new("spec.timeoutMs", "must be above 0"));
        }
    }
}
