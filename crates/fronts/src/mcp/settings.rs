//! The MCP front's settings, as the node's configuration gives them.

use std::time::Duration;

/// The MCP front's settings (`/mcp` on the HTTP listener).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSettings {
    pub max_body_bytes: usize,
    /// How long a call that needs approval is waited for before `approval_pending`.
    pub approval_wait: Duration,
    /// Browser origins allowed; empty refuses every request that carries an `Origin`.
    pub allowed_origins: Vec<String>,
    /// Accepted `Host` values; `*` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Answer stateless 2026-07-28 `tools/call`s without rmcp's per-request service (direct.rs);
    /// off, every request goes through rmcp.
    pub direct_calls: bool,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            max_body_bytes: 1024 * 1024,
            approval_wait: Duration::ZERO,
            allowed_origins: Vec::new(),
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            direct_calls: true,
        }
    }
}
