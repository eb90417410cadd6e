//! Fuzzes bearer authentication (`Authenticator::authenticate_bearer` and `_http`), the JWT
//! verification every HTTP front and gRPC service runs first, with three issuers (HS256 secret,
//! RS256 and ES256 public keys): signed tokens with generated claims, signed tokens with one
//! character changed, removed or added, tokens signed with the wrong key, and random strings
//! and header values.
//!
//! Properties: a token is accepted exactly when its signature is the issuer's and its claims
//! pass (exp and nbf with the leeway, iss, aud, a non-blank sub, a well-formed act), and then
//! names the principal and end user its claims say; any change to a signed token's text is
//! refused; a token signed with another issuer's key, or another algorithm, is refused; random
//! input is refused without a panic.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use gatehouse_gateway::auth::{Authenticator, JwtIssuerConfig};
use gatehouse_registry::Registry;
use gatehouse_testkit::fuzz::config;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

const HS: &str = "https://hs.example";
const RS: &str = "https://rs.example";
const ES: &str = "https://es.example";
const LEEWAY: u64 = 30;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/jwt")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).expect("a test key")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

struct World {
    auth: Authenticator,
    registry: Registry,
    keys: Vec<(&'static str, Algorithm, EncodingKey)>,
    /// One token per issuer, signed once (RSA signing is slow in debug builds).
    signed: Vec<String>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let issuer = |iss: &str, alg: &str, key: &str| {
            let mut config = JwtIssuerConfig {
                issuer: iss.into(),
                audience: Some("gatehouse".into()),
                algorithms: vec![alg.into()],
                leeway_secs: LEEWAY,
                ..JwtIssuerConfig::default()
            };
            match alg {
                "HS256" => config.hs256_secret_file = Some(fixture(key)),
                _ => config.public_key_file = Some(fixture(key)),
            }
            config
        };
        let auth = Authenticator::new(&[
            issuer(HS, "HS256", "test-only-hs256.secret"),
            issuer(RS, "RS256", "test-only-rsa-public.pem"),
            issuer(ES, "ES256", "test-only-ec-p256-public.pem"),
        ])
        .expect("the issuers load");
        let principal = |name: &str, iss: &str| {
            format!(
                "---\napiVersion: gatehouse.dev/v1\nkind: Principal\nmetadata: {{name: {name}}}\n\
                 spec: {{jwt: {{issuer: '{iss}', subject: '*'}}, roles: {{acme: [agent]}}}}\n"
            )
        };
        let registry = gatehouse_testkit::yaml::registry(&format!(
            "{}{}{}{}",
            gatehouse_testkit::yaml::tenant("acme"),
            principal("hs-anyone", HS),
            principal("rs-anyone", RS),
            principal("es-anyone", ES),
        ));
        let secret = read("test-only-hs256.secret").trim_ascii_end().to_vec();
        let keys = vec![
            (HS, Algorithm::HS256, EncodingKey::from_secret(&secret)),
            (
                RS,
                Algorithm::RS256,
                EncodingKey::from_rsa_pem(&read("test-only-rsa-private.pem")).expect("RSA"),
            ),
            (
                ES,
                Algorithm::ES256,
                EncodingKey::from_ec_pem(&read("test-only-ec-p256-private.pem")).expect("EC"),
            ),
        ];
        let signed = keys
            .iter()
            .map(|(iss, alg, key)| sign(*alg, key, &good_claims(iss, "dana")))
            .collect();
        World {
            auth,
            registry,
            keys,
            signed,
        }
    })
}

fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, key).expect("signs")
}

fn good_claims(iss: &str, sub: &str) -> Value {
    json!({"iss": iss, "sub": sub, "aud": "gatehouse", "exp": now() + 3600})
}

fn authenticate(token: &str) -> Result<gatehouse_gateway::auth::Caller, String> {
    let w = world();
    w.auth
        .authenticate_bearer(&w.registry, Some(token))
        .map_err(|e| e.message)
}

/// A claim and whether the issuer accepts it, by the claim's own rule; mostly an accepted one,
/// so that whole tokens are accepted often enough to check what they say.
fn claim(options: Vec<(Option<Value>, bool)>) -> impl Strategy<Value = (Option<Value>, bool)> {
    let (good, bad): (Vec<_>, Vec<_>) = options.into_iter().partition(|(_, ok)| *ok);
    prop_oneof![4 => prop::sample::select(good), 1 => prop::sample::select(bad)]
}

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{0,12}", "[ \t\u{a0}\u{2028}\u{feff}é𝄞\"\\\\.]{0,6}"]
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn a_token_is_accepted_exactly_when_its_claims_pass(
        exp in claim(vec![(None, false), (Some(json!(now() - 3600)), false),
            (Some(json!(now() - 10)), true), (Some(json!(now() + 3600)), true), (Some(json!("soon")), false)]),
        nbf in claim(vec![(None, true), (Some(json!(now() + 3600)), false),
            (Some(json!(now() + 10)), true), (Some(json!(now() - 3600)), true)]),
        iss in claim(vec![(Some(json!(HS)), true), (Some(json!(RS)), false),
            (Some(json!("https://evil.example")), false), (None, false), (Some(json!(7)), false)]),
        aud in claim(vec![(None, false), (Some(json!("gatehouse")), true), (Some(json!("other")), false),
            (Some(json!(["other", "gatehouse"])), true), (Some(json!(["other"])), false)]),
        sub in prop_oneof![8 => odd_string().prop_map(Value::from), 1 => Just(json!(42)), 1 => Just(Value::Null)],
        act in prop_oneof![4 => Just(None), 1 => Just(Some(Value::Null)), 1 => Just(Some(json!("peer"))),
            4 => odd_string().prop_map(|s| Some(json!({"sub": s}))), 1 => Just(Some(json!({"sub": 1})))],
        extra in prop::collection::btree_map("[a-z]{1,6}", odd_string(), 0..3),
    ) {
        let mut claims = json!({});
        for (name, (value, _)) in [("exp", &exp), ("nbf", &nbf), ("iss", &iss), ("aud", &aud)] {
            if let Some(value) = value {
                claims[name] = value.clone();
            }
        }
        for (name, value) in &extra {
            if !["exp", "nbf", "iss", "aud", "sub", "act", "iat"].contains(&name.as_str()) {
                claims[name] = json!(value);
            }
        }
        if !sub.is_null() {
            claims["sub"] = sub.clone();
        }
        if let Some(act) = &act {
            claims["act"] = act.clone();
        }
        let non_blank = |v: &Value| v.as_str().is_some_and(|s| !s.trim().is_empty());
        let act_ok = match &act {
            None | Some(Value::Null) => true,
            Some(a) => a.get("sub").is_some_and(non_blank),
        };
        let accepted = exp.1 && nbf.1 && iss.1 && aud.1 && non_blank(&sub) && act_ok;
        let (_, alg, key) = &world().keys[0];
        let result = authenticate(&sign(*alg, key, &claims));
        prop_assert_eq!(result.is_ok(), accepted, "{} -> {:?}", claims, result.as_ref().err());
        if let Ok(caller) = result {
            prop_assert_eq!(caller.name.as_str(), "hs-anyone");
            prop_assert_eq!(caller.end_user.as_deref(), sub.as_str());
        }
    }

    #[test]
    fn any_change_to_a_signed_token_is_refused(
        which in 0usize..3,
        sub in odd_string().prop_filter("not blank", |s| !s.trim().is_empty()),
        at in any::<prop::sample::Index>(),
        how in 0u8..4,
        with in prop::sample::select("AQgw_-.=+/%é\u{0}Z9".chars().collect::<Vec<_>>()),
    ) {
        let w = world();
        // HS256 is signed afresh with the generated subject; RSA and EC reuse their one token.
        let token = match which {
            0 => sign(w.keys[0].1, &w.keys[0].2, &good_claims(HS, &sub)),
            n => w.signed[n].clone(),
        };
        prop_assert!(authenticate(&token).is_ok());
        let mut chars: Vec<char> = token.chars().collect();
        let i = at.index(chars.len());
        match how {
            0 if chars[i] != with => chars[i] = with,
            1 => {
                chars.remove(i);
            }
            2 => chars.insert(i, with),
            _ => chars.truncate(i),
        }
        let changed: String = chars.into_iter().collect();
        prop_assume!(changed != token);
        let result = authenticate(&changed);
        prop_assert!(result.is_err(), "{:?} was accepted", changed);
    }

    #[test]
    fn random_bearer_values_are_refused(
        text in "\\PC{0,80}",
        parts in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..60), 3),
        alg in prop::sample::select(vec!["none", "None", "HS256", "RS256", "ES256", "HS512", "", "EdDSA"]),
        iss in prop::sample::select(vec![HS, RS, ES, "x"]),
        header in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        prop_assert!(authenticate(&text).is_err());
        let segments: Vec<String> = parts.iter().map(|p| URL_SAFE_NO_PAD.encode(p)).collect();
        prop_assert!(authenticate(&segments.join(".")).is_err());
        let forged = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(json!({"alg": alg, "typ": "JWT"}).to_string()),
            URL_SAFE_NO_PAD.encode(good_claims(iss, "dana").to_string()),
            segments[2],
        );
        prop_assert!(authenticate(&forged).is_err());
        if let Ok(value) = http::HeaderValue::from_bytes(&header) {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, value);
            let w = world();
            prop_assert!(w.auth.authenticate_http(&w.registry, &headers).is_err());
        }
    }
}

/// Every issuer's claim signed by every other issuer's key, and the RSA issuer's public key used
/// as an HS256 secret (the classic algorithm confusion): all refused.
#[test]
fn a_token_signed_with_another_issuers_key_is_refused() {
    let w = world();
    for (claimed, _, _) in &w.keys {
        for (signer, alg, key) in &w.keys {
            let result = authenticate(&sign(*alg, key, &good_claims(claimed, "dana")));
            assert_eq!(
                result.is_ok(),
                claimed == signer,
                "{claimed} signed by {signer}"
            );
        }
    }
    let pem = EncodingKey::from_secret(&read("test-only-rsa-public.pem"));
    assert!(authenticate(&sign(Algorithm::HS256, &pem, &good_claims(RS, "dana"))).is_err());
}
