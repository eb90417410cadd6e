//! Fixtures that tests of several crates share: resources as `RegistryService.Apply` takes them
//! ([`wire`]), registries and resources written as YAML ([`yaml`]), and the official Python SDKs'
//! clients ([`python`]), call records ([`calls`]), the fuzz tests' case counts ([`fuzz`]). Only tests use it, as a dev-dependency; production code must never
//! depend on it.
//!
//! **Where it sits.** It depends on no workspace crate but `gatehouse-registry` and
//! `gatehouse-proto`, so it stands one floor above them, level with `gatehouse-raft-store`. A
//! dev-dependency must point strictly down the crate graph, so every crate above raft-store can
//! use the kit (actors, cluster, gateway, fronts, the node's process tests, `gatehouse-tests`),
//! and neither the registry nor raft-store can: their tests keep their own small fixtures.
//!
//! **What is elsewhere.** Starting a node in-process needs `gatehouse-node`, and a fixture
//! built on it could only serve crates above the node, while the domain builders here serve
//! crates below it; so the in-process node (`NodeOptions`, `TestCluster`, `one_node`) lives in
//! `gatehouse-tests` (`tests/src`) with the recording upstreams that only its tests use. The
//! process tests' helpers (spawning `gatehouse serve`, running the command line) stay in
//! `crates/node/tests/common`: they need `CARGO_BIN_EXE_gatehouse`, which Cargo sets only for
//! the node's own integration tests.

pub mod calls;
pub mod fuzz;
pub mod python;
pub mod wire;
pub mod yaml;
