//! The layering check's parts: crate floors from `cargo metadata`, and for each crate the graph
//! between its top-level modules with the circles in it.

pub mod circles;
pub mod crates;
pub mod modules;
pub mod paths;
pub mod tokens;

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// What is wrong with the modules of crate `name` (sources under `src`, files shown relative to
/// `root`): each set of modules that reach each other, then circles through it, `crate: a -> b ->
/// a` with one `file:line` per edge, and every module written twice. Empty when all is well.
pub fn module_report(name: &str, src: &Path, root: &Path) -> io::Result<String> {
    let graph = modules::module_graph(src, root)?;
    let mut report = String::new();
    for tangle in circles::tangles(&graph) {
        let members = tangle.join(", ");
        let _ = writeln!(report, "{name}: {members} all reach each other");
        for circle in circles::circles(&graph, &tangle) {
            let _ = writeln!(report, "{name}: {}", circle.join(" -> "));
            for pair in circle.windows(2) {
                let place = &graph.edges[&(pair[0].clone(), pair[1].clone())];
                let _ = writeln!(report, "    {} -> {}  {place}", pair[0], pair[1]);
            }
        }
    }
    for doubled in modules::doubled_modules(src, root)? {
        let _ = writeln!(report, "{name}: one module in two files: {doubled}");
    }
    Ok(report)
}
