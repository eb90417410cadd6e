//! What the property-based fuzz tests share: how many cases a property runs.

use proptest::test_runner::Config;

/// `default_cases` per property in `cargo test`, or `PROPTEST_CASES` when set (`scripts/fuzz`
/// runs them long that way).
pub fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default_cases);
    Config::with_cases(cases)
}
