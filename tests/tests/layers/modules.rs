//! The graph between one crate's top-level modules, read from every `.rs` file under its `src/`.

use super::paths::{self, FileScan};
use super::tokens::tokenize;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// Top-level modules and the edges between them, each edge with the first place that makes it.
#[derive(Debug, Default)]
pub struct ModuleGraph {
    pub modules: BTreeSet<String>,
    /// `(from, to)` to `file:line`, the file shown relative to the root the graph was read under.
    pub edges: BTreeMap<(String, String), String>,
}

impl ModuleGraph {
    pub fn targets<'g>(&'g self, from: &'g str) -> impl Iterator<Item = &'g str> + 'g {
        self.edges
            .keys()
            .filter(move |(a, _)| a == from)
            .map(|(_, b)| b.as_str())
    }
}

/// One source file: where it is, the module it belongs to, and what it names.
#[derive(Debug)]
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    scan: FileScan,
}

/// Reads the crate whose sources are under `src`; file names in the graph are shown relative to
/// `root`.
pub fn module_graph(src: &Path, root: &Path) -> io::Result<ModuleGraph> {
    let mut files = Vec::new();
    for path in rust_files(src)? {
        let module = module_path(path.strip_prefix(src).unwrap_or(&path));
        let tokens = tokenize(&std::fs::read_to_string(&path)?);
        let scan = paths::scan(&tokens, &module);
        files.push(SourceFile { path, module, scan });
    }
    let test_modules: Vec<Vec<String>> = files
        .iter()
        .flat_map(|f| f.scan.test_modules.iter().cloned())
        .collect();
    let mut graph = ModuleGraph {
        modules: files
            .iter()
            .filter_map(|f| f.module.first().cloned())
            .collect(),
        ..ModuleGraph::default()
    };
    for file in &files {
        let Some(from) = file.module.first() else {
            continue; // lib.rs and main.rs: the root may name every module.
        };
        if test_modules.iter().any(|t| file.module.starts_with(t)) {
            continue;
        }
        let shown = file.path.strip_prefix(root).unwrap_or(&file.path).display();
        for reference in file.scan.references.iter().filter(|r| !r.in_test) {
            if &reference.module != from && graph.modules.contains(&reference.module) {
                let edge = (from.clone(), reference.module.clone());
                let place = format!("{shown}:{}", reference.line);
                graph.edges.entry(edge).or_insert(place);
            }
        }
    }
    Ok(graph)
}

/// `a.rs` and `a/mod.rs` are module `a`, `a/b.rs` is `a::b`; `lib.rs` and `main.rs` the root.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.strip_suffix(".rs").unwrap_or(&last);
        let is_root = parts.is_empty() && matches!(stem, "lib" | "main");
        if stem != "mod" && !is_root {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// Every `.rs` file under `dir`, sorted, so that the first place shown for an edge is stable.
fn rust_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Modules written twice, as `x.rs` and as `x/mod.rs`, shown relative to `root`.
pub fn doubled_modules(src: &Path, root: &Path) -> io::Result<Vec<String>> {
    let mut doubled = Vec::new();
    for path in rust_files(src)? {
        if path.file_name().is_some_and(|n| n == "mod.rs") {
            let dir = path.parent().unwrap_or(src);
            let twin = dir.with_extension("rs");
            if twin.is_file() {
                let shown = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
                doubled.push(format!("{} and {}", shown(&twin), shown(&path)));
            }
        }
    }
    Ok(doubled)
}
