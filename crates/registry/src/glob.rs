//! Tool-name globs, shared by the cascade's `toolPattern`, skill tool overrides and policy.
//!
//! `*` matches any run of characters, `.` included; `?` matches exactly one character; every
//! other character is literal. There is no escaping: tool names cannot hold `*` or `?`.

/// Whether `pattern` matches all of `text`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    // Byte offsets into both strings; `star` remembers the last `*` and the text position it
    // currently stands for, so a failed match retries with the star swallowing one more char.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while let Some(tc) = text[t..].chars().next() {
        match pattern[p..].chars().next() {
            Some('*') => {
                p += 1;
                star = Some((p, t));
            }
            Some(pc) if pc == '?' || pc == tc => {
                p += pc.len_utf8();
                t += tc.len_utf8();
            }
            _ => match star {
                Some((after_star, from)) => {
                    let skipped = text[from..].chars().next().map_or(1, char::len_utf8);
                    p = after_star;
                    t = from + skipped;
                    star = Some((after_star, t));
                }
                None => return false,
            },
        }
    }
    pattern[p..].chars().all(|c| c == '*')
}

/// Whether `pattern` matches a tool: its full name (`upstream.tool`) or the part after the
/// first `.`, so that `create-*` reaches a tool whichever upstream serves it.
pub fn tool_matches(pattern: &str, tool_name: &str) -> bool {
    glob_match(pattern, tool_name)
        || tool_name
            .split_once('.')
            .is_some_and(|(_, local)| glob_match(pattern, local))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn star_matches_any_run_including_dots() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "billing.api.create"));
        assert!(glob_match("billing.*", "billing.api.create"));
        assert!(glob_match("*.create", "billing.api.create"));
        assert!(glob_match("b*g.*e", "billing.api.create"));
        assert!(glob_match("**", "x"));
        assert!(!glob_match("billing.*", "crm.create"));
        assert!(!glob_match("*x", "billing"));
    }

    #[test]
    fn question_mark_matches_exactly_one_character() {
        assert!(glob_match("v?", "v1"));
        assert!(glob_match("v?", "vé"));
        assert!(!glob_match("v?", "v"));
        assert!(!glob_match("v?", "v12"));
        assert!(glob_match("a?c", "a.c"));
    }

    #[test]
    fn other_characters_are_literal() {
        assert!(glob_match("crm.get-user_v2", "crm.get-user_v2"));
        assert!(!glob_match("crm.get", "crmxget"));
        assert!(!glob_match("[ab]", "a"));
        assert!(glob_match("[ab]", "[ab]"));
        assert!(!glob_match("Crm", "crm"), "matching is case-sensitive");
    }

    #[test]
    fn empty_pattern_matches_only_empty_text() {
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
        assert!(!glob_match("a", ""));
    }

    #[test]
    fn backtracking_finds_a_later_split() {
        assert!(glob_match("*ab*ab", "xabyabab"));
        assert!(glob_match("a*b*c", "abbbbc"));
        assert!(!glob_match("a*b*c", "abbbb"));
    }

    #[test]
    fn tools_match_by_full_name_or_local_part() {
        assert!(tool_matches("api-*", "api-create"));
        assert!(tool_matches("api-*", "billing.api-create"));
        assert!(tool_matches("billing.*", "billing.api-create"));
        assert!(
            tool_matches("api.get", "crm.api.get"),
            "local part is after the first dot"
        );
        assert!(!tool_matches("get", "crm.api.get"));
        assert!(!tool_matches("api-*", "billing.refund"));
    }

    /// A direct recursive definition, slow but obviously right, to check the iterative one.
    fn reference(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| reference(rest, &t[i..])),
            Some((&c, rest)) => t
                .split_first()
                .is_some_and(|(&tc, trest)| (c == '?' || c == tc) && reference(rest, trest)),
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_recursive_definition(p in "[ab.*?]{0,8}", t in "[ab.]{0,10}") {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            prop_assert_eq!(glob_match(&p, &t), reference(&pc, &tc));
        }
    }
}
