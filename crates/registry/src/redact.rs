//! Redaction of URLs before they are shown: in errors an agent reads, log lines, spans and audit.
//! An upstream's URL is the admin's declaration and may carry a secret by mistake (a password in
//! its userinfo, an `api_key=` in its query); transport errors (reqwest, rmcp, a2a-client) embed
//! the URL they failed on. Whatever reaches a person or a file goes through here first.
//!
//! Redaction is textual, not a parse and re-serialisation: the URL a person reads is the one
//! declared, with only the secrets taken out. Userinfo is dropped whole (a user name alone can
//! be a token), and the value of every query or fragment parameter whose name looks secret is
//! replaced by [`REDACTED`].

/// What a secret-looking parameter's value becomes.
pub const REDACTED: &str = "redacted";

/// Parameter names that are secret whatever else they say (after lower-casing, `-` as `_`).
const SECRET_NAMES: [&str; 4] = ["sig", "code", "auth", "pwd"];

/// Parts that make a parameter name secret wherever they appear in it: `api_key`, `apikey`,
/// `access_token`, `x-amz-signature`, `client_secret`, `session_id`, `password`.
const SECRET_PARTS: [&str; 10] = [
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "signature",
    "credential",
    "session",
    "authorization",
    "jwt",
];

/// `url` with its userinfo dropped and secret-looking query and fragment values replaced. Text
/// that is not an `scheme://` URL comes back as it is.
pub fn url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest_start = scheme_end + 3;
    let rest = &url[rest_start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..rest_start]);
    out.push_str(host);
    let tail = &rest[authority_end..];
    let (before_fragment, fragment) = match tail.find('#') {
        Some(i) => (&tail[..i], Some(&tail[i + 1..])),
        None => (tail, None),
    };
    match before_fragment.find('?') {
        Some(i) => {
            out.push_str(&before_fragment[..=i]);
            out.push_str(&parameters(&before_fragment[i + 1..]));
        }
        None => out.push_str(before_fragment),
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(&parameters(fragment));
    }
    out
}

/// Only where `url` points: its scheme and host (userinfo dropped), and `/…` for the path,
/// query and fragment it had. For URLs whose path is itself a secret (a chat webhook's token).
pub fn origin(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "…".to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host = authority
        .rfind('@')
        .map_or(authority, |at| &authority[at + 1..]);
    let more = if authority_end < rest.len() {
        "/…"
    } else {
        ""
    };
    format!("{}{host}{more}", &url[..scheme_end + 3])
}

/// `message` with every `http://` or `https://` URL in it redacted as [`url`] does. A URL ends
/// at white space or at a quote, bracket or angle bracket, as error messages and log lines wrap
/// them.
pub fn text(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = next_url(rest) {
        out.push_str(&rest[..start]);
        let candidate = &rest[start..];
        let end = candidate
            .find(|c: char| c.is_whitespace() || "\"'<>()[]{}`|\\^".contains(c))
            .unwrap_or(candidate.len());
        out.push_str(&url(&candidate[..end]));
        rest = &candidate[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `url` carries userinfo (`user@` or `user:password@`) in its authority.
pub fn has_userinfo(url: &str) -> bool {
    let Some(scheme_end) = url.find("://") else {
        return false;
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..authority_end].contains('@')
}

/// Whether a query or fragment parameter of this name holds a secret.
pub fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase().replace('-', "_");
    SECRET_NAMES.contains(&name.as_str()) || SECRET_PARTS.iter().any(|part| name.contains(part))
}

/// The first `http://` or `https://` in `text`, in any case.
fn next_url(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    [lower.find("http://"), lower.find("https://")]
        .into_iter()
        .flatten()
        .min()
}

/// `a=1&api_key=x` -> `a=1&api_key=redacted`; parameters without `=` are kept.
fn parameters(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !value.is_empty() && is_secret_parameter(&decoded(name)) => {
                format!("{name}={REDACTED}")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A parameter name with its percent-escapes decoded (`api%5Fkey` is `api_key`); bytes that do
/// not decode are kept as they are.
fn decoded(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_keeps_only_scheme_and_host() {
        assert_eq!(
            origin("https://hooks.slack.com/services/T0/B0/XXXX"),
            "https://hooks.slack.com/…"
        );
        assert_eq!(
            origin("http://u:p@h.example:8080?k=v"),
            "http://h.example:8080/…"
        );
        assert_eq!(origin("https://h.example"), "https://h.example");
        assert_eq!(origin("not a url"), "…");
    }

    #[test]
    fn userinfo_is_dropped_whole() {
        assert_eq!(
            url("https://alice:s3cret@api.example/v1?q=1"),
            "https://api.example/v1?q=1"
        );
        assert_eq!(url("http://ghp_token@host:8080"), "http://host:8080");
        // An @ in the path is no userinfo.
        assert_eq!(url("http://host/users/@me"), "http://host/users/@me");
    }

    #[test]
    fn secret_looking_query_and_fragment_values_are_replaced() {
        assert_eq!(
            url("http://h/p?api_key=abc&page=2&access_token=t&X-Amz-Signature=s&sig=z&flag"),
            "http://h/p?api_key=redacted&page=2&access_token=redacted&X-Amz-Signature=redacted\
             &sig=redacted&flag"
        );
        assert_eq!(
            url("http://h/cb#access_token=t&state=ok"),
            "http://h/cb#access_token=redacted&state=ok"
        );
        assert_eq!(
            url("http://h/?apiKey=1&client_secret=2&password=3&api%5Fkey=4&code=5"),
            "http://h/?apiKey=redacted&client_secret=redacted&password=redacted\
             &api%5Fkey=redacted&code=redacted"
        );
        assert_eq!(url("http://h/?q=token"), "http://h/?q=token");
    }

    #[test]
    fn urls_inside_messages_are_found_and_redacted() {
        let reqwest_like = "error sending request for url (http://u:pw@127.0.0.1:9/x?token=t): \
                            connection refused";
        assert_eq!(
            text(reqwest_like),
            "error sending request for url (http://127.0.0.1:9/x?token=redacted): connection \
             refused"
        );
        assert_eq!(
            text("calling HTTPS://a:b@h/p and \"http://h2/?key=k\""),
            "calling HTTPS://h/p and \"http://h2/?key=redacted\""
        );
        assert_eq!(text("no url here: key=1"), "no url here: key=1");
    }

    #[test]
    fn userinfo_is_detected_in_the_authority_only() {
        assert!(has_userinfo("https://a:b@h/"));
        assert!(has_userinfo("https://token@h"));
        assert!(!has_userinfo("https://h/@me?x=a@b"));
        assert!(!has_userinfo("not a url"));
    }
}
