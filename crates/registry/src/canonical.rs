//! Canonical JSON in the manner of RFC 8785 (JCS), and the hashes built on it.
//!
//! An approval is given for exact arguments: the call record keeps their canonical text and its
//! SHA-256, and an execution must present arguments with the same hash. The text must therefore
//! not depend on key order, white space or how a number happened to be spelt (`1.0` vs `1`).
//!
//! One deliberate difference from JCS: integers that serde_json holds as `i64`/`u64` print exactly,
//! where JCS would first round them to the nearest double. Integers within ±2^53 print the same
//! either way.

use std::fmt::Write as _;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// The RFC 8785 canonical text of `value`: object members sorted by the UTF-16 code units of their
/// names, no white space, strings with minimal escaping, numbers in ECMAScript Number-to-string form.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// SHA-256 of the canonical text of `value`, lower-case hex (64 chars).
pub fn args_sha256(value: &Value) -> String {
    sha256_hex(canonical_json(value).as_bytes())
}

/// SHA-256 of raw bytes (for state digests etc.), lower-case hex (64 chars).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// `bytes` in lower-case hex, written a byte at a time (`hex::encode` pushes a `char` at a time;
/// it showed in a read-only call's profile).
pub fn hex_lower(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut out).expect("two hex digits per byte");
    String::from_utf8(out).expect("hex digits are ASCII")
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(members) => {
            // Sorted here rather than trusting the map: with serde_json's `preserve_order` feature
            // (which any crate in the build may switch on) the map keeps insertion order, and its
            // own order is by UTF-8 bytes, which differs from UTF-16 above U+FFFF.
            let mut members: Vec<_> = members.iter().collect();
            members.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_value(out, member);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    }
}

/// ECMAScript Number::toString (ECMA-262, 7.1.12.1) for a finite double.
fn write_f64(out: &mut String, f: f64) {
    if f == 0.0 {
        // Both zeros print as "0".
        out.push('0');
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, as ECMAScript requires:
    // "d.ddd" or "d", then "e" and the exponent of the first digit.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let digits: String = mantissa.chars().filter(|&c| c != '.').collect();
    let exponent: i32 = exponent.parse().expect("`{:e}` exponent is an integer");
    let digits = tie_to_even(f.abs(), digits, exponent);
    // ECMAScript's k (number of digits) and n (value = 0.digits × 10^n).
    let k = digits.len() as i32;
    let n = exponent + 1;

    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e{}{}", if n > 0 { '+' } else { '-' }, (n - 1).abs());
    }
}

/// When `f` lies exactly halfway between two shortest candidates, ECMAScript takes the even one
/// and Rust may not: 0x43143ff3c1cb0959 is 1424953923781206.25, printed
/// "1424953923781206.2" by ECMAScript and "1424953923781206.3" by Rust.
fn tie_to_even(f: f64, digits: String, exponent: i32) -> String {
    let k = digits.len();
    let Ok(current) = digits.parse::<u64>() else {
        return digits;
    };
    if current % 2 == 0 {
        return digits;
    }
    // Cheap filter before the exact expansion: a tie needs a 5 right after the kept digits.
    let rounded = format!("{:.*e}", k, f);
    if !rounded
        .split_once('e')
        .is_some_and(|(m, _)| m.ends_with('5'))
    {
        return digits;
    }
    // 767 significant digits are enough to write any double exactly.
    let exact = format!("{:.800e}", f);
    let Some((mantissa, exact_exponent)) = exact.split_once('e') else {
        return digits;
    };
    let exact_digits: String = mantissa.chars().filter(|&c| c != '.').collect();
    let exact_digits = exact_digits.trim_end_matches('0');
    if exact_exponent.parse() != Ok(exponent)
        || exact_digits.len() != k + 1
        || !exact_digits.ends_with('5')
    {
        return digits;
    }
    let Ok(below) = exact_digits[..k].parse::<u64>() else {
        return digits;
    };
    let other = if current == below { below + 1 } else { below };
    let other = other.to_string();
    let candidate = format!("{}.{}e{exponent}", &other[..1], &other[1..]);
    // The even neighbour must keep the length and still read back as `f`: next to a power of two
    // the gap below is half the gap above.
    if other.len() == k && candidate.parse::<f64>() == Ok(f) {
        other
    } else {
        digits
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c < '\u{20}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, json};

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("valid JSON")
    }

    #[test]
    fn rfc8785_main_example() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        assert_eq!(
            canonical_json(&parse(input)),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn rfc8785_sorting_example() {
        // RFC 8785 §3.2.3: U+FB33 sorts after the surrogate pair of U+1F600 in UTF-16 but before
        // it in UTF-8, which is where byte-wise sorting goes wrong.
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis",
            "\u05d0": "Hebrew Letter Alef"
        }"#;
        // Only the \r name is escaped in the output; the rest are literal UTF-8.
        let expected = concat!(
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",",
            "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",",
            "\"\u{5d0}\":\"Hebrew Letter Alef\",\"\u{20ac}\":\"Euro Sign\",",
            "\"\u{1f600}\":\"Emoji: Grinning Face\",",
            "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
        );
        assert_eq!(canonical_json(&parse(input)), expected);
    }

    #[test]
    fn rfc8785_number_table() {
        // RFC 8785 Appendix B: IEEE 754 bit patterns and their expected text.
        let table: [(u64, &str); 24] = [
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, expected) in table {
            let f = f64::from_bits(bits);
            assert_eq!(canonical_json(&json!(f)), expected, "{bits:#018x}");
        }
    }

    #[test]
    fn number_layouts() {
        let cases = [
            (1.0, "1"),
            (-0.0, "0"),
            (4.5, "4.5"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.5e21, "1.5e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.25e-7, "1.25e-7"),
            (123456.789, "123456.789"),
        ];
        for (f, expected) in cases {
            assert_eq!(canonical_json(&json!(f)), expected, "{f:e}");
        }
        assert_eq!(canonical_json(&json!(i64::MIN)), "-9223372036854775808");
        assert_eq!(canonical_json(&json!(u64::MAX)), "18446744073709551615");
    }

    #[test]
    fn strings_escape_minimally() {
        let s = "q\" b\\ \u{8}\u{c}\n\r\t \u{0}\u{1f} \u{7f} / é 😀";
        assert_eq!(
            canonical_json(&json!(s)),
            "\"q\\\" b\\\\ \\b\\f\\n\\r\\t \\u0000\\u001f \u{7f} / é 😀\""
        );
    }

    #[test]
    fn spelling_of_numbers_and_key_order_do_not_change_the_hash() {
        assert_eq!(args_sha256(&parse("1.0")), args_sha256(&parse("1")));
        assert_eq!(
            args_sha256(&parse(r#"{"b": [1.0, 2e0], "a": {"y": null, "x": "z"}}"#)),
            args_sha256(&parse(r#"{"a":{"x":"z","y":null},"b":[1,2]}"#))
        );
        assert_ne!(
            args_sha256(&json!({"amount": 1})),
            args_sha256(&json!({"amount": 2}))
        );
    }

    #[test]
    fn digests_are_lower_hex_sha256() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(args_sha256(&json!({})), sha256_hex(b"{}"));
    }

    /// Numbers compare by value: `1.0` comes back from canonical text as the integer `1`.
    fn same_json(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
                x.as_f64() == y.as_f64()
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
            }
            _ => a == b,
        }
    }

    /// Keys drawn partly from the ranges where UTF-8 and UTF-16 order disagree.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c1\u{7f}-\u{81}\u{e000}\u{fb33}\u{ffff}\u{10000}\u{1f600}]{0,3}",
            any::<String>(),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("JSON numbers are finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..8)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    type Members = Vec<(String, Value)>;

    /// An object's members, unique by name, paired with the same members in a shuffled order.
    fn members_and_shuffle() -> impl Strategy<Value = (Members, Members)> {
        prop::collection::btree_map(key(), json_value(), 0..12).prop_flat_map(|members| {
            let members: Vec<_> = members.into_iter().collect();
            (Just(members.clone()), Just(members).prop_shuffle())
        })
    }

    proptest! {
        #[test]
        fn hex_is_two_lower_case_digits_a_byte_high_half_first(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
        ) {
            let written = hex_lower(&bytes);
            prop_assert_eq!(written.len(), bytes.len() * 2);
            let read: Vec<u8> = (0..bytes.len())
                .map(|i| u8::from_str_radix(&written[2 * i..2 * i + 2], 16).expect("hex"))
                .collect();
            prop_assert_eq!(read, bytes);
            prop_assert!(written.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }

        #[test]
        fn insertion_order_does_not_matter((members, shuffled) in members_and_shuffle()) {
            let forward: Map<String, Value> = members.iter().cloned().collect();
            let reversed: Map<String, Value> = members.iter().rev().cloned().collect();
            let shuffled: Map<String, Value> = shuffled.into_iter().collect();
            let expected = canonical_json(&Value::Object(forward));
            prop_assert_eq!(canonical_json(&Value::Object(reversed)), expected.clone());
            prop_assert_eq!(canonical_json(&Value::Object(shuffled)), expected);
        }

        #[test]
        fn canonical_text_reparses_and_is_a_fixed_point(value in json_value()) {
            let text = canonical_json(&value);
            let reparsed = parse(&text);
            prop_assert!(same_json(&value, &reparsed), "{} -> {}", value, text);
            prop_assert_eq!(canonical_json(&reparsed), text);
        }

        #[test]
        fn floats_round_trip(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let text = canonical_json(&json!(f));
            prop_assert_eq!(text.parse::<f64>().expect("a number"), f);
        }

        #[test]
        fn strings_escape_as_serde_json_does(s in any::<String>()) {
            // serde_json's escaping happens to be exactly JCS's minimal one.
            prop_assert_eq!(canonical_json(&Value::String(s.clone())), serde_json::to_string(&s).unwrap());
        }
    }
}
