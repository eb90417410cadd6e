//! Skill cascade resolution: which skills apply to one call, in what order, and why each
//! candidate did or did not make it. Every node, and every implementation, must give the same
//! answer for the same skills, so the rules here are DESIGN's to the letter.

use crate::glob::tool_matches;
use crate::resource::{Level, SkillSpec};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// The resolved context is at most this many characters; whole skills are dropped to fit.
pub const MAX_CONTEXT_CHARS: usize = 8_000;

/// Who is calling what: the key a resolution is computed (and cached) for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Query {
    pub tenant: String,
    pub tool: String,
    pub user: Option<String>,
}

/// A skill offered to the cascade: its name and spec, as stored.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub spec: &'a SkillSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    pub resolved_context: String,
    pub trace: Vec<TraceEntry>,
}

/// One line of the trace: a candidate skill, or a level that offered none (`skill: null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    pub level: Level,
    pub skill: Option<String>,
    pub priority: Option<i64>,
    /// The skill's scope fits the call: right tenant, enabled, tool and user match.
    pub matched: bool,
    pub reason: String,
    pub overridden_by: Option<String>,
    pub truncated: bool,
}

impl Resolution {
    /// The skills whose instructions are in the context, in order.
    pub fn applied(&self) -> impl Iterator<Item = &str> {
        self.trace
            .iter()
            .filter(|e| e.matched && e.overridden_by.is_none() && !e.truncated)
            .filter_map(|e| e.skill.as_deref())
    }
}

/// Why a candidate's scope does or does not fit the call.
fn scope_verdict(spec: &SkillSpec, query: &Query) -> Result<(), String> {
    let scope = &spec.scope;
    if let Some(tenant) = &scope.tenant
        && *tenant != query.tenant
    {
        return Err("belongs to another tenant".to_owned());
    }
    if !spec.enabled {
        return Err("disabled".to_owned());
    }
    if scope.level == Level::User {
        match (&scope.user, &query.user) {
            (Some(want), Some(have)) if want == have => {}
            (_, None) => return Err("user skill, and the call has no end user".to_owned()),
            (_, Some(_)) => return Err("for another user".to_owned()),
        }
    }
    if let Some(pattern) = &scope.tool_pattern
        && !tool_matches(pattern, &query.tool)
    {
        return Err(format!(
            "tool pattern {pattern:?} does not match {:?}",
            query.tool
        ));
    }
    Ok(())
}

/// The cascade's order: level, then ascending priority, then ascending name. The trailing keys
/// only make the order total, so that input order can never show through.
fn cascade_order(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    (a.spec.scope.level, a.spec.priority, a.name)
        .cmp(&(b.spec.scope.level, b.spec.priority, b.name))
        .then_with(|| a.spec.scope.tenant.cmp(&b.spec.scope.tenant))
        .then_with(|| a.spec.instructions.cmp(&b.spec.instructions))
}

pub fn resolve<'a>(
    candidates: impl IntoIterator<Item = Candidate<'a>>,
    query: &Query,
) -> Resolution {
    let mut candidates: Vec<Candidate<'a>> = candidates.into_iter().collect();
    candidates.sort_by(cascade_order);

    let mut trace: Vec<TraceEntry> = candidates
        .iter()
        .map(|c| {
            let verdict = scope_verdict(c.spec, query);
            TraceEntry {
                level: c.spec.scope.level,
                skill: Some(c.name.to_owned()),
                priority: Some(c.spec.priority),
                matched: verdict.is_ok(),
                reason: verdict.err().unwrap_or_else(|| "matched".to_owned()),
                overridden_by: None,
                truncated: false,
            }
        })
        .collect();

    // Conflicts: among matched skills sharing a key, the last in cascade order wins: the more
    // specific level, then the higher priority, then the later name.
    for i in 0..candidates.len() {
        let Some(key) = &candidates[i].spec.key else {
            continue;
        };
        if !trace[i].matched {
            continue;
        }
        let winner = (i + 1..candidates.len())
            .rev()
            .find(|&j| trace[j].matched && candidates[j].spec.key.as_ref() == Some(key));
        if let Some(j) = winner {
            trace[i].overridden_by = Some(candidates[j].name.to_owned());
            trace[i].reason = format!("overridden by {:?} (key {key:?})", candidates[j].name);
        }
    }

    let applied: Vec<usize> = (0..candidates.len())
        .filter(|&i| trace[i].matched && trace[i].overridden_by.is_none())
        .collect();
    let lengths: Vec<usize> = applied
        .iter()
        .map(|&i| candidates[i].spec.instructions.trim().chars().count())
        .collect();
    // Drop whole skills from the least specific, lowest priority end until the joined text fits.
    let mut first_kept = 0;
    let mut total = joined_len(&lengths);
    while total > MAX_CONTEXT_CHARS {
        let i = applied[first_kept];
        trace[i].truncated = true;
        trace[i].reason =
            format!("dropped: the resolved context is limited to {MAX_CONTEXT_CHARS} characters");
        first_kept += 1;
        total = joined_len(&lengths[first_kept..]);
    }
    let resolved_context = applied[first_kept..]
        .iter()
        .map(|&i| candidates[i].spec.instructions.trim())
        .collect::<Vec<_>>()
        .join("\n");

    for level in Level::ALL {
        if !candidates.iter().any(|c| c.spec.scope.level == level) {
            let at = trace.partition_point(|e| e.level <= level);
            trace.insert(
                at,
                TraceEntry {
                    level,
                    skill: None,
                    priority: None,
                    matched: false,
                    reason: format!("no {level} skill"),
                    overridden_by: None,
                    truncated: false,
                },
            );
        }
    }
    Resolution {
        resolved_context,
        trace,
    }
}

fn joined_len(lengths: &[usize]) -> usize {
    lengths.iter().sum::<usize>() + lengths.len().saturating_sub(1)
}

#[cfg(test)]
mod tests;
