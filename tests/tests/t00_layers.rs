//! The workspace's layering: no import circle anywhere, and each crate on a floor strictly below
//! the crates that use it.
//!
//! **Crates.** A crate that uses no workspace crate stands on floor 0; any other crate one floor
//! above the highest workspace crate among its normal and build dependencies. Every dependency on
//! a workspace crate, a dev-dependency included, must point to a lower floor: a dev-dependency on
//! a crate level with or above its user is a back-arrow too. `cargo test -p gatehouse-tests --test
//! t00_layers -- --nocapture` prints the picture, top floor first, each crate with the workspace
//! crates it uses. A failure lists each back-arrow as `user (floor n) -> used (floor m) [dev]`.
//!
//! **Modules.** Within each crate, a top-level module is the first path component under `src/`
//! (`src/cluster.rs` and `src/cluster/*.rs` are `cluster`); `lib.rs` and `main.rs` are the root,
//! which may name every module. Module `a` uses `b` when a file of `a` names `crate::b` — in a `use`
//! line, grouped (`use crate::{b::X, c}`) or not, or inline in an expression or a type — or climbs
//! out of `a` with `super::` and lands in `b`. Comments and string literals name nothing.
//!
//! A failure names each set of modules that all reach each other, then circles through that set,
//! `crate: a -> b -> a`, one line per edge with the first `file:line` that makes it; together the
//! circles use every edge inside the set. Cut one edge of each circle (move what both sides need
//! down into a module, or a crate, that neither reaches back from) and run again. A module written
//! both as `x.rs` and `x/mod.rs` fails too.
//!
//! Code in `#[cfg(test)]` modules (inline `mod tests { … }`, or a file declared by
//! `#[cfg(test)] mod tests;`, with everything below it) is left out. A module's tests may build
//! their fixtures through a module above it, the way callers do — the registry's `resource` tests
//! parse documents with `documents::parse` — without the module itself depending on it; counting
//! them would report circles that no build of the library has.
//!
//! The check reads paths; it does not resolve names. A name reached only through a re-export at
//! the root (`use crate::Thing;` where `lib.rs` says `pub use b::Thing`) is not traced to `b`, so
//! inside a crate, name the module (`crate::b::Thing`).

mod layers;

use layers::crates::{back_arrows, cargo_metadata, floors, picture, workspace_crates};
use std::path::PathBuf;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_crate_stands_above_the_crates_it_uses() {
    let root = workspace_root();
    let metadata = cargo_metadata(&root).expect("cargo metadata");
    let crates = workspace_crates(&metadata).expect("workspace crates");
    let floors = floors(&crates).expect("floors");
    println!("{}", picture(&crates, &floors));
    let arrows = back_arrows(&crates, &floors);
    assert!(
        arrows.is_empty(),
        "dependencies that point level or up:\n{}",
        arrows.join("\n")
    );
}

#[test]
fn no_module_imports_its_way_back_to_itself() {
    let root = workspace_root().canonicalize().expect("workspace root");
    let metadata = cargo_metadata(&root).expect("cargo metadata");
    let crates = workspace_crates(&metadata).expect("workspace crates");
    let mut report = String::new();
    for (name, krate) in &crates {
        let src = krate.dir.join("src");
        if src.is_dir() {
            report += &layers::module_report(name, &src, &root).expect("read sources");
        }
    }
    assert!(report.is_empty(), "modules out of layer:\n{report}");
}
