//! The gateway's domain, pure: resources and their validation, the commands that change the
//! registry and the deterministic `apply` that runs them, skill cascade resolution, approval-mode
//! policy, argument validation and canonical JSON.
//!
//! This crate must never do I/O or read a clock: every input, timestamps included, arrives as an
//! argument, so the same commands give the same state on every node and in every test.

pub mod args;
pub mod cache;
pub mod call;
pub mod canonical;
pub mod cascade;
pub mod classify;
pub mod command;
pub mod documents;
pub mod error;
pub mod glob;
pub mod http_path;
pub mod identity;
pub mod mode;
pub mod notify;
pub mod plan;
pub mod policy;
pub mod redact;
pub mod registry;
pub mod resource;
pub mod secrets;
mod tag_first;
pub mod time;

pub use call::{Call, CallId, CallState, NewCall, Outcome, Timestamp};
pub use command::{Command, Proposal, Response};
pub use error::ApplyError;
pub use mode::{ApprovalMode, CapabilityClass};
pub use registry::{Registry, ToolsetInfo};
pub use resource::{Kind, Resource, ResourceKey};
