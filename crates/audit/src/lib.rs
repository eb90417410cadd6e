//! A node's audit log: one record for every tool call, prompt get, resource read, approval
//! decision and admin change, hash-chained and durable. Bodies never enter it: callers pass
//! digests and lengths. It never decides anything and never blocks a read-only answer on the
//! disk: [`AuditLog::record`] queues for the next group commit, [`AuditLog::record_durable`]
//! answers once its batch is synced (for the approval path).
//!
//! # Format
//!
//! A log directory holds `audit.log` and `audit.head`.
//!
//! `audit.log` is JSON lines, one [`Record`] per line, each line ending in `\n`. The fields come
//! in this order, always all of them, absent values as `null`, compact (no spaces):
//! `seq, at_ms, node, prev, kind, tenant, chain, target, mode, decision, call_id, claim_id,
//! args_sha256, output_sha256, output_len, outcome, trace_id, hash` (`claim_id` came later:
//! records written before it lack it, and still verify, since the hash covers the bytes).
//! `seq` starts at 1 and grows by one; `prev` is the `hash` of the record before (64 zeros for
//! the first).
//!
//! **Hash rule.** Every line ends with `,"hash":"H"}` where `H` is 64 lowercase hex digits.
//! `H` is the SHA-256 of the line's bytes with that ending replaced by `}`: that is, the line
//! without its newline, minus its last 75 bytes, plus `}`. Hashing the stored bytes (not a
//! re-serialization) means any change to a line, even one JSON would read the same, is found.
//!
//! `audit.head` is `{"seq":S,"hash":"H"}`: a record known synced. It is rewritten (temporary
//! file, sync, rename) after a batch, at most every [`HEAD_EVERY`] while batches keep coming
//! and once that much time has passed or at close, and made before the log is. A head behind
//! the log is normal (a crash, a busy interval); a log that ends before its head had records
//! removed.
//!
//! # Group commit and crashes
//!
//! One writer task takes everything queued, chains it, writes it with one `write`, one
//! `sync_data`, answers, then moves the head (so no answer waits for the head's own sync). A
//! crash loses entries queued with [`AuditLog::record`] and not yet synced, and can leave a torn last line, which the next
//! [`AuditLog::open`] cuts off. Nothing [`AuditLog::record_durable`] or [`AuditLog::flush`]
//! answered for is lost.

#![forbid(unsafe_code)]

mod disk;
mod files;
mod log;
mod record;
mod verify;

pub use log::{AuditLog, HEAD_EVERY, Stats};
pub use record::{Entry, GENESIS, Kind, Record};
pub use verify::{Verified, VerifyError, since, tail, verify};

/// The name of the log file inside a log directory.
pub const LOG_FILE: &str = files::LOG;
/// The name of the head file inside a log directory.
pub const HEAD_FILE: &str = files::HEAD;

#[cfg(test)]
mod tests;
