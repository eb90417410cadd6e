//! The configuration's tests, one file per concern.

mod env;
mod jwt;
mod otlp;
mod raw;
mod tls;
mod validate;

use super::{ConfigErrors, RawServeConfig};

/// The settings these variables give, as if they were the process environment.
fn env(vars: &[(&str, &str)]) -> Result<RawServeConfig, ConfigErrors> {
    RawServeConfig::from_env(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
        .map(|settings| settings.raw)
}
