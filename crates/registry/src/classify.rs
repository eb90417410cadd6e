//! Skill -> tool resolution by capability categories: a tool's declared categories, else a
//! deterministic classifier; then the skill's own allow/deny overrides; then tenant policy.
//!
//! The classifier is a fixed table, not a model: every node, every version and every test must
//! put a tool in the same categories.

use crate::glob::tool_matches;
use crate::resource::{SkillSpec, ToolSpec};
use std::collections::{BTreeMap, BTreeSet};

/// Where a resolved tool came from, weakest claim first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ToolSource {
    /// The tool's own `categories` matched.
    Declared,
    /// The classifier's categories matched.
    Classified,
    /// The skill's `toolOverrides.allow` named it.
    Override,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResolvedTool {
    pub tool: String,
    pub source: ToolSource,
    pub categories: Vec<String>,
}

/// Category to the whole words that put a tool in it. A keyword with `_` is a run of words.
#[rustfmt::skip]
const CATEGORIES: &[(&str, &[&str])] = &[
    ("analytics", &["analytics", "metric", "report", "stats", "dashboard"]),
    ("calendar", &["calendar", "event", "meeting", "schedule"]),
    ("code", &["code", "repo", "commit", "git", "build", "deploy"]),
    ("database", &["sql", "database", "db", "table", "record"]),
    ("delete", &["delete", "remove", "drop", "destroy", "purge"]),
    ("documents", &["document", "doc", "wiki", "page", "note"]),
    ("email", &["email", "mail", "send_message", "inbox"]),
    ("files", &["file", "directory", "path", "upload", "download"]),
    ("http", &["http", "url", "web", "request", "api"]),
    ("identity", &["user", "login", "auth", "permission", "role"]),
    ("messaging", &["chat", "message", "slack", "notify"]),
    ("payments", &["payment", "invoice", "charge", "refund", "billing", "amount"]),
    ("read", &["get", "read", "fetch", "list", "show", "describe"]),
    ("search", &["search", "find", "query", "lookup"]),
    ("write", &["create", "update", "write", "put", "set", "add", "insert", "edit", "upsert"]),
];

/// The categories of a tool: its declared ones if it has any, else the classifier's. Sorted,
/// deduplicated, lower case.
pub fn tool_categories(name: &str, tool: &ToolSpec) -> (Vec<String>, ToolSource) {
    let declared: BTreeSet<String> = tool
        .categories
        .iter()
        .map(|c| c.trim().to_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    if declared.is_empty() {
        (classify(name, tool), ToolSource::Classified)
    } else {
        (declared.into_iter().collect(), ToolSource::Declared)
    }
}

/// The deterministic classifier over annotations, name and description. Sorted, deduplicated.
pub fn classify(name: &str, tool: &ToolSpec) -> Vec<String> {
    // The upstream prefix says where a tool lives, not what it does.
    let local = name.split_once('.').map_or(name, |(_, local)| local);
    let texts = [words(local), words(&tool.description)];
    let mut found: BTreeSet<&str> = CATEGORIES
        .iter()
        .filter(|(_, keywords)| {
            keywords
                .iter()
                .any(|k| texts.iter().any(|tokens| contains_phrase(tokens, k)))
        })
        .map(|(category, _)| *category)
        .collect();
    // Only readOnlyHint says what a tool does; the other hints are about risk, which is the
    // approval mode's business.
    if tool
        .annotations
        .as_ref()
        .is_some_and(|a| a.read_only_hint == Some(true))
    {
        found.insert("read");
    }
    found.into_iter().map(str::to_owned).collect()
}

/// Tools a skill resolves to. `tools` is (name, spec) of the tenant's visible tools;
/// `denied(name)` is the tenant policy's verdict (true = denied: never resolves, overrides
/// included). Sorted by tool name; a name given twice counts once, the first time.
pub fn resolve_skill_tools<'a>(
    skill: &SkillSpec,
    tools: impl IntoIterator<Item = (&'a str, &'a ToolSpec)>,
    denied: impl Fn(&str) -> bool,
) -> Vec<ResolvedTool> {
    let wanted: BTreeSet<String> = skill
        .required_capabilities
        .iter()
        .map(|c| c.trim().to_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    let overrides = &skill.tool_overrides;
    let mut resolved: BTreeMap<&str, ResolvedTool> = BTreeMap::new();
    for (name, spec) in tools {
        if resolved.contains_key(name) || overrides.deny.iter().any(|p| tool_matches(p, name)) {
            continue;
        }
        let (categories, by) = tool_categories(name, spec);
        let source = if overrides.allow.iter().any(|p| tool_matches(p, name)) {
            ToolSource::Override
        } else if categories.iter().any(|c| wanted.contains(c)) {
            by
        } else {
            continue;
        };
        // Asked last: policy evaluation is the costliest test and only candidates need it.
        if denied(name) {
            continue;
        }
        resolved.insert(
            name,
            ResolvedTool {
                tool: name.to_owned(),
                source,
                categories,
            },
        );
    }
    resolved.into_values().collect()
}

/// Lower-case words, split on anything not alphanumeric and at camelCase boundaries:
/// `createInvoice` -> `create`, `invoice`; `HTTPRequest` -> `http`, `request`.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<char> = run.chars().collect();
        let mut word = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1);
            let boundary = c.is_uppercase()
                && prev.is_some_and(|p| {
                    p.is_lowercase()
                        || p.is_numeric()
                        || (p.is_uppercase() && next.is_some_and(|n| n.is_lowercase()))
                });
            if boundary && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// Whether the keyword's words occur as consecutive tokens.
fn contains_phrase(tokens: &[String], keyword: &str) -> bool {
    let parts: Vec<&str> = keyword.split('_').collect();
    tokens
        .windows(parts.len())
        .any(|w| w.iter().zip(&parts).all(|(t, k)| same_word(t, k)))
}

/// Whole-word equality that forgives a plain plural: `invoices` is `invoice`, `queries` is
/// `query`. Never a substring: `address` is not `add`.
fn same_word(token: &str, keyword: &str) -> bool {
    token == keyword
        || token
            .strip_suffix("ies")
            .is_some_and(|stem| keyword.strip_suffix('y') == Some(stem))
        || (!token.ends_with("ss") && token.strip_suffix('s') == Some(keyword))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn tool(spec: Value) -> ToolSpec {
        serde_json::from_value(spec).unwrap()
    }

    fn bare() -> ToolSpec {
        tool(json!({}))
    }

    fn skill(capabilities: &[&str], allow: &[&str], deny: &[&str]) -> SkillSpec {
        serde_json::from_value(json!({
            "scope": {"type": "tenant", "tenant": "acme"},
            "instructions": "be careful",
            "requiredCapabilities": capabilities,
            "toolOverrides": {"allow": allow, "deny": deny},
        }))
        .unwrap()
    }

    fn names(resolved: &[ResolvedTool]) -> Vec<(&str, ToolSource)> {
        resolved
            .iter()
            .map(|r| (r.tool.as_str(), r.source))
            .collect()
    }

    #[test]
    fn declared_categories_win_over_classification() {
        let declared = tool(json!({"categories": ["Payments", " payments", "CRM"]}));
        assert_eq!(
            tool_categories("billing.create_invoice", &declared),
            (
                vec!["crm".to_owned(), "payments".to_owned()],
                ToolSource::Declared
            )
        );
        assert_eq!(
            tool_categories("billing.create_invoice", &bare()),
            (
                vec!["payments".to_owned(), "write".to_owned()],
                ToolSource::Classified
            )
        );
    }

    #[test]
    fn camel_and_snake_case_names_classify() {
        assert_eq!(
            classify("billing.createInvoice", &bare()),
            ["payments", "write"]
        );
        assert_eq!(
            classify("billing.create_invoice", &bare()),
            ["payments", "write"]
        );
        assert_eq!(classify("web.HTTPRequest", &bare()), ["http"]);
        assert_eq!(classify("fs.listFiles", &bare()), ["files", "read"]);
        assert_eq!(classify("db.runSQLQuery", &bare()), ["database", "search"]);
    }

    #[test]
    fn only_whole_words_match() {
        assert_eq!(classify("crm.address_book", &bare()), Vec::<String>::new());
        assert_eq!(classify("x.getaway", &bare()), Vec::<String>::new());
        assert_eq!(classify("x.settings", &bare()), Vec::<String>::new());
    }

    #[test]
    fn the_upstream_prefix_is_not_classified() {
        assert_eq!(classify("email.ping", &bare()), Vec::<String>::new());
        assert_eq!(classify("ping", &bare()), Vec::<String>::new());
    }

    #[test]
    fn description_and_phrases_classify() {
        let t = tool(json!({"description": "Deletes the given records. Queries are logged."}));
        assert_eq!(classify("x.do_it", &t), ["database", "delete", "search"]);
        assert_eq!(
            classify("mail.send_message", &bare()),
            ["email", "messaging"]
        );
        assert_eq!(
            classify("chat.send_messages", &bare()),
            ["email", "messaging"]
        );
    }

    #[test]
    fn read_only_hint_adds_read() {
        let t = tool(json!({"annotations": {"readOnlyHint": true, "openWorldHint": true}}));
        assert_eq!(classify("x.ping", &t), ["read"]);
        let t = tool(json!({"annotations": {"readOnlyHint": false, "destructiveHint": true}}));
        assert_eq!(classify("x.ping", &t), Vec::<String>::new());
    }

    fn catalog() -> Vec<(&'static str, ToolSpec)> {
        vec![
            ("billing.refund", bare()),
            ("billing.create_invoice", bare()),
            (
                "billing.purge_ledger",
                tool(json!({"categories": ["payments"]})),
            ),
            ("crm.lookup_contact", bare()),
            ("crm.ping", bare()),
            ("ops.api-create", bare()),
        ]
    }

    fn resolve(skill: &SkillSpec, denied: &[&str]) -> Vec<ResolvedTool> {
        let tools = catalog();
        resolve_skill_tools(skill, tools.iter().map(|(n, t)| (*n, t)), |n| {
            denied.contains(&n)
        })
    }

    #[test]
    fn capabilities_select_tools_case_insensitively_and_report_sources() {
        let resolved = resolve(&skill(&["PAYMENTS"], &[], &[]), &[]);
        assert_eq!(
            names(&resolved),
            [
                ("billing.create_invoice", ToolSource::Classified),
                ("billing.purge_ledger", ToolSource::Declared),
                ("billing.refund", ToolSource::Classified),
            ]
        );
        assert_eq!(resolved[2].categories, ["payments"]);
    }

    #[test]
    fn allow_overrides_add_and_relabel_deny_overrides_remove() {
        let s = skill(&["payments"], &["api-*", "billing.refund"], &["purge_*"]);
        assert_eq!(
            names(&resolve(&s, &[])),
            [
                ("billing.create_invoice", ToolSource::Classified),
                ("billing.refund", ToolSource::Override),
                ("ops.api-create", ToolSource::Override),
            ]
        );
    }

    #[test]
    fn deny_beats_allow() {
        let s = skill(&[], &["billing.*"], &["billing.refund"]);
        assert_eq!(
            names(&resolve(&s, &[])),
            [
                ("billing.create_invoice", ToolSource::Override),
                ("billing.purge_ledger", ToolSource::Override),
            ]
        );
    }

    #[test]
    fn no_capabilities_resolves_only_allow_overrides() {
        assert_eq!(resolve(&skill(&[], &[], &[]), &[]), vec![]);
        assert_eq!(
            names(&resolve(&skill(&[], &["crm.ping"], &[]), &[])),
            [("crm.ping", ToolSource::Override)]
        );
    }

    #[test]
    fn policy_denial_removes_even_an_allow_override() {
        let s = skill(&["payments"], &["crm.ping"], &[]);
        assert_eq!(
            names(&resolve(&s, &["crm.ping", "billing.refund"])),
            [
                ("billing.create_invoice", ToolSource::Classified),
                ("billing.purge_ledger", ToolSource::Declared),
            ]
        );
    }

    #[test]
    fn resolution_is_sorted_and_independent_of_input_order() {
        let s = skill(&["payments", "search"], &["crm.ping"], &[]);
        let tools = catalog();
        let forward = resolve_skill_tools(&s, tools.iter().map(|(n, t)| (*n, t)), |_| false);
        let backward = resolve_skill_tools(&s, tools.iter().rev().map(|(n, t)| (*n, t)), |_| false);
        assert_eq!(forward, backward);
        assert!(forward.windows(2).all(|w| w[0].tool < w[1].tool));
    }

    #[test]
    fn sources_serialise_as_snake_case() {
        assert_eq!(
            serde_json::to_value(ToolSource::Classified).unwrap(),
            json!("classified")
        );
    }
}
