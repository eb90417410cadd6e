//! The `gatehouse` node: its command line, and what each command does. The binary's `main` only
//! parses arguments and calls in here, so tests can drive every command without a process.
//!
//! Domain decisions never live here: they belong to `gatehouse-registry`.

pub mod cli;
pub mod cmd;
pub mod files;
