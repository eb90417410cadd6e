//! The `operating_guide` prompt (also the `gatehouse://guide` resource): how calls work behind
//! this gateway, told to the agent that makes them.

pub const PROMPT: &str = "operating_guide";
pub const URI: &str = "gatehouse://guide";

pub const TEXT: &str = "\
You are connected to Gatehouse, a gateway in front of many tools. Its rules:

Tools. tools/list shows the tools your tenant lets you use, named `upstream.tool`. Some tools
are grouped in toolsets; gatehouse.load_toolset {\"toolset\": NAME} adds one (write tools only
with \"include_write_tools\": true) and the list changes: list the tools again afterwards.

Calls. Every result carries `_meta` with dev.gatehouse/call-id, dev.gatehouse/effective-mode,
dev.gatehouse/policy-decision-id and dev.gatehouse/trace-id. Quote the call id when you report
on a call.

Approvals. Calls that change things may need a person's approval. Such a call answers at once
with an error result whose structuredContent.error.code is `approval_pending`, with the call_id
and `expires_at`: the call is recorded and waits; do not call the tool again. Poll
gatehouse.call_status {\"call_id\": ID, \"wait_ms\": 10000} until it is final: it answers with
the state while the call waits, the tool's own result once it ran, or an error result saying it
was rejected (with the approver's note), expired, cancelled or failed. A rejected call must not
be retried unchanged. If your client supports MCP tasks, you get a task instead: poll tasks/get
and cancel with tasks/cancel.

Idempotency. To make a retry safe, send your own key in the request's
`_meta[\"dev.gatehouse/idempotency-key\"]` (1 to 256 bytes, e.g. a UUID): a repeat with the
same key and arguments answers with the recorded call instead of running again; the same key
with other arguments is refused (`conflict`).

Errors. A call the gateway refuses is an error result (isError: true) whose
structuredContent.error holds `code` (unknown_tool, invalid_arguments, denied_by_policy,
not_found, rate_limited, approval_pending, rejected, expired, cancelled, upstream_failed,
outcome_unknown, conflict, unavailable, ...), `message`, `retryable` (whether the same request
may succeed later), `hint` (what to do) and, when known, `retry_after_ms`, `call_id` and
`expires_at`. Follow the hint; retry only what is retryable, after retry_after_ms when given.

Your calls. gatehouse://calls/{call_id} reads one of your own calls' envelope as JSON.
";
