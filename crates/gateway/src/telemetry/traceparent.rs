//! The W3C Trace Context `traceparent` value (<https://www.w3.org/TR/trace-context/>): parsed
//! from what a caller sent, written for what an upstream receives. Pure: no clock, no I/O.

use std::fmt;

/// The only version this node writes.
const VERSION: &str = "00";
/// `version-trace_id-parent_id-flags`: 2 + 1 + 32 + 1 + 16 + 1 + 2.
const LEN: usize = 55;
/// The sampled bit of the trace flags.
const SAMPLED: u8 = 0x01;

/// One hop of a trace: the trace it belongs to, the span that is the parent of the next one,
/// and the trace flags (bit 0: sampled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// Never zero.
    pub trace_id: u128,
    /// Never zero.
    pub parent_id: u64,
    pub flags: u8,
}

impl TraceParent {
    /// A sampled hop of `trace_id` under `parent_id`; `None` when either is zero.
    pub fn new(trace_id: u128, parent_id: u64, flags: u8) -> Option<TraceParent> {
        (trace_id != 0 && parent_id != 0).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// A value as a caller sent it, or `None` when the spec says to ignore it: not four
    /// lower-case hex fields of the right widths, version `ff`, a version-00 value with anything
    /// after the flags, or an all-zero trace or parent id. A later version's value is read by
    /// its version-00 prefix, as the spec asks, when what follows starts with `-`.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let value = value.trim_matches([' ', '\t']);
        let bytes = value.as_bytes();
        // Nothing but ASCII, in what is read and in what a later version adds.
        if !value.is_ascii() || bytes.len() < LEN {
            return None;
        }
        let version = lower_hex(&bytes[..2]);
        if version.is_none_or(|v| v == 0xff) {
            return None;
        }
        let rest_ok = if version == Some(0) {
            bytes.len() == LEN
        } else {
            bytes.len() == LEN || bytes[LEN] == b'-'
        };
        if !rest_ok || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        TraceParent::new(
            lower_hex(&bytes[3..35])?,
            u64::try_from(lower_hex(&bytes[36..52])?).ok()?,
            u8::try_from(lower_hex(&bytes[53..55])?).ok()?,
        )
    }

    /// Whether the caller recorded (and asks us to record) this trace.
    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The trace id as 32 lower-case hex digits, the form envelopes and audit entries carry.
    pub fn trace_id_hex(&self) -> String {
        gatehouse_registry::canonical::hex_lower(&self.trace_id.to_be_bytes())
    }

    /// The same trace and flags under another parent span.
    pub fn child(&self, parent_id: u64) -> TraceParent {
        TraceParent { parent_id, ..*self }
    }
}

impl fmt::Display for TraceParent {
    /// The version-00 header value. Only the sampled bit of the flags is passed on: the spec
    /// reserves the others.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Written into one buffer and handed over whole: every call's upstream request carries
        // one, and `write!` with three padded hex numbers cost more than the rest of this.
        let mut out = [b'-'; LEN];
        out[..2].copy_from_slice(VERSION.as_bytes());
        let fields: [(&[u8], std::ops::Range<usize>); 3] = [
            (&self.trace_id.to_be_bytes(), 3..35),
            (&self.parent_id.to_be_bytes(), 36..52),
            (&[self.flags & SAMPLED], 53..55),
        ];
        for (bytes, at) in fields {
            hex::encode_to_slice(bytes, &mut out[at]).map_err(|_| fmt::Error)?;
        }
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

/// The number `digits` spell in lower-case hex (at most 32 of them), read in one pass: every
/// call reads its trace context up to three times. `None` for any other character.
fn lower_hex(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |n, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u128::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_value_is_read_field_by_field_and_written_back_unchanged() {
        let parent = TraceParent::parse(GOOD).expect("valid");
        assert_eq!(parent.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(parent.parent_id, 0x00f067aa0ba902b7);
        assert!(parent.sampled());
        assert_eq!(parent.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parent.to_string(), GOOD);
    }

    #[test]
    fn the_flags_are_kept_and_an_unsampled_trace_stays_unsampled() {
        let parent = TraceParent::parse(&GOOD.replace("-01", "-00")).expect("valid");
        assert!(!parent.sampled());
        assert!(
            parent
                .child(7)
                .to_string()
                .ends_with("-0000000000000007-00")
        );
        // Reserved bits are read but never passed on.
        let odd = TraceParent::parse(&GOOD.replace("-01", "-03")).expect("valid");
        assert!(odd.sampled());
        assert!(odd.to_string().ends_with("-01"));
    }

    #[test]
    fn values_the_spec_says_to_ignore_are_refused() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        let cases = [
            "",
            "garbage",
            zero_trace,
            zero_parent,
            &GOOD.to_uppercase(),
            &GOOD.replacen("00-", "ff-", 1),
            &GOOD.replacen("00-", "0g-", 1),
            &format!("{GOOD}-extra"),
            &GOOD.replace('-', "_"),
            &GOOD[..54],
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "0é-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0€",
        ];
        for case in cases {
            assert_eq!(TraceParent::parse(case), None, "{case:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_version_00_prefix() {
        let later = GOOD.replacen("00-", "01-", 1);
        assert!(TraceParent::parse(&later).is_some());
        assert!(TraceParent::parse(&format!("{later}-what-comes-next")).is_some());
        assert_eq!(TraceParent::parse(&format!("{later}x")), None);
    }

    #[test]
    fn surrounding_whitespace_of_a_header_is_ignored() {
        assert!(TraceParent::parse(&format!(" {GOOD}\t")).is_some());
    }

    #[test]
    fn any_ids_are_written_with_their_leading_zeros_and_read_back() {
        let edges = [
            (1, 1, 0x01),
            (u128::MAX, u64::MAX, 0xff),
            (1 << 127, 1 << 63, 0x02),
        ];
        let random = (0..1000).map(|_| {
            let trace = rand::random::<u128>() >> rand::random_range(0..128);
            let parent = rand::random::<u64>() >> rand::random_range(0..64);
            (trace.max(1), parent.max(1), rand::random::<u8>())
        });
        for (trace, parent, flags) in edges.into_iter().chain(random) {
            let value = TraceParent::new(trace, parent, flags).expect("nonzero ids");
            let written = value.to_string();
            let sampled = flags & SAMPLED;
            assert_eq!(
                written,
                format!("00-{trace:032x}-{parent:016x}-{sampled:02x}")
            );
            assert_eq!(value.trace_id_hex(), format!("{trace:032x}"));
            let read = TraceParent::parse(&written).expect("written by the spec's rules");
            assert_eq!(
                (read.trace_id, read.parent_id, read.flags),
                (trace, parent, sampled)
            );
        }
    }

    #[test]
    fn zero_ids_make_no_trace_parent() {
        assert_eq!(TraceParent::new(0, 1, 1), None);
        assert_eq!(TraceParent::new(1, 0, 1), None);
        assert!(TraceParent::new(1, 1, 1).is_some());
    }
}
