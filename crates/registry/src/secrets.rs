//! Secret screening for skill instructions.
//!
//! Instructions are injected verbatim into agents' context, so a credential pasted into one would
//! reach every agent that receives the skill. Known token formats are matched precisely; free-form
//! `password=` assignments, bearer and basic credentials get a second look so that ordinary prose
//! about passwords and tokens still passes.

use std::fmt;
use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use regex::{Captures, Regex, RegexSet};

/// One kind of credential the screen recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretKind {
    PrivateKey,
    AwsAccessKey,
    GoogleApiKey,
    GitHubToken,
    GitLabToken,
    SlackToken,
    SlackWebhook,
    StripeKey,
    OpenAiKey,
    AnthropicKey,
    NpmToken,
    PyPiToken,
    Jwt,
    BearerToken,
    BasicAuth,
    UrlCredentials,
    PasswordAssignment,
}

impl SecretKind {
    /// A short phrase naming the kind, fit for an error message ("looks like {describe}").
    pub fn describe(self) -> &'static str {
        match self {
            SecretKind::PrivateKey => "a private key block",
            SecretKind::AwsAccessKey => "an AWS access key id",
            SecretKind::GoogleApiKey => "a Google API key",
            SecretKind::GitHubToken => "a GitHub token",
            SecretKind::GitLabToken => "a GitLab token",
            SecretKind::SlackToken => "a Slack token",
            SecretKind::SlackWebhook => "a Slack webhook URL",
            SecretKind::StripeKey => "a Stripe secret key",
            SecretKind::OpenAiKey => "an OpenAI API key",
            SecretKind::AnthropicKey => "an Anthropic API key",
            SecretKind::NpmToken => "an npm access token",
            SecretKind::PyPiToken => "a PyPI API token",
            SecretKind::Jwt => "a JSON Web Token",
            SecretKind::BearerToken => "a bearer token",
            SecretKind::BasicAuth => "HTTP basic credentials",
            SecretKind::UrlCredentials => "a URL with an embedded password",
            SecretKind::PasswordAssignment => "a password or secret assignment",
        }
    }
}

impl fmt::Display for SecretKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// The first credential-looking thing in `text`, if any. Never returns the matched text.
///
/// When several kinds occur, the one reported is the first in a fixed priority list (specific
/// token formats before generic assignments), not the first by position, so the answer does not
/// depend on how the text is laid out.
pub fn find_secret(text: &str) -> Option<SecretKind> {
    let screen = &*SCREEN;
    // One pass over the text tells which patterns can match at all; only those run again to
    // extract captures for the second look. `SetMatches::iter` yields indices in ascending order.
    screen.set.matches(text).iter().find_map(|i| {
        let pattern = &PATTERNS[i];
        screen.regexes[i]
            .captures_iter(text)
            .any(|caps| (pattern.accept)(&caps))
            .then_some(pattern.kind)
    })
}

struct Pattern {
    kind: SecretKind,
    regex: &'static str,
    accept: fn(&Captures<'_>) -> bool,
}

struct Screen {
    set: RegexSet,
    regexes: Vec<Regex>,
}

/// In priority order: `find_secret` reports the first that matches.
static PATTERNS: [Pattern; 17] = [
    Pattern {
        kind: SecretKind::PrivateKey,
        regex: r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----",
        accept: always,
    },
    Pattern {
        kind: SecretKind::AwsAccessKey,
        regex: r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b",
        accept: always,
    },
    Pattern {
        kind: SecretKind::GoogleApiKey,
        regex: r"\bAIza[0-9A-Za-z_\-]{35}",
        accept: always,
    },
    Pattern {
        kind: SecretKind::GitHubToken,
        regex: r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
        accept: always,
    },
    Pattern {
        kind: SecretKind::GitLabToken,
        regex: r"\bgl(?:pat|dt|rt|ptt)-[0-9A-Za-z_\-]{20,}",
        accept: always,
    },
    Pattern {
        kind: SecretKind::SlackToken,
        regex: r"\b(?:xox[abeoprs]-[0-9A-Za-z\-]{10,}|xapp-[0-9]-[0-9A-Za-z\-]{10,})",
        accept: always,
    },
    Pattern {
        kind: SecretKind::SlackWebhook,
        regex: r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
        accept: always,
    },
    Pattern {
        kind: SecretKind::StripeKey,
        regex: r"\b(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
        accept: always,
    },
    // Before OpenAI: both start with `sk-`.
    Pattern {
        kind: SecretKind::AnthropicKey,
        regex: r"\bsk-ant-[A-Za-z0-9_\-]{32,}",
        accept: always,
    },
    Pattern {
        kind: SecretKind::OpenAiKey,
        regex: r"\bsk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{32,}|[A-Za-z0-9]{32,})",
        accept: always,
    },
    Pattern {
        kind: SecretKind::NpmToken,
        regex: r"\bnpm_[A-Za-z0-9]{36}\b",
        accept: always,
    },
    Pattern {
        kind: SecretKind::PyPiToken,
        regex: r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}",
        accept: always,
    },
    // Header and payload are JSON objects, so both base64url segments start with `eyJ` (`{"`).
    Pattern {
        kind: SecretKind::Jwt,
        regex: r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]*",
        accept: always,
    },
    Pattern {
        kind: SecretKind::UrlCredentials,
        regex: r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]+:([^\s/?#@]+)@",
        accept: url_password,
    },
    Pattern {
        kind: SecretKind::BearerToken,
        regex: r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{16,}=*)",
        accept: bearer_token,
    },
    Pattern {
        kind: SecretKind::BasicAuth,
        regex: r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})",
        accept: basic_credentials,
    },
    // The key must end in one of the credential words (so `max_tokens`, `token_limit` and
    // `secretary` do not count); a bare `token` only counts as a whole key.
    Pattern {
        kind: SecretKind::PasswordAssignment,
        regex: r#"(?i)(?:^|[^\w.\-])(?:[\w.\-]*?(?:password|passwd|passphrase|pwd|secret|secret[_\-]?key|secret[_\-]?access[_\-]?key|api[_\-]?key|access[_\-]?key|private[_\-]?key|(?:access|auth|refresh|session|bot|oauth|api)[_\-]?token)|token)["'`*]*\s*(=>|:=|=|:)\s*(["'`]?)([^\s"'`,;]+)"#,
        accept: assignment,
    },
];

static SCREEN: LazyLock<Screen> = LazyLock::new(|| {
    let sources = PATTERNS.iter().map(|p| p.regex);
    Screen {
        set: RegexSet::new(sources.clone()).expect("secret patterns compile"),
        regexes: sources
            .map(|r| Regex::new(r).expect("secret pattern compiles"))
            .collect(),
    }
});

fn always(_: &Captures<'_>) -> bool {
    true
}

fn url_password(caps: &Captures<'_>) -> bool {
    let password = &caps[1];
    password.chars().count() >= 3 && !is_placeholder(password)
}

/// Prose such as "Bearer authentication-required" is one case of letters; a token mixes classes.
fn bearer_token(caps: &Captures<'_>) -> bool {
    let token = caps[1].trim_end_matches('=');
    let classes = [
        u8::is_ascii_lowercase,
        u8::is_ascii_uppercase,
        u8::is_ascii_digit,
    ]
    .iter()
    .filter(|class| token.bytes().any(|b| class(&b)))
    .count();
    classes >= 2 && !is_placeholder(token)
}

/// "Basic authentication" also matches the regex; only a payload that decodes to `user:pass` counts.
fn basic_credentials(caps: &Captures<'_>) -> bool {
    let encoded = &caps[1];
    let Ok(bytes) = STANDARD
        .decode(encoded)
        .or_else(|_| STANDARD_NO_PAD.decode(encoded))
    else {
        return false;
    };
    let Ok(decoded) = String::from_utf8(bytes) else {
        return false;
    };
    match decoded.split_once(':') {
        Some((user, password)) => {
            !user.is_empty()
                && !password.is_empty()
                && !decoded.chars().any(char::is_control)
                && !is_placeholder(password)
        }
        None => false,
    }
}

fn assignment(caps: &Captures<'_>) -> bool {
    let separator = &caps[1];
    let quoted = !caps[2].is_empty();
    let value = caps[3].trim_end_matches(['.', ',', ':', '!', '?', ')', ']', '}']);
    if value.chars().count() < 4 || is_placeholder(value) || is_reference(value) {
        return false;
    }
    if quoted || separator != ":" {
        return true;
    }
    // After a bare colon the "value" is often the next word of a sentence ("Password: required"),
    // so an unquoted value must look machine-made.
    let has_digit = value.chars().any(|c| c.is_ascii_digit());
    let has_symbol = value
        .chars()
        .any(|c| !c.is_alphanumeric() && c != '-' && c != '\'');
    let inner_upper = value.chars().skip(1).any(char::is_uppercase);
    let long_word = value.len() >= 16 && !value.contains('-');
    has_digit || has_symbol || inner_upper || long_word
}

/// Values that stand in for a secret rather than being one.
fn is_placeholder(value: &str) -> bool {
    const WORDS: [&str; 26] = [
        "changeme",
        "change_me",
        "change-me",
        "password",
        "passwd",
        "pass",
        "secret",
        "token",
        "example",
        "redacted",
        "placeholder",
        "null",
        "none",
        "nil",
        "true",
        "false",
        "required",
        "optional",
        "hidden",
        "masked",
        "empty",
        "unset",
        "undefined",
        "string",
        "value",
        "dummy",
    ];
    const PREFIXES: [&str; 7] = [
        "your",
        "example",
        "sample",
        "dummy",
        "fake",
        "placeholder",
        "redacted",
    ];
    // <key>, ${VAR}, $VAR, %VAR%, {{var}}, [REDACTED], (see vault)
    if value.starts_with(['<', '$', '%', '{', '[', '(']) {
        return true;
    }
    // xxxx, ****, ....: masked or elided
    if value
        .chars()
        .all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•' | '#' | '_' | '-'))
    {
        return true;
    }
    // DB_PASSWORD names an environment variable that holds the secret.
    if value.contains('_')
        && value
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return true;
    }
    let lower = value.to_lowercase();
    WORDS.contains(&lower.as_str()) || PREFIXES.iter().any(|p| lower.starts_with(p))
}

/// Values that point at where a secret lives: a path, a URL, an environment or vault reference.
fn is_reference(value: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "/",
        "./",
        "../",
        "~/",
        "env:",
        "env.",
        "process.env",
        "os.environ",
        "secrets.",
    ];
    value.contains("://") || PREFIXES.iter().any(|p| value.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    /// A deterministic run of mixed-case letters and digits, standing in for a token's body.
    fn filler(len: usize) -> String {
        "Ab3dE6gH9jK2mN5pQ8sT1vW4yZ7"
            .chars()
            .cycle()
            .take(len)
            .collect()
    }

    /// Test secrets are assembled at run time so this file does not itself look like it leaks.
    fn samples() -> Vec<(SecretKind, String)> {
        let jwt = format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"HS256","typ":"JWT"}"#),
            URL_SAFE_NO_PAD.encode(r#"{"sub":"1234567890","name":"Ada"}"#),
            filler(43)
        );
        let mut samples = vec![
            (
                SecretKind::AwsAccessKey,
                format!("AKIA{}", "ABCDEFGHIJKLMNOP"),
            ),
            (
                SecretKind::AwsAccessKey,
                format!("ASIA{}", "Z2345678ABCDEFGH"),
            ),
            (SecretKind::GoogleApiKey, format!("AIza{}", filler(35))),
            (
                SecretKind::GitHubToken,
                format!("github_pat_{}_{}", filler(22), filler(59)),
            ),
            (SecretKind::GitLabToken, format!("glpat-{}", filler(20))),
            (
                SecretKind::SlackToken,
                format!("xox{}-{}-{}", "b", "1234567890", filler(24)),
            ),
            (
                SecretKind::SlackWebhook,
                format!(
                    "https://hooks.slack.com/services/T{}/B{}/{}",
                    filler(8),
                    filler(10),
                    filler(24)
                ),
            ),
            (
                SecretKind::StripeKey,
                format!("sk_{}_{}", "live", filler(24)),
            ),
            (
                SecretKind::StripeKey,
                format!("rk_{}_{}", "live", filler(24)),
            ),
            (
                SecretKind::StripeKey,
                format!("sk_{}_{}", "test", filler(24)),
            ),
            (SecretKind::OpenAiKey, format!("sk-{}", filler(48))),
            (SecretKind::OpenAiKey, format!("sk-proj-{}", filler(64))),
            (
                SecretKind::AnthropicKey,
                format!("sk-ant-api03-{}", filler(80)),
            ),
            (SecretKind::NpmToken, format!("npm_{}", filler(36))),
            (
                SecretKind::PyPiToken,
                format!("pypi-{}{}", "AgEIcHlwaS5vcmc", filler(60)),
            ),
            (SecretKind::Jwt, jwt),
            (
                SecretKind::BearerToken,
                format!("Authorization: Bearer {}", filler(32)),
            ),
            (
                SecretKind::BearerToken,
                format!("send `authorization: bearer {}`", filler(20).to_lowercase()),
            ),
            (
                SecretKind::BasicAuth,
                format!(
                    "Authorization: Basic {}",
                    STANDARD.encode("deploy:Tr0ub4dor&3")
                ),
            ),
            (
                SecretKind::UrlCredentials,
                format!(
                    "Connect to postgres://app:{}@db.internal:5432/app",
                    "s3cr3t-Pa55"
                ),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("password={}", "hunter2"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("Log in with pwd: {}", "hunter22"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("DB_PASSWORD: \"{}\"", "correct horse"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("client_secret: {}", "9f8e7d6c5b4a"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("Send header x-api-key: {}", "k3y-for-prod"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!(r#"{{"access_token": "{}"}}"#, "opaque"),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("aws_secret_access_key = {}", filler(40)),
            ),
            (
                SecretKind::PasswordAssignment,
                format!("**Password**: {}", "Sunsh1ne"),
            ),
        ];
        for flavour in ["RSA ", "EC ", "OPENSSH ", "", "ENCRYPTED "] {
            samples.push((
                SecretKind::PrivateKey,
                format!("-----BEGIN {flavour}PRIVATE KEY-----\n{}\n", filler(64)),
            ));
        }
        for prefix in ["ghp", "gho", "ghu", "ghs", "ghr"] {
            samples.push((SecretKind::GitHubToken, format!("{prefix}_{}", filler(36))));
        }
        samples
    }

    #[test]
    fn each_kind_is_detected() {
        for (kind, secret) in samples() {
            assert_eq!(find_secret(&secret), Some(kind), "{secret}");
            let embedded = format!("Before calling the API,\nuse {secret} as the credential.");
            assert_eq!(find_secret(&embedded), Some(kind), "{embedded}");
        }
    }

    #[test]
    fn ordinary_instructions_pass() {
        let benign = [
            "Always include a request ID in API calls.",
            "Use ISO 8601 dates, amounts in EUR.",
            "api-create requires approval for amounts > 10000.",
            "Never ask the user for their password.",
            "Send the token in the Authorization header.",
            "The password field must be set.",
            "Password: required.",
            "Secret: never share it with the user.",
            "Set api_key=<your key> in the request.",
            "password=${DB_PASSWORD}",
            "api_key: YOUR_API_KEY",
            "secret: ***",
            "token: xxxx",
            "password=changeme",
            "access_token: {{ access_token }}",
            "Authorization: Bearer <token>",
            "Authorization: Bearer $TOKEN",
            "Authorization: Bearer YOUR_ACCESS_TOKEN_HERE",
            "Use Basic authentication for the legacy endpoint.",
            "Bearer authentication-required endpoints reject anonymous calls.",
            "Keep answers under max_tokens: 4096 and token_limit=8000.",
            "pwd: /srv/app",
            "The secret lives at https://vault.example.com/v1/secret/app.",
            "Connect with postgres://app@db.internal/app; the password comes from the vault.",
            "Connect with postgres://app:${DB_PASS}@db.internal/app.",
            "Use scikit-learn (sk-learn) for quick models.",
            "Ask the secretary: she knows the schedule.",
            "Refunds over 500 EUR need two approvals; see policy 7.",
            "secret: managed-by-vault",
            "access_token: expires after an hour; use the refresh_token grant.",
            "token_type: Bearer",
            "Password: At least 12 characters.",
        ];
        for text in benign {
            assert_eq!(find_secret(text), None, "{text}");
        }
    }

    #[test]
    fn priority_decides_between_kinds() {
        let aws = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
        let text = format!("password=hunter22 then {aws}");
        assert_eq!(find_secret(&text), Some(SecretKind::AwsAccessKey));

        // A JWT sent as a bearer token is reported as the JWT it is.
        let (_, jwt) = samples()
            .into_iter()
            .find(|(kind, _)| *kind == SecretKind::Jwt)
            .expect("a JWT sample");
        assert_eq!(
            find_secret(&format!("Authorization: Bearer {jwt}")),
            Some(SecretKind::Jwt)
        );
    }

    #[test]
    fn description_never_carries_the_secret() {
        for (_, secret) in samples() {
            let kind = find_secret(&secret).expect("detected");
            let shown = format!("{kind} / {kind:?}");
            assert_eq!(kind.to_string(), kind.describe());
            assert!(!shown.contains(&secret), "{shown}");
            assert!(!shown.contains(&filler(16)), "{shown}");
        }
    }
}
