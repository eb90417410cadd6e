//! JWT verification for the configured issuers: each issuer's keys (a shared secret, a PEM public
//! key, or a JWKS file re-read when it changes), the algorithms it may sign with, and the claims
//! checked before a token names anyone.

use super::issuer::{JwtIssuerConfig, JwtKeySource};
use super::{AuthError, AuthErrorKind};
use anyhow::{Context, bail};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Header, Validation};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// RFC 7518 3.2: an HMAC key at least as long as the hash output.
const MIN_SECRET_BYTES: usize = 32;

/// What a verified token says about who sent it.
#[derive(Debug, Deserialize)]
pub(super) struct VerifiedClaims {
    pub sub: String,
    /// RFC 8693 `act`: the party acting for `sub`, such as an A2A peer delegating a user's task.
    #[serde(default)]
    pub act: Option<Actor>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Actor {
    pub sub: String,
}

/// The claim read before verification, only to pick the issuer whose keys verify the token.
#[derive(Deserialize)]
struct UnverifiedIssuer {
    iss: Option<String>,
}

/// The issuer a token claims to come from; nothing in it is trusted yet.
pub(super) fn claimed_issuer(token: &str) -> Result<String, AuthError> {
    let claims: UnverifiedIssuer = jsonwebtoken::dangerous::insecure_decode_claims(token)
        .map_err(|_| invalid("the token's claims are not a JSON object"))?;
    claims
        .iss
        .ok_or_else(|| invalid("the token names no issuer (iss)"))
}

/// The token's header, or why it is not one this node verifies (`alg: none` among others).
pub(super) fn header(token: &str) -> Result<Header, AuthError> {
    jsonwebtoken::decode_header(token)
        .map_err(|_| invalid("the token's header names no supported signing algorithm"))
}

pub(super) struct Issuer {
    pub issuer: String,
    validation: Validation,
    keys: Keys,
}

enum Keys {
    Fixed(DecodingKey),
    Jwks(JwksFile),
}

impl fmt::Debug for Issuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys: a shared secret is one of them.
        let keys = match &self.keys {
            Keys::Fixed(_) => "fixed".to_owned(),
            Keys::Jwks(file) => format!("jwks {}", file.path.display()),
        };
        f.debug_struct("Issuer")
            .field("issuer", &self.issuer)
            .field("algorithms", &self.validation.algorithms)
            .field("keys", &keys)
            .finish()
    }
}

impl Issuer {
    /// Reads the issuer's keys now, so a bad key file stops the node at start. `index` is the
    /// issuer's place in the configuration, for messages.
    pub fn load(index: usize, config: &JwtIssuerConfig) -> anyhow::Result<Issuer> {
        let problems = config.problems(index);
        if !problems.is_empty() {
            bail!("{}", problems.join("; "));
        }
        let algorithms = config.parsed_algorithms().map_err(anyhow::Error::msg)?;
        let keys = match config.key_source() {
            Some(JwtKeySource::Hs256Secret(path)) => Keys::Fixed(read_secret(path)?),
            Some(JwtKeySource::PublicKey(path)) => Keys::Fixed(read_public_key(path, &algorithms)?),
            Some(JwtKeySource::Jwks(path)) => {
                let file = JwksFile::new(path.to_owned());
                file.keys()
                    .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message))?;
                Keys::Jwks(file)
            }
            None => unreachable!("problems() reports a missing or doubled key source"),
        };
        let mut validation = Validation::new(algorithms[0]);
        validation.algorithms = algorithms;
        validation.leeway = config.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        let mut required = vec!["exp", "iss", "sub"];
        match &config.audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        Ok(Issuer {
            issuer: config.issuer.clone(),
            validation,
            keys,
        })
    }

    /// Verifies the signature with one of the issuer's keys, then `exp`, `nbf`, `iss` and
    /// (when configured) `aud`.
    pub fn verify(&self, token: &str, header: &Header) -> Result<VerifiedClaims, AuthError> {
        if !self.validation.algorithms.contains(&header.alg) {
            return Err(invalid(format!(
                "algorithm {:?} is not accepted for issuer {}",
                header.alg, self.issuer
            )));
        }
        match &self.keys {
            Keys::Fixed(key) => self.decode(token, key),
            Keys::Jwks(file) => {
                let keys = file.keys()?;
                let candidates: Vec<&JwksKey> = keys.iter().filter(|k| k.fits(header)).collect();
                if candidates.is_empty() {
                    return Err(invalid(match &header.kid {
                        Some(kid) => format!("issuer {} has no key {kid:?}", self.issuer),
                        None => format!(
                            "issuer {} has no {:?} key (and the token names no kid)",
                            self.issuer, header.alg
                        ),
                    }));
                }
                let mut last = None;
                for candidate in candidates {
                    match self.decode(token, &candidate.key) {
                        Ok(claims) => return Ok(claims),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.expect("at least one candidate was tried"))
            }
        }
    }

    fn decode(&self, token: &str, key: &DecodingKey) -> Result<VerifiedClaims, AuthError> {
        jsonwebtoken::decode::<VerifiedClaims>(token, key, &self.validation)
            .map(|data| data.claims)
            .map_err(|e| self.describe(e.kind()))
    }

    fn describe(&self, kind: &ErrorKind) -> AuthError {
        match kind {
            ErrorKind::ExpiredSignature => AuthError {
                kind: AuthErrorKind::Expired,
                message: "the token has expired".to_owned(),
            },
            ErrorKind::ImmatureSignature => invalid("the token is not valid yet (nbf)"),
            ErrorKind::InvalidSignature => invalid("the token's signature does not verify"),
            ErrorKind::InvalidAudience => invalid(format!(
                "the token is not meant for this gateway (aud must name {})",
                self.validation
                    .aud
                    .iter()
                    .flatten()
                    .next()
                    .map_or("nothing", String::as_str)
            )),
            ErrorKind::InvalidIssuer => invalid("the token's issuer does not match"),
            ErrorKind::MissingRequiredClaim(claim) => {
                invalid(format!("the token lacks the {claim} claim"))
            }
            ErrorKind::InvalidClaimFormat(claim) => {
                invalid(format!("the token's {claim} claim is malformed"))
            }
            ErrorKind::InvalidAlgorithm | ErrorKind::InvalidKeyFormat => {
                invalid("the token's algorithm does not fit the issuer's key".to_owned())
            }
            _ => invalid("the token is malformed"),
        }
    }
}

fn invalid(message: impl Into<String>) -> AuthError {
    AuthError {
        kind: AuthErrorKind::Invalid,
        message: message.into(),
    }
}

fn read_secret(path: &Path) -> anyhow::Result<DecodingKey> {
    let mut secret = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        secret.pop();
    }
    if secret.len() < MIN_SECRET_BYTES {
        bail!(
            "{}: an HS256 secret needs at least {MIN_SECRET_BYTES} bytes, this one has {}",
            path.display(),
            secret.len()
        );
    }
    Ok(DecodingKey::from_secret(&secret))
}

fn read_public_key(path: &Path, algorithms: &[Algorithm]) -> anyhow::Result<DecodingKey> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let key = DecodingKey::from_rsa_pem(&pem)
        .or_else(|_| DecodingKey::from_ec_pem(&pem))
        .map_err(|_| anyhow::anyhow!("{}: not a PEM RSA or EC public key", path.display()))?;
    for alg in algorithms {
        if alg.family() != key.family() {
            bail!(
                "{}: a {:?} key cannot verify {alg:?} tokens",
                path.display(),
                key.family()
            );
        }
    }
    Ok(key)
}

/// A JWKS file and the keys last read from it, re-read when its modification time or length
/// changes. A file that cannot be read or parsed keeps the last good keys in service.
struct JwksFile {
    path: PathBuf,
    cached: Mutex<Option<Loaded>>,
}

struct Loaded {
    stamp: (SystemTime, u64),
    keys: Arc<Vec<JwksKey>>,
}

struct JwksKey {
    kid: Option<String>,
    alg: Option<Algorithm>,
    key: DecodingKey,
}

impl JwksKey {
    fn fits(&self, header: &Header) -> bool {
        let kid = match (&header.kid, &self.kid) {
            (Some(wanted), Some(have)) => wanted == have,
            (Some(_), None) => false,
            (None, _) => true,
        };
        kid && self.key.family() == header.alg.family() && self.alg.is_none_or(|a| a == header.alg)
    }
}

impl JwksFile {
    fn new(path: PathBuf) -> Self {
        JwksFile {
            path,
            cached: Mutex::new(None),
        }
    }

    fn keys(&self) -> Result<Arc<Vec<JwksKey>>, AuthError> {
        let stamp = std::fs::metadata(&self.path)
            .and_then(|m| Ok((m.modified()?, m.len())))
            .map_err(|e| e.to_string());
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let (Ok(stamp), Some(loaded)) = (&stamp, cached.as_ref())
            && loaded.stamp == *stamp
        {
            return Ok(loaded.keys.clone());
        }
        let read = stamp.and_then(|stamp| Ok((stamp, read_jwks(&self.path)?)));
        match read {
            Ok((stamp, keys)) => {
                let keys = Arc::new(keys);
                *cached = Some(Loaded {
                    stamp,
                    keys: keys.clone(),
                });
                Ok(keys)
            }
            Err(e) => match cached.as_ref() {
                Some(loaded) => {
                    tracing::warn!(path = %self.path.display(), error = %e, "JWKS file unreadable; keeping the keys read before");
                    Ok(loaded.keys.clone())
                }
                None => Err(invalid(format!("the issuer's keys are unavailable: {e}"))),
            },
        }
    }
}

/// The signing keys of a JWKS: RSA and EC public keys meant for signatures. Shared-secret
/// (`oct`) keys are skipped: a JWKS is public, so an HMAC key in it is no secret.
fn read_jwks(path: &Path) -> Result<Vec<JwksKey>, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let set: JwkSet = serde_json::from_slice(&text).map_err(|e| format!("not a JWKS: {e}"))?;
    let keys: Vec<JwksKey> = set
        .keys
        .iter()
        .filter(|jwk| {
            matches!(
                jwk.algorithm,
                AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_)
            ) && jwk
                .common
                .public_key_use
                .as_ref()
                .is_none_or(|u| *u == PublicKeyUse::Signature)
        })
        .filter_map(|jwk| {
            Some(JwksKey {
                kid: jwk.common.key_id.clone(),
                alg: match jwk.common.key_algorithm {
                    Some(alg) => Some(alg.to_string().parse().ok()?),
                    None => None,
                },
                key: DecodingKey::from_jwk(jwk).ok()?,
            })
        })
        .collect();
    if keys.is_empty() {
        return Err("no RSA or EC signing key in the JWKS".to_owned());
    }
    Ok(keys)
}
