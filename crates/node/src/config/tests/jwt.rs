//! JWT issuers from the file's `[[jwt]]` tables.

use crate::config::RawServeConfig;
use gatehouse_gateway::auth::{JwtIssuerConfig, JwtKeySource};
use std::path::Path;

#[test]
fn jwt_issuers_are_read_from_the_file_with_their_defaults() {
    let file: RawServeConfig = toml::from_str(
        "node-id = 1\ndata-dir = \"/d\"\n\n[[jwt]]\nissuer = \"https://idp.example\"\n\
         audience = \"gatehouse\"\nalgorithms = [\"RS256\"]\n\
         jwks-file = \"/etc/idp.jwks.json\"\n",
    )
    .unwrap();
    let config = RawServeConfig::default().over(file).validate(None).unwrap();
    assert_eq!(config.jwt.len(), 1);
    let issuer = &config.jwt[0];
    assert_eq!(issuer.audience.as_deref(), Some("gatehouse"));
    assert_eq!(issuer.leeway_secs, 30);
    assert_eq!(
        issuer.key_source(),
        Some(JwtKeySource::Jwks(Path::new("/etc/idp.jwks.json")))
    );
}

#[test]
fn jwt_issuers_with_confusable_or_missing_keys_are_refused() {
    let issuer = |algorithms: &[&str], secret: bool, public: bool| JwtIssuerConfig {
        issuer: "https://idp.example".into(),
        algorithms: algorithms.iter().map(|a| a.to_string()).collect(),
        hs256_secret_file: secret.then(|| "/s".into()),
        public_key_file: public.then(|| "/p.pem".into()),
        ..Default::default()
    };
    let raw = RawServeConfig {
        node_id: Some(1),
        data_dir: Some("/d".into()),
        jwt: vec![
            issuer(&["RS256", "HS256"], false, true),
            issuer(&["none"], true, false),
            issuer(&["RS256"], true, false),
            issuer(&["RS256"], true, true),
            issuer(&["XY999"], false, true),
        ],
        ..Default::default()
    };
    let errors = raw.validate(None).unwrap_err().0;
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        has("jwt[0].algorithms: HS256 is a shared-secret algorithm"),
        "{errors:?}"
    );
    assert!(
        has("jwt[1].algorithms: \"none\" is never accepted"),
        "{errors:?}"
    );
    assert!(
        has("jwt[2].algorithms: RS256 needs a public key"),
        "{errors:?}"
    );
    assert!(has("jwt[3]: give exactly one of"), "{errors:?}");
    assert!(
        has("jwt[4].algorithms: \"XY999\" is not a JWS algorithm"),
        "{errors:?}"
    );
    assert!(
        has("jwt[1].issuer: \"https://idp.example\" is configured twice"),
        "{errors:?}"
    );
}
