use super::client::{Remote, RemoteArgs};
use crate::exit::Exit;
use crate::files;
use clap::{Args, Subcommand};
use gatehouse_registry::Resource;
use gatehouse_registry::cascade::{self, Candidate, Query};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Print the resolved context and the trace, as JSON.
    Resolve(ResolveArgs),
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Resolve from files, without a cluster.
    #[arg(long, requires = "path")]
    pub offline: bool,
    /// With --offline: a YAML file, or a directory of .yaml/.yml files, holding the skills.
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// The tenant the call is made for.
    #[arg(long)]
    pub tenant: String,
    /// The namespaced tool, `upstream.tool`.
    #[arg(long)]
    pub tool: String,
    /// The end user the call is made for, if any.
    #[arg(long)]
    pub user: Option<String>,
    #[command(flatten)]
    pub remote: RemoteArgs,
}

pub fn resolve(args: &ResolveArgs) -> anyhow::Result<Exit> {
    let Some(path) = args.path.as_deref() else {
        anyhow::bail!("--offline needs -f PATH");
    };
    let parsed = files::load(path)?;
    if !parsed.problems.is_empty() {
        for problem in &parsed.problems {
            eprintln!("{problem}");
        }
        eprintln!("{} problem(s): fix them to resolve", parsed.problems.len());
        return Ok(Exit::Failed);
    }
    let query = Query {
        tenant: args.tenant.clone(),
        tool: args.tool.clone(),
        user: args.user.clone(),
    };
    let skills = parsed.resources.iter().filter_map(|(_, r)| match r {
        Resource::Skill(s) => Some(Candidate {
            name: &s.metadata.name,
            spec: &s.spec,
        }),
        _ => None,
    });
    let resolution = cascade::resolve(skills, &query);
    println!("{}", serde_json::to_string_pretty(&resolution)?);
    Ok(Exit::Done)
}

/// Resolves against the cluster: the node's own copy of the registry, with the trace.
pub async fn resolve_remote(remote: &Remote, args: ResolveArgs) -> anyhow::Result<Exit> {
    use gatehouse_proto::v1 as pb;
    let mut registry = super::client::registry(remote).await?;
    let answer = registry
        .resolve_skills(pb::ResolveSkillsRequest {
            tenant: args.tenant,
            tool: args.tool,
            user: args.user,
        })
        .await
        .map_err(super::client::explain)?
        .into_inner();
    let trace: Vec<_> = answer
        .trace
        .iter()
        .map(|e| {
            let level = pb::SkillLevel::try_from(e.level).map_or("?".to_owned(), |l| {
                l.as_str_name()
                    .trim_start_matches("SKILL_LEVEL_")
                    .to_lowercase()
            });
            serde_json::json!({
                "level": level,
                "skill": (!e.skill.is_empty()).then_some(&e.skill),
                "priority": (!e.skill.is_empty()).then_some(e.priority),
                "matched": e.matched,
                "reason": e.reason,
                "overridden_by": e.overridden_by,
                "truncated": e.truncated,
            })
        })
        .collect();
    let out = serde_json::json!({"resolved_context": answer.resolved_context, "trace": trace, "applied_index": answer.applied_index});
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(Exit::Done)
}
