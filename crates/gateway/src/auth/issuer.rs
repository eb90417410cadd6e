//! A trusted JWT issuer as the node's configuration declares it, and what is wrong with it.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One trusted JWT issuer:
///
/// ```toml
/// [[jwt]]
/// issuer = "https://idp.example"      # the tokens' `iss`, exactly
/// audience = "gatehouse"              # optional: when given, `aud` must name it
/// algorithms = ["RS256"]              # HS256/384/512, RS*, PS*, ES256, ES384; never `none`
/// public-key-file = "/etc/gatehouse/idp.pem"  # or hs256-secret-file, or jwks-file: one of them
/// leeway-secs = 30                    # clock skew allowed on `exp` and `nbf`
/// ```
///
/// A secret file holds the shared secret itself (a trailing newline is not part of it), at least
/// 32 bytes. A public key file is PEM, RSA or EC. A JWKS file is re-read when its modification
/// time changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct JwtIssuerConfig {
    pub issuer: String,
    #[serde(default)]
    pub audience: Option<String>,
    pub algorithms: Vec<String>,
    #[serde(default)]
    pub hs256_secret_file: Option<PathBuf>,
    #[serde(default)]
    pub public_key_file: Option<PathBuf>,
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    #[serde(default = "default_leeway_secs")]
    pub leeway_secs: u64,
}

fn default_leeway_secs() -> u64 {
    30
}

/// Where an issuer's verification keys come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtKeySource<'a> {
    Hs256Secret(&'a Path),
    PublicKey(&'a Path),
    Jwks(&'a Path),
}

impl JwtIssuerConfig {
    /// The key source, when exactly one is given.
    pub fn key_source(&self) -> Option<JwtKeySource<'_>> {
        match (
            &self.hs256_secret_file,
            &self.public_key_file,
            &self.jwks_file,
        ) {
            (Some(p), None, None) => Some(JwtKeySource::Hs256Secret(p)),
            (None, Some(p), None) => Some(JwtKeySource::PublicKey(p)),
            (None, None, Some(p)) => Some(JwtKeySource::Jwks(p)),
            _ => None,
        }
    }

    /// The configured algorithms, or what is wrong with them: an unknown name, `none`, or an
    /// algorithm the key source cannot verify (HMAC only with a secret, never with a public key).
    pub fn parsed_algorithms(&self) -> Result<Vec<jsonwebtoken::Algorithm>, String> {
        use jsonwebtoken::{Algorithm, AlgorithmFamily};
        if self.algorithms.is_empty() {
            return Err("name at least one algorithm".to_owned());
        }
        let source = self.key_source();
        let mut parsed = Vec::with_capacity(self.algorithms.len());
        for name in &self.algorithms {
            if name.eq_ignore_ascii_case("none") {
                return Err("\"none\" is never accepted: tokens must be signed".to_owned());
            }
            let alg: Algorithm = name.parse().map_err(|_| {
                format!("{name:?} is not a JWS algorithm (e.g. RS256, ES256, HS256)")
            })?;
            let hmac = alg.family() == AlgorithmFamily::Hmac;
            match source {
                Some(JwtKeySource::Hs256Secret(_)) if !hmac => {
                    return Err(format!(
                        "{name} needs a public key, but hs256-secret-file gives a shared secret"
                    ));
                }
                Some(JwtKeySource::PublicKey(_) | JwtKeySource::Jwks(_)) if hmac => {
                    return Err(format!(
                        "{name} is a shared-secret algorithm: never verified with a public key"
                    ));
                }
                _ if alg.family() == AlgorithmFamily::Ed => {
                    return Err(format!("{name} is not supported"));
                }
                _ => {}
            }
            parsed.push(alg);
        }
        Ok(parsed)
    }

    /// Every problem with this issuer, each prefixed with `jwt[index]`.
    pub fn problems(&self, index: usize) -> Vec<String> {
        let mut problems = Vec::new();
        let at = format!("jwt[{index}]");
        if self.issuer.trim().is_empty() {
            problems.push(format!("{at}.issuer: required"));
        }
        if self.audience.as_ref().is_some_and(|a| a.trim().is_empty()) {
            problems.push(format!("{at}.audience: must not be empty when given"));
        }
        if self.key_source().is_none() {
            problems.push(format!(
                "{at}: give exactly one of hs256-secret-file, public-key-file, jwks-file"
            ));
        }
        if let Err(e) = self.parsed_algorithms() {
            problems.push(format!("{at}.algorithms: {e}"));
        }
        problems
    }
}
