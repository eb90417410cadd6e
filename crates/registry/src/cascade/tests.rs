use super::*;
use crate::resource::{SkillScope, ToolOverrides};
use proptest::prelude::*;

fn skill(
    level: Level,
    tenant: Option<&str>,
    pattern: Option<&str>,
    priority: i64,
    text: &str,
) -> SkillSpec {
    SkillSpec {
        scope: SkillScope {
            level,
            tenant: tenant.map(str::to_owned),
            tool_pattern: pattern.map(str::to_owned),
            user: None,
        },
        priority,
        key: None,
        instructions: text.to_owned(),
        required_capabilities: vec![],
        tool_overrides: ToolOverrides::default(),
        enabled: true,
    }
}

fn user_skill(tenant: &str, user: &str, text: &str) -> SkillSpec {
    let mut s = skill(Level::User, Some(tenant), None, 0, text);
    s.scope.user = Some(user.to_owned());
    s
}

fn query(tenant: &str, tool: &str, user: Option<&str>) -> Query {
    Query {
        tenant: tenant.to_owned(),
        tool: tool.to_owned(),
        user: user.map(str::to_owned),
    }
}

fn run(skills: &[(&str, SkillSpec)], q: &Query) -> Resolution {
    resolve(
        skills.iter().map(|(name, spec)| Candidate { name, spec }),
        q,
    )
}

#[test]
fn adr_example_resolves_to_three_lines_with_the_user_level_unmatched() {
    let skills = [
        (
            "request-ids",
            skill(
                Level::Global,
                None,
                None,
                10,
                "Always include a request ID in API calls.",
            ),
        ),
        (
            "acme-formats",
            skill(
                Level::Tenant,
                Some("acme"),
                None,
                50,
                "Use ISO 8601 dates, amounts in EUR.",
            ),
        ),
        (
            "api-approval",
            skill(
                Level::Tool,
                Some("acme"),
                Some("api-*"),
                100,
                "api-create requires approval for amounts > 10000.",
            ),
        ),
    ];
    let r = run(&skills, &query("acme", "api-create", Some("john")));
    assert_eq!(
        r.resolved_context,
        "Always include a request ID in API calls.\n\
         Use ISO 8601 dates, amounts in EUR.\n\
         api-create requires approval for amounts > 10000."
    );
    let levels: Vec<_> = r
        .trace
        .iter()
        .map(|e| (e.level, e.skill.as_deref(), e.matched))
        .collect();
    assert_eq!(
        levels,
        [
            (Level::Global, Some("request-ids"), true),
            (Level::Tenant, Some("acme-formats"), true),
            (Level::Tool, Some("api-approval"), true),
            (Level::User, None, false),
        ]
    );
}

#[test]
fn order_is_level_then_priority_then_name() {
    let skills = [
        ("b", skill(Level::Tenant, Some("t"), None, 1, "T1b")),
        ("a", skill(Level::Tenant, Some("t"), None, 1, "T1a")),
        ("z", skill(Level::Tenant, Some("t"), None, -5, "T-5")),
        ("g", skill(Level::Global, None, None, 1000, "G")),
        ("u", user_skill("t", "ann", "U")),
        ("x", skill(Level::Tool, Some("t"), Some("*"), 0, "X")),
    ];
    let r = run(&skills, &query("t", "up.tool", Some("ann")));
    assert_eq!(r.resolved_context, "G\nT-5\nT1a\nT1b\nX\nU");
}

#[test]
fn instructions_are_trimmed_and_joined_with_one_newline() {
    let skills = [
        ("a", skill(Level::Global, None, None, 0, "  first \n\n")),
        ("b", skill(Level::Global, None, None, 1, "\tsecond")),
    ];
    assert_eq!(
        run(&skills, &query("t", "x.y", None)).resolved_context,
        "first\nsecond"
    );
}

#[test]
fn unmatched_candidates_say_why() {
    let mut disabled = skill(Level::Tenant, Some("acme"), None, 0, "off");
    disabled.enabled = false;
    let skills = [
        (
            "other",
            skill(Level::Tenant, Some("globex"), None, 0, "theirs"),
        ),
        ("off", disabled),
        (
            "pattern",
            skill(Level::Tool, Some("acme"), Some("db.*"), 0, "db only"),
        ),
        ("someone", user_skill("acme", "mary", "mary's")),
    ];
    let r = run(&skills, &query("acme", "api.create", Some("john")));
    assert_eq!(r.resolved_context, "");
    let reason = |name: &str| {
        let e = r
            .trace
            .iter()
            .find(|e| e.skill.as_deref() == Some(name))
            .unwrap();
        assert!(!e.matched, "{name} should not match");
        e.reason.clone()
    };
    assert_eq!(reason("other"), "belongs to another tenant");
    assert!(
        !reason("other").contains("globex"),
        "the trace must not name another tenant"
    );
    assert_eq!(reason("off"), "disabled");
    assert!(reason("pattern").contains("does not match"));
    assert_eq!(reason("someone"), "for another user");
}

#[test]
fn tool_pattern_matches_the_full_name_or_the_part_after_the_first_dot() {
    let skills = [
        (
            "full",
            skill(Level::Tool, Some("t"), Some("billing.*"), 0, "full"),
        ),
        (
            "short",
            skill(Level::Tool, Some("t"), Some("create_?nvoice"), 0, "short"),
        ),
        (
            "narrow-global",
            skill(Level::Global, None, Some("crm.*"), 0, "crm"),
        ),
    ];
    let r = run(&skills, &query("t", "billing.create_invoice", None));
    assert_eq!(r.resolved_context, "full\nshort");
}

#[test]
fn conflicting_keys_keep_the_most_specific_winner_in_its_own_place() {
    let mut global = skill(Level::Global, None, None, 500, "global tone");
    global.key = Some("tone".into());
    let mut tenant_low = skill(Level::Tenant, Some("t"), None, 1, "tenant tone low");
    tenant_low.key = Some("tone".into());
    let mut tenant_high = skill(Level::Tenant, Some("t"), None, 9, "tenant tone high");
    tenant_high.key = Some("tone".into());
    let skills = [
        ("g", global),
        ("t-low", tenant_low),
        ("t-high", tenant_high),
        ("plain", skill(Level::Tenant, Some("t"), None, 20, "plain")),
    ];
    let r = run(&skills, &query("t", "a.b", None));
    assert_eq!(r.resolved_context, "tenant tone high\nplain");
    for loser in ["g", "t-low"] {
        let e = r
            .trace
            .iter()
            .find(|e| e.skill.as_deref() == Some(loser))
            .unwrap();
        assert_eq!(e.overridden_by.as_deref(), Some("t-high"), "{loser}");
    }
}

#[test]
fn equal_level_and_priority_conflict_goes_to_the_later_name() {
    let mut a = skill(Level::Tenant, Some("t"), None, 5, "from a");
    a.key = Some("k".into());
    let mut b = skill(Level::Tenant, Some("t"), None, 5, "from b");
    b.key = Some("k".into());
    let r = run(&[("b", b), ("a", a)], &query("t", "x.y", None));
    assert_eq!(r.resolved_context, "from b");
}

#[test]
fn an_unmatched_skill_does_not_win_a_conflict() {
    let mut tenant = skill(Level::Tenant, Some("t"), None, 0, "tenant");
    tenant.key = Some("k".into());
    let mut tool = skill(Level::Tool, Some("t"), Some("other.*"), 0, "tool");
    tool.key = Some("k".into());
    let r = run(
        &[("tenant", tenant), ("tool", tool)],
        &query("t", "x.y", None),
    );
    assert_eq!(r.resolved_context, "tenant");
}

#[test]
fn over_the_limit_whole_skills_drop_from_the_least_specific_end() {
    let block = |c: char| c.to_string().repeat(3_000);
    let skills = [
        ("g", skill(Level::Global, None, None, 0, &block('g'))),
        ("t1", skill(Level::Tenant, Some("t"), None, 1, &block('a'))),
        ("t2", skill(Level::Tenant, Some("t"), None, 2, &block('b'))),
        ("u", user_skill("t", "ann", &block('u'))),
    ];
    let r = run(&skills, &query("t", "x.y", Some("ann")));
    // 4 x 3,000 + 3 separators is over; dropping g and t1 leaves 6,001 characters.
    assert_eq!(
        r.resolved_context,
        format!("{}\n{}", block('b'), block('u'))
    );
    let truncated: Vec<_> = r
        .trace
        .iter()
        .filter(|e| e.truncated)
        .filter_map(|e| e.skill.as_deref())
        .collect();
    assert_eq!(truncated, ["g", "t1"]);
    assert!(r.resolved_context.chars().count() <= MAX_CONTEXT_CHARS);
}

#[test]
fn exactly_at_the_limit_nothing_is_dropped() {
    let skills = [
        ("a", skill(Level::Global, None, None, 0, &"a".repeat(4_000))),
        ("b", skill(Level::Global, None, None, 1, &"b".repeat(3_999))),
    ];
    let r = run(&skills, &query("t", "x.y", None));
    assert_eq!(r.resolved_context.chars().count(), MAX_CONTEXT_CHARS);
    assert!(r.trace.iter().all(|e| !e.truncated));
}

#[test]
fn applied_lists_what_is_in_the_context() {
    let skills = [
        ("g", skill(Level::Global, None, None, 0, "G")),
        ("x", skill(Level::Tool, Some("t"), Some("nope"), 0, "X")),
    ];
    let r = run(&skills, &query("t", "a.b", None));
    assert_eq!(r.applied().collect::<Vec<_>>(), ["g"]);
}

fn arb_skill() -> impl Strategy<Value = (String, SkillSpec)> {
    (
        0..4usize,
        prop::sample::select(vec!["t", "u"]),
        prop::option::of(prop::sample::select(vec!["*", "api-*", "db.?et", "x.*"])),
        -3i64..3,
        prop::option::of(prop::sample::select(vec!["k1", "k2"])),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec!["ann", "bob"])),
        0..2_500usize,
    )
        .prop_map(
            |(level, tenant, pattern, priority, key, enabled, user, len)| {
                let level = Level::ALL[level];
                let mut s = skill(
                    level,
                    (level != Level::Global).then_some(tenant),
                    if level == Level::Tool {
                        Some(pattern.unwrap_or("*"))
                    } else {
                        pattern
                    },
                    priority,
                    &"s".repeat(len + 1),
                );
                s.key = key.map(str::to_owned);
                s.enabled = enabled;
                if level == Level::User {
                    s.scope.user = Some(user.unwrap_or("ann").to_owned());
                }
                (String::new(), s)
            },
        )
}

proptest! {
    #[test]
    fn resolution_does_not_depend_on_input_order(
        mut skills in prop::collection::vec(arb_skill(), 0..12),
        seed in any::<u64>(),
        user in prop::option::of(prop::sample::select(vec!["ann", "bob"])),
    ) {
        for (i, (name, _)) in skills.iter_mut().enumerate() {
            *name = format!("s{i:02}");
        }
        let q = query("t", "api-get", user);
        let named: Vec<(&str, SkillSpec)> = skills.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        let forward = run(&named, &q);
        let mut shuffled = named.clone();
        // A deterministic shuffle from the seed: rotate, then reverse every other run.
        let len = shuffled.len().max(1);
        shuffled.rotate_left((seed as usize) % len);
        if seed % 2 == 0 {
            shuffled.reverse();
        }
        prop_assert_eq!(&forward, &run(&shuffled, &q));
        prop_assert!(forward.resolved_context.chars().count() <= MAX_CONTEXT_CHARS);
    }
}
