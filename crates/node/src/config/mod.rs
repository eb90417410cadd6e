//! `gatehouse serve` configuration: a TOML file whose keys are the flags' names, `GATEHOUSE_*`
//! environment variables over the file, flags over both, defaults under all, and one `validate`
//! that reports every problem at once.
//!
//! `raw` is the shape the file and the flags share and how one layer goes over another; `env`
//! reads the environment into that shape; `validate` makes it a `ServeConfig` (`serve`) in named
//! steps, the TLS, JWT and OTLP steps in files of their own; `problems` gathers what every step
//! found wrong.

mod env;
mod jwt;
mod otlp;
mod problems;
mod raw;
mod serve;
mod tls;
mod validate;

#[cfg(test)]
mod tests;

pub use env::{EnvSettings, NOT_SERVER_SETTINGS};
pub use otlp::DEFAULT_OTLP_SERVICE_NAME;
pub use problems::ConfigErrors;
pub use raw::RawServeConfig;
pub use serve::{
    A2aAdvertised, DEFAULT_READY_MAX_LAG, JoinKey, MAX_HTTP_THREADS, RaftTimings, ServeConfig,
    Start,
};
pub use validate::MAX_APPROVAL_WAIT;
