use super::Output;
use crate::exit::Exit;
use crate::files;
use std::path::Path;

pub fn run(path: &Path, output: Output) -> anyhow::Result<Exit> {
    let parsed = files::load(path)?;
    match output {
        Output::Json | Output::Jsonl => {
            let problems: Vec<_> = parsed
                .problems
                .iter()
                .map(|p| {
                    serde_json::json!({
                        "file": p.origin.file, "document": p.origin.document, "resource": p.resource,
                        "field": p.field, "line": p.line, "message": p.message,
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"valid": parsed.resources.len(), "problems": problems})
            );
        }
        Output::Text => {
            for problem in &parsed.problems {
                println!("{problem}");
            }
            if parsed.problems.is_empty() {
                println!("{} resource(s) valid", parsed.resources.len());
            } else {
                println!("{} problem(s)", parsed.problems.len());
            }
        }
    }
    Ok(if parsed.problems.is_empty() {
        Exit::Done
    } else {
        Exit::Failed
    })
}
