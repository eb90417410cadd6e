use crate::cli::ResolveArgs;
use crate::files;
use gatehouse_registry::Resource;
use gatehouse_registry::cascade::{self, Candidate, Query};
use std::process::ExitCode;

pub fn resolve(args: &ResolveArgs) -> anyhow::Result<ExitCode> {
    let Some(path) = args.path.as_deref().filter(|_| args.offline) else {
        anyhow::bail!("resolving against a cluster is not available yet: pass --offline -f PATH");
    };
    let parsed = files::load(path)?;
    if !parsed.problems.is_empty() {
        for problem in &parsed.problems {
            eprintln!("{problem}");
        }
        eprintln!("{} problem(s): fix them to resolve", parsed.problems.len());
        return Ok(ExitCode::FAILURE);
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
    Ok(ExitCode::SUCCESS)
}
