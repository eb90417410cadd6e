//! Reading declarative files from disk: one file, or every `.yaml`/`.yml` file below a
//! directory, in a stable order so that reports and batches come out the same every time.

use anyhow::Context;
use gatehouse_registry::documents::{self, Parsed};
use std::path::{Path, PathBuf};

/// Parses every document under `path`, reporting problems of all files together, duplicates
/// across files included.
pub fn load(path: &Path) -> anyhow::Result<Parsed> {
    let mut parsed = Parsed::default();
    for file in yaml_files(path)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        parsed.extend(documents::parse(&file.display().to_string(), &text));
    }
    parsed.check_duplicates();
    Ok(parsed)
}

fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    // The path came from the command line: one that is not there is a usage mistake (exit 2).
    let meta = std::fs::metadata(path)
        .map_err(|e| crate::exit::Usage(format!("reading {}: {e}", path.display())))?;
    if meta.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    let mut dirs = vec![path.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry?;
            let p = entry.path();
            if entry.file_type()?.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                files.push(p);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no .yaml or .yml files under {}", path.display());
    }
    Ok(files)
}
