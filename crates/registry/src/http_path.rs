//! What may fill a `{placeholder}` of a tool's HTTP path. An argument fills exactly one path
//! segment of the request the admin declared: it may never name another path. So a value that
//! is, or decodes to, a dot segment (`.`, `..`), that holds a separator (`/`, `\`) in any
//! percent-encoded form, or that is empty is refused before anything is proposed or sent; what
//! is left is percent-encoded by the executor, and the URL it builds must carry that path
//! unchanged (see `gatehouse-node`'s HTTP executor).
//!
//! Decoding is checked because upstreams and the proxies in front of them decode paths, some of
//! them twice: `%2e%2e`, `%252e%252e` and `%2F` are refused like `..` and `/`.

use serde_json::Value;

/// How many rounds of percent-decoding a value is checked through; a value still changing after
/// that is refused.
const DECODE_ROUNDS: usize = 4;

/// Why a value may not fill a path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentRefusal {
    #[error("must be a string, number or boolean: it fills a path segment")]
    NotScalar,
    #[error("must not be empty: it fills a path segment")]
    Empty,
    #[error("must not be `.` or `..` (in any encoding): it would name another path")]
    DotSegment,
    #[error("must not hold `/` or `\\` (in any encoding): it fills one path segment")]
    Separator,
    #[error("is percent-encoded too many times over")]
    TooDeeplyEncoded,
}

/// The text a JSON argument fills a path placeholder with, once it is known to stay one
/// segment. Strings as they are, numbers and booleans as JSON writes them.
pub fn segment_text(value: &Value) -> Result<String, SegmentRefusal> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        Value::Null | Value::Array(_) | Value::Object(_) => {
            return Err(SegmentRefusal::NotScalar);
        }
    };
    check_segment(text.as_bytes())?;
    Ok(text)
}

/// Refuses a segment that is, or decodes (up to [`DECODE_ROUNDS`] times) to, a dot segment or
/// something holding a separator.
fn check_segment(raw: &[u8]) -> Result<(), SegmentRefusal> {
    if raw.is_empty() {
        return Err(SegmentRefusal::Empty);
    }
    let mut text = raw.to_vec();
    for _ in 0..DECODE_ROUNDS {
        if text.iter().any(|b| matches!(b, b'/' | b'\\')) {
            return Err(SegmentRefusal::Separator);
        }
        // `..;x` is `..` to servers that strip path parameters (Tomcat, Jetty).
        let bare = text.split(|b| *b == b';').next().unwrap_or_default();
        if matches!(bare, b"." | b"..") {
            return Err(SegmentRefusal::DotSegment);
        }
        let decoded = percent_decode(&text);
        if decoded == text {
            return Ok(());
        }
        text = decoded;
    }
    Err(SegmentRefusal::TooDeeplyEncoded)
}

/// One round of percent-decoding; a `%` not followed by two hex digits stays as it is.
fn percent_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let byte = text[i];
        let escaped = (byte == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(decoded) => {
                out.push(decoded);
                i += 3;
            }
            None => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// A problem with the literal part of a declared path: a dot segment in it, or a character
/// that would end the path (`?`, `#`) or that servers read as a separator (`\`).
pub fn literal_path_problem(path: &str) -> Option<&'static str> {
    if path.contains(['?', '#', '\\']) {
        return Some("must not hold '?', '#' or '\\': arguments go in the query by the method");
    }
    let dot = path
        .split('/')
        .any(|segment| check_segment(segment.as_bytes()) == Err(SegmentRefusal::DotSegment));
    dot.then_some("must not hold a '.' or '..' segment")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn ordinary_values_fill_a_segment_as_they_are() {
        for (value, text) in [
            (json!("a.b"), "a.b"),
            (json!("..."), "..."),
            (json!(".hidden"), ".hidden"),
            (json!("a b?c#d"), "a b?c#d"),
            (json!(42), "42"),
            (json!(true), "true"),
            (json!("100%"), "100%"),
        ] {
            assert_eq!(segment_text(&value).as_deref(), Ok(text), "{value}");
        }
    }

    #[test]
    fn dot_segments_separators_and_empty_values_are_refused_in_every_encoding() {
        for (value, why) in [
            (json!("."), SegmentRefusal::DotSegment),
            (json!(".."), SegmentRefusal::DotSegment),
            (json!("%2e%2e"), SegmentRefusal::DotSegment),
            (json!("%2E."), SegmentRefusal::DotSegment),
            (json!(".%2e"), SegmentRefusal::DotSegment),
            (json!("%252e%252e"), SegmentRefusal::DotSegment),
            (json!("..;jsessionid=1"), SegmentRefusal::DotSegment),
            (json!("a/b"), SegmentRefusal::Separator),
            (json!("../x"), SegmentRefusal::Separator),
            (json!("a\\b"), SegmentRefusal::Separator),
            (json!("a%2Fb"), SegmentRefusal::Separator),
            (json!("a%5cb"), SegmentRefusal::Separator),
            (json!("a%252Fb"), SegmentRefusal::Separator),
            (json!(""), SegmentRefusal::Empty),
            (json!(null), SegmentRefusal::NotScalar),
            (json!(["a"]), SegmentRefusal::NotScalar),
            (json!({"a": 1}), SegmentRefusal::NotScalar),
            (json!("%25252525252e"), SegmentRefusal::TooDeeplyEncoded),
        ] {
            assert_eq!(segment_text(&value), Err(why), "{value}");
        }
    }

    #[test]
    fn declared_paths_may_not_hold_dot_segments_or_query_marks() {
        assert_eq!(literal_path_problem("/tenants/{t}/items/{id}.json"), None);
        assert_eq!(literal_path_problem("/v1.2/x/.well-known"), None);
        for bad in [
            "/a/../b",
            "/a/./b",
            "/a/%2e%2E/b",
            "/a?x=1",
            "/a#f",
            "/a\\b",
        ] {
            assert!(literal_path_problem(bad).is_some(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn an_accepted_value_never_decodes_to_a_dot_segment_or_a_separator(
            text in "[./\\\\%2eEfF5cC;a]{0,8}",
        ) {
            if segment_text(&json!(text)).is_ok() {
                let mut t = text.into_bytes();
                loop {
                    prop_assert!(!t.is_empty());
                    prop_assert!(!t.contains(&b'/') && !t.contains(&b'\\'));
                    prop_assert!(t != b"." && t != b"..");
                    let d = percent_decode(&t);
                    if d == t {
                        break;
                    }
                    t = d;
                }
            }
        }
    }
}
