//! What the property-based fuzz tests share: how many cases a property runs, and arbitrary
//! JSON.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;

/// `default_cases` per property in `cargo test`, or `PROPTEST_CASES` when set (`scripts/fuzz`
/// runs them long that way).
pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    Config::with_cases(cases)
}

/// Arbitrary JSON a few levels deep: null, booleans, integers at both signs' extremes, finite
/// floats and `strings` as leaves; arrays, and objects keyed by `keys`.
pub fn json(
    strings: impl Strategy<Value = String> + Clone + 'static,
    keys: impl Strategy<Value = String> + Clone + 'static,
) -> impl Strategy<Value = Value> + Clone {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        strings.prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map(keys.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
