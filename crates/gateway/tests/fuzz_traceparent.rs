//! Fuzzes the W3C `traceparent` reader (`TraceParent::parse` and `telemetry::incoming`), which
//! every front applies to a caller's header, gRPC metadata or MCP `_meta`: valid values padded
//! with blanks, valid values with one character changed, later versions, and random text and
//! bytes.
//!
//! Properties: a value written by `TraceParent` reads back as itself, blanks around it or not;
//! a changed character of its ids or flags gives nothing or another trace context, never the
//! same one; random input never panics, and whatever is read has non-zero ids and the ids and
//! flags the input's first 55 characters say.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_gateway::telemetry::{TraceParent, incoming};
use gatehouse_testkit::fuzz::config;
use proptest::prelude::*;

/// Trace contexts as this node writes them: of the flags, only the sampled bit is passed on.
fn trace_parent() -> impl Strategy<Value = TraceParent> {
    (1..=u128::MAX, 1..=u64::MAX, 0u8..=1)
        .prop_map(|(t, p, f)| TraceParent::new(t, p, f).expect("non-zero ids"))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn a_written_value_reads_back(tp in trace_parent(), before in "[ \t]{0,3}", after in "[ \t]{0,3}") {
        let text = tp.to_string();
        prop_assert_eq!(text.len(), 55);
        prop_assert_eq!(TraceParent::parse(&format!("{before}{text}{after}")), Some(tp));
        prop_assert_eq!(incoming(Some(text.as_bytes())), Some(tp));
    }

    #[test]
    fn a_changed_id_or_flag_is_never_the_same_trace(
        tp in trace_parent(),
        at in 3usize..55,
        with in prop::sample::select("0123456789abcdefABCDEFg- é".chars().collect::<Vec<_>>()),
    ) {
        let mut chars: Vec<char> = tp.to_string().chars().collect();
        prop_assume!(chars[at] != with);
        chars[at] = with;
        let changed: String = chars.into_iter().collect();
        prop_assert_ne!(TraceParent::parse(&changed), Some(tp), "{}", changed);
    }

    #[test]
    fn random_input_reads_as_what_it_says_or_nothing(
        text in "\\PC{0,70}|[0-9a-f-]{50,60}|[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-\\PC{0,5})?",
        bytes in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let _ = incoming(Some(&bytes));
        if let Some(tp) = TraceParent::parse(&text) {
            prop_assert!(tp.trace_id != 0 && tp.parent_id != 0);
            let read = text.trim_matches([' ', '\t']);
            prop_assert_eq!(&read[2..53], &tp.to_string()[2..53]);
            prop_assert_eq!(u8::from_str_radix(&read[53..55], 16), Ok(tp.flags));
        }
    }
}
