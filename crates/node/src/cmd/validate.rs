use crate::files;
use std::path::Path;
use std::process::ExitCode;

pub fn run(path: &Path) -> anyhow::Result<ExitCode> {
    let parsed = files::load(path)?;
    for problem in &parsed.problems {
        println!("{problem}");
    }
    if parsed.problems.is_empty() {
        println!("{} resource(s) valid", parsed.resources.len());
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{} problem(s)", parsed.problems.len());
        Ok(ExitCode::FAILURE)
    }
}
