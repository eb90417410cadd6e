//! A fault campaign against real `gatehouse serve` processes, in the manner of etcd's robustness
//! tests and Jepsen: a concurrent workload whose every operation is recorded with its invoke and
//! complete times and an outcome, a seeded nemesis that kills, pauses, partitions and resizes the
//! cluster, and checkers that read the history and the healed cluster's final state and report
//! every anomaly. The checkers are pure functions of what was recorded; each has a self-test that
//! feeds it a doctored history. It must never run against a cluster it did not start: it kills
//! processes and rewrites firewall rules.

pub mod campaign;
pub mod check;
pub mod client;
pub mod cluster;
pub mod firewall;
pub mod fronts;
pub mod history;
pub mod nemesis;
pub mod observe;
pub mod procs;
pub mod proxy;
pub mod report;
pub mod restore;
pub mod setup;
pub mod workload;
