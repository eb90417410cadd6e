use super::*;
use jsonwebtoken::{Algorithm, AlgorithmFamily, EncodingKey};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

const ISSUER: &str = "https://idp.example";
const OTHER_ISSUER: &str = "https://other.example";
const API_KEY: &str = "gh_0123456789abcdef";
const MULTI_KEY: &str = "gh_fedcba9876543210";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

fn secret() -> Vec<u8> {
    read("test-only-hs256.secret").trim_ascii_end().to_vec()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn registry() -> Registry {
    let text = format!(
        r#"
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: acme}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Tenant
metadata: {{name: globex}}
spec: {{}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: bot}}
spec:
  apiKeySha256: "{bot}"
  roles: {{acme: [agent]}}
  user: john
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: multi}}
spec:
  apiKeySha256: "{multi}"
  roles: {{acme: [agent, approver], globex: [agent]}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: idp-carol}}
spec:
  jwt: {{issuer: "{ISSUER}", subject: carol}}
  roles: {{acme: [agent]}}
---
apiVersion: gatehouse.dev/v1
kind: Principal
metadata: {{name: idp-anyone}}
spec:
  jwt: {{issuer: "{ISSUER}", subject: "*"}}
  roles: {{globex: [agent]}}
"#,
        bot = sha256_hex(API_KEY.as_bytes()),
        multi = sha256_hex(MULTI_KEY.as_bytes()),
    );
    gatehouse_testkit::yaml::registry(&text)
}

fn claims(sub: &str) -> Value {
    json!({"iss": ISSUER, "sub": sub, "aud": "gatehouse", "iat": now(), "exp": now() + 600})
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let key = match alg.family() {
        AlgorithmFamily::Hmac => EncodingKey::from_secret(&secret()),
        AlgorithmFamily::Rsa => {
            EncodingKey::from_rsa_pem(&read("test-only-rsa-private.pem")).unwrap()
        }
        AlgorithmFamily::Ec => {
            EncodingKey::from_ec_pem(&read("test-only-ec-p256-private.pem")).unwrap()
        }
        AlgorithmFamily::Ed => unreachable!("no Ed key among the fixtures"),
    };
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

enum Source {
    Secret,
    RsaPem,
    EcPem,
    Jwks(PathBuf),
}

fn issuer(issuer: &str, algorithms: &[&str], source: Source) -> JwtIssuerConfig {
    let mut config = JwtIssuerConfig {
        issuer: issuer.into(),
        audience: Some("gatehouse".into()),
        algorithms: algorithms.iter().map(|a| a.to_string()).collect(),
        leeway_secs: 30,
        ..Default::default()
    };
    match source {
        Source::Secret => config.hs256_secret_file = Some(fixture("test-only-hs256.secret")),
        Source::RsaPem => config.public_key_file = Some(fixture("test-only-rsa-public.pem")),
        Source::EcPem => config.public_key_file = Some(fixture("test-only-ec-p256-public.pem")),
        Source::Jwks(path) => config.jwks_file = Some(path),
    }
    config
}

fn authenticator(configs: &[JwtIssuerConfig]) -> Authenticator {
    Authenticator::new(configs).expect("the test issuers load")
}

fn refused(result: Result<Caller, AuthError>) -> AuthError {
    match result {
        Ok(caller) => panic!("authenticated as {}", caller.name),
        Err(e) => e,
    }
}

#[test]
fn an_hs256_token_acts_as_the_principal_of_its_subject() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let token = sign(Algorithm::HS256, None, &claims("carol"));
    let caller = auth.authenticate_bearer(&registry(), Some(&token)).unwrap();
    assert_eq!(caller.name, "idp-carol");
    assert_eq!(caller.end_user.as_deref(), Some("carol"));
    assert_eq!(
        caller.credential,
        Credential::Jwt {
            issuer: ISSUER.into(),
            subject: "carol".into(),
        }
    );
    assert!(caller.spec.has_role("acme", Role::Agent));
}

#[test]
fn a_token_with_an_actor_acts_as_the_actors_principal_for_its_subject() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let mut delegated = claims("erin");
    delegated["act"] = json!({"sub": "carol"});
    let caller = auth
        .authenticate_bearer(&registry(), Some(&sign(Algorithm::HS256, None, &delegated)))
        .unwrap();
    assert_eq!(caller.name, "idp-carol", "the actor is the principal");
    assert_eq!(
        caller.end_user.as_deref(),
        Some("erin"),
        "the subject is the user"
    );

    let mut unknown_actor = claims("erin");
    unknown_actor["act"] = json!({"sub": "nobody-declared"});
    // Only the issuer-wide principal matches an undeclared actor.
    let caller = auth
        .authenticate_bearer(
            &registry(),
            Some(&sign(Algorithm::HS256, None, &unknown_actor)),
        )
        .unwrap();
    assert_eq!(caller.name, "idp-anyone");

    let mut empty_actor = claims("erin");
    empty_actor["act"] = json!({"sub": " "});
    let e = refused(auth.authenticate_bearer(
        &registry(),
        Some(&sign(Algorithm::HS256, None, &empty_actor)),
    ));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
}

#[test]
fn rs256_and_es256_tokens_verify_with_pem_public_keys() {
    let registry = registry();
    let rsa = authenticator(&[issuer(ISSUER, &["RS256"], Source::RsaPem)]);
    let token = sign(Algorithm::RS256, None, &claims("carol"));
    assert_eq!(
        rsa.authenticate_bearer(&registry, Some(&token))
            .unwrap()
            .name,
        "idp-carol"
    );
    let ec = authenticator(&[issuer(ISSUER, &["ES256"], Source::EcPem)]);
    let token = sign(Algorithm::ES256, None, &claims("carol"));
    assert_eq!(
        ec.authenticate_bearer(&registry, Some(&token))
            .unwrap()
            .name,
        "idp-carol"
    );
    // The EC issuer does not take the RSA key's tokens, whatever they claim.
    let rsa_token = sign(Algorithm::RS256, None, &claims("carol"));
    let e = refused(ec.authenticate_bearer(&registry, Some(&rsa_token)));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("RS256 is not accepted"), "{}", e.message);
}

#[test]
fn rs256_tokens_verify_with_a_jwks_by_kid_or_by_algorithm() {
    let registry = registry();
    let auth = authenticator(&[issuer(
        ISSUER,
        &["RS256"],
        Source::Jwks(fixture("test-only-rsa.jwks.json")),
    )]);
    let with_kid = sign(Algorithm::RS256, Some("test-only-rsa"), &claims("carol"));
    assert_eq!(
        auth.authenticate_bearer(&registry, Some(&with_kid))
            .unwrap()
            .name,
        "idp-carol"
    );
    let without_kid = sign(Algorithm::RS256, None, &claims("carol"));
    assert!(
        auth.authenticate_bearer(&registry, Some(&without_kid))
            .is_ok()
    );
    let unknown_kid = sign(Algorithm::RS256, Some("rotated-away"), &claims("carol"));
    let e = refused(auth.authenticate_bearer(&registry, Some(&unknown_kid)));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(
        e.message.contains("no key \"rotated-away\""),
        "{}",
        e.message
    );
}

#[test]
fn a_jwks_file_is_read_again_when_it_changes_and_kept_when_it_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idp.jwks.json");
    let real = std::fs::read_to_string(fixture("test-only-rsa.jwks.json")).unwrap();
    std::fs::write(&path, real.replace("test-only-rsa", "old")).unwrap();
    let auth = authenticator(&[issuer(ISSUER, &["RS256"], Source::Jwks(path.clone()))]);
    let registry = registry();
    let token = sign(Algorithm::RS256, Some("test-only-rsa"), &claims("carol"));
    assert!(auth.authenticate_bearer(&registry, Some(&token)).is_err());

    std::fs::write(&path, &real).unwrap();
    assert_eq!(
        auth.authenticate_bearer(&registry, Some(&token))
            .unwrap()
            .name,
        "idp-carol",
        "the rotated key set is read on the next token"
    );

    std::fs::write(&path, "{\"keys\": [").unwrap();
    assert!(
        auth.authenticate_bearer(&registry, Some(&token)).is_ok(),
        "a half-written file keeps the last good keys"
    );
}

#[test]
fn an_expired_token_is_refused_beyond_the_leeway() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let registry = registry();
    let mut old = claims("carol");
    old["exp"] = json!(now() - 3_600);
    let e = refused(auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &old))));
    assert_eq!(e.kind, AuthErrorKind::Expired);
    let mut just = claims("carol");
    just["exp"] = json!(now() - 5);
    assert!(
        auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &just)))
            .is_ok(),
        "5 s late is within the 30 s leeway"
    );
    let mut no_exp = claims("carol");
    no_exp.as_object_mut().unwrap().remove("exp");
    let e =
        refused(auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &no_exp))));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("exp"), "{}", e.message);
}

#[test]
fn a_token_not_valid_yet_is_refused() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let mut early = claims("carol");
    early["nbf"] = json!(now() + 3_600);
    let e =
        refused(auth.authenticate_bearer(&registry(), Some(&sign(Algorithm::HS256, None, &early))));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("nbf"), "{}", e.message);
}

#[test]
fn the_audience_is_checked_when_configured() {
    let registry = registry();
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let mut wrong = claims("carol");
    wrong["aud"] = json!("another-service");
    let e =
        refused(auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &wrong))));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(
        e.message.contains("aud must name gatehouse"),
        "{}",
        e.message
    );
    let mut none = claims("carol");
    none.as_object_mut().unwrap().remove("aud");
    assert!(
        auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &none)))
            .is_err(),
        "a configured audience is required"
    );

    let mut open = issuer(ISSUER, &["HS256"], Source::Secret);
    open.audience = None;
    let auth = authenticator(&[open]);
    assert!(
        auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &wrong)))
            .is_ok(),
        "without a configured audience, aud is not checked"
    );
}

#[test]
fn a_token_of_an_issuer_not_configured_is_refused() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let mut foreign = claims("carol");
    foreign["iss"] = json!("https://evil.example");
    let e = refused(
        auth.authenticate_bearer(&registry(), Some(&sign(Algorithm::HS256, None, &foreign))),
    );
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("evil.example"), "{}", e.message);

    let keys_only = Authenticator::api_keys_only();
    let e = refused(keys_only.authenticate_bearer(
        &registry(),
        Some(&sign(Algorithm::HS256, None, &claims("carol"))),
    ));
    assert!(e.message.contains("accepts no JWTs"), "{}", e.message);
}

#[test]
fn a_token_signed_by_another_issuers_key_is_refused() {
    // Both issuers use HS256; a token claiming ISSUER but signed with OTHER_ISSUER's secret fails.
    let dir = tempfile::tempdir().unwrap();
    let other_secret = dir.path().join("other.secret");
    std::fs::write(&other_secret, "x".repeat(40)).unwrap();
    let mut other = issuer(OTHER_ISSUER, &["HS256"], Source::Secret);
    other.hs256_secret_file = Some(other_secret);
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret), other]);
    let forged = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        &claims("carol"),
        &EncodingKey::from_secret("x".repeat(40).as_bytes()),
    )
    .unwrap();
    let e = refused(auth.authenticate_bearer(&registry(), Some(&forged)));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("signature"), "{}", e.message);
}

#[test]
fn an_hs256_token_keyed_with_the_rsa_public_key_is_refused() {
    let auth = authenticator(&[issuer(ISSUER, &["RS256"], Source::RsaPem)]);
    let confused = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        &claims("carol"),
        &EncodingKey::from_secret(&read("test-only-rsa-public.pem")),
    )
    .unwrap();
    let e = refused(auth.authenticate_bearer(&registry(), Some(&confused)));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("HS256 is not accepted"), "{}", e.message);

    // Nor can an issuer be configured to take HS256 with a public key.
    let err =
        Authenticator::new(&[issuer(ISSUER, &["RS256", "HS256"], Source::RsaPem)]).unwrap_err();
    assert!(
        format!("{err:#}").contains("never verified with a public key"),
        "{err:#}"
    );
}

#[test]
fn an_unsigned_token_is_refused() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    use base64::Engine;
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let unsigned = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&claims("carol"))
    );
    let e = refused(auth.authenticate_bearer(&registry(), Some(&unsigned)));
    assert_eq!(e.kind, AuthErrorKind::Invalid);
    assert!(e.message.contains("algorithm"), "{}", e.message);
}

#[test]
fn unknown_subjects_act_as_the_issuer_wide_principal_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other_secret = dir.path().join("other.secret");
    std::fs::write(&other_secret, "y".repeat(32)).unwrap();
    let mut other = issuer(OTHER_ISSUER, &["HS256"], Source::Secret);
    other.hs256_secret_file = Some(other_secret);
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret), other]);
    let registry = registry();

    let caller = auth
        .authenticate_bearer(
            &registry,
            Some(&sign(Algorithm::HS256, None, &claims("dave"))),
        )
        .unwrap();
    assert_eq!(caller.name, "idp-anyone");
    assert_eq!(caller.end_user.as_deref(), Some("dave"));
    let e = refused(
        auth.authenticate_bearer(&registry, Some(&sign(Algorithm::HS256, None, &claims("")))),
    );
    assert_eq!(e.kind, AuthErrorKind::Invalid, "an empty sub names no user");

    // OTHER_ISSUER has no principal at all, not even an issuer-wide one.
    let mut foreign = claims("carol");
    foreign["iss"] = json!(OTHER_ISSUER);
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        &foreign,
        &EncodingKey::from_secret("y".repeat(32).as_bytes()),
    )
    .unwrap();
    let e = refused(auth.authenticate_bearer(&registry, Some(&token)));
    assert_eq!(e.kind, AuthErrorKind::UnknownPrincipal);
    assert!(e.message.contains("\"carol\""), "{}", e.message);
}

#[test]
fn key_files_are_checked_when_the_authenticator_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "too short\n").unwrap();
    let mut config = issuer(ISSUER, &["HS256"], Source::Secret);
    config.hs256_secret_file = Some(short);
    let err = Authenticator::new(&[config]).unwrap_err();
    assert!(format!("{err:#}").contains("at least 32 bytes"), "{err:#}");

    let mut missing = issuer(ISSUER, &["RS256"], Source::RsaPem);
    missing.public_key_file = Some(dir.path().join("absent.pem"));
    assert!(Authenticator::new(&[missing]).is_err());

    let err = Authenticator::new(&[issuer(ISSUER, &["ES256"], Source::RsaPem)]).unwrap_err();
    assert!(
        format!("{err:#}").contains("cannot verify ES256"),
        "{err:#}"
    );
}

fn headers(authorization: Option<&str>) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    if let Some(value) = authorization {
        headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
    }
    headers
}

#[test]
fn api_keys_authenticate_http_requests_with_the_bound_user() {
    let auth = Authenticator::api_keys_only();
    let registry = registry();
    let caller = auth
        .authenticate_http(&registry, &headers(Some(&format!("Bearer {API_KEY}"))))
        .unwrap();
    assert_eq!(caller.name, "bot");
    assert_eq!(caller.end_user.as_deref(), Some("john"));
    assert_eq!(caller.credential, Credential::ApiKey);
    let lower = auth
        .authenticate_http(&registry, &headers(Some(&format!("bearer {MULTI_KEY}"))))
        .unwrap();
    assert_eq!(lower.name, "multi");
    assert_eq!(lower.end_user, None);

    let e = refused(auth.authenticate_http(&registry, &headers(None)));
    assert_eq!(e.kind, AuthErrorKind::Missing);
    let e = refused(auth.authenticate_http(&registry, &headers(Some("Basic Ym90OnB3"))));
    assert_eq!(e.kind, AuthErrorKind::Missing);
    let e = refused(auth.authenticate_http(&registry, &headers(Some("Bearer gh_nope"))));
    assert_eq!(e.kind, AuthErrorKind::UnknownPrincipal);
    let e = refused(auth.authenticate_http(&registry, &headers(Some("Bearer "))));
    assert_eq!(e.kind, AuthErrorKind::Missing);
}

#[test]
fn grpc_callers_use_api_keys_and_the_same_jwt_issuers_as_http() {
    let auth = authenticator(&[issuer(ISSUER, &["HS256"], Source::Secret)]);
    let grpc = |token: &str| {
        let mut metadata = MetadataMap::new();
        metadata.insert("authorization", format!("Bearer {token}").parse().unwrap());
        auth.authenticate_grpc(&registry(), &metadata)
    };
    let caller = grpc(API_KEY).unwrap();
    assert_eq!(caller.name, "bot");
    assert_eq!(caller.end_user.as_deref(), Some("john"));
    let caller = grpc(&sign(Algorithm::HS256, None, &claims("carol"))).unwrap();
    assert_eq!(caller.name, "idp-carol");
    assert_eq!(caller.person(), "carol");
    let e = refused(auth.authenticate_grpc(&registry(), &MetadataMap::new()));
    assert_eq!(e.kind, AuthErrorKind::Missing);
    let e = refused(grpc("gate_not-a-known-key"));
    assert_eq!(e.message, "unknown API key");
}

#[test]
fn the_challenge_names_the_error_only_when_a_credential_came() {
    let missing = AuthError {
        kind: AuthErrorKind::Missing,
        message: "no bearer token".into(),
    };
    assert_eq!(missing.www_authenticate(), "Bearer realm=\"gatehouse\"");
    let expired = AuthError {
        kind: AuthErrorKind::Expired,
        message: "the token has \"expired\"\n".into(),
    };
    assert_eq!(
        expired.www_authenticate(),
        "Bearer realm=\"gatehouse\", error=\"invalid_token\", \
         error_description=\"the token has 'expired'?\""
    );
}

fn caller(name: &str) -> Caller {
    let registry = registry();
    let key = match name {
        "bot" => API_KEY,
        _ => MULTI_KEY,
    };
    Authenticator::api_keys_only()
        .authenticate_bearer(&registry, Some(key))
        .unwrap()
}

#[test]
fn the_agent_tenant_is_the_only_one_or_the_one_requested() {
    let bot = caller("bot");
    assert_eq!(agent_tenant(&bot, None), Ok("acme".into()));
    assert_eq!(agent_tenant(&bot, Some("acme")), Ok("acme".into()));
    let e = agent_tenant(&bot, Some("globex")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "bot is not an agent of tenant \"globex\"; its agent tenants: acme"
    );

    let multi = caller("multi");
    let e = agent_tenant(&multi, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "multi is an agent of several tenants (acme, globex): name one in the \
         Gatehouse-Tenant header"
    );
    assert_eq!(agent_tenant(&multi, Some("globex")), Ok("globex".into()));

    let mut approver_only = caller("bot");
    approver_only.spec.roles =
        std::collections::BTreeMap::from([("acme".to_owned(), vec![Role::Approver])]);
    assert_eq!(
        agent_tenant(&approver_only, None),
        Err(TenantChoice::NoAgentRole {
            principal: "bot".into()
        })
    );
}
