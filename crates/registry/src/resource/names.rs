//! What names look like: short, printable, safe in a URL path and a log line.

/// Tenants, principals, upstreams, skills and policies: 1 to 128 of `a-z 0-9 - _ .`, starting
/// with a letter or digit.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    name.len() <= 128
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
}

/// Tools are `upstream.tool`: a valid upstream name, a dot, and the tool's own name as its
/// upstream spells it (MCP allows upper case there), 1 to 128 characters.
pub fn is_valid_tool_name(name: &str) -> bool {
    let Some((upstream, tool)) = name.split_once('.') else {
        return false;
    };
    is_valid_name(upstream)
        && !tool.is_empty()
        && tool.len() <= 128
        && tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_the_usual_and_refuse_the_rest() {
        for ok in ["acme", "a", "team-1", "eu_west.2"] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in ["", "-acme", "Acme", "a b", "a/b", &"x".repeat(129)] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn tool_names_need_an_upstream_prefix() {
        assert!(is_valid_tool_name("billing.create_invoice"));
        assert!(is_valid_tool_name("fs.read.File"));
        assert!(!is_valid_tool_name("create_invoice"));
        assert!(!is_valid_tool_name("billing."));
        assert!(!is_valid_tool_name("Billing.x"));
        assert!(!is_valid_tool_name("billing.a b"));
    }
}
