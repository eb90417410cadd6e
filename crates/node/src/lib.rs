//! The `gatehouse` binary: its command line (`cli`, `cmd`), configuration (`config`), and the
//! assembly of a node from the cluster, gateway and fronts crates (`server`). The binary's `main`
//! only parses arguments and calls in here, so tests can start whole nodes in-process.
//!
//! Domain decisions never live here: they belong to `gatehouse-registry`.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod exit;
pub mod files;
pub mod front;
pub mod server;
