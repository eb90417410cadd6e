//! The check itself can fail: doctored source trees and metadata, each with a circle or a
//! back-arrow planted (or carefully not), and what the check makes of them.

use super::circles::{circles, tangles};
use super::crates::{Kind, back_arrows, floors, workspace_crates};
use super::module_report;
use super::modules::module_graph;
use super::tokens::tokenize;
use serde_json::json;
use std::path::Path;
use tempfile::TempDir;

/// A crate's `src/` in a temporary directory, one `(path under src, text)` per file.
fn tree(files: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let path = dir.path().join("src").join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    dir
}

fn tangles_in(files: &[(&str, &str)]) -> Vec<Vec<String>> {
    let dir = tree(files);
    let graph = module_graph(&dir.path().join("src"), dir.path()).expect("graph");
    tangles(&graph)
}

fn report_on(files: &[(&str, &str)]) -> String {
    let dir = tree(files);
    module_report("demo", &dir.path().join("src"), dir.path()).expect("report")
}

fn names(modules: &[&str]) -> Vec<String> {
    modules.iter().map(|m| m.to_string()).collect()
}

const ROOT: (&str, &str) = (
    "lib.rs",
    "mod a;\nmod b;\nmod c;\npub use a::*;\nuse crate::c::Q;\n",
);

#[test]
fn a_circle_through_use_lines_is_printed_with_its_places() {
    let report = report_on(&[
        ROOT,
        ("a.rs", "use std::fmt;\nuse crate::b::X;\n"),
        ("b.rs", "\n\nuse crate::a::Y;\n"),
        ("c.rs", ""),
    ]);
    assert_eq!(
        report,
        "demo: a, b all reach each other\n\
         demo: a -> b -> a\n    a -> b  src/a.rs:2\n    b -> a  src/b.rs:3\n"
    );
}

#[test]
fn a_circle_through_grouped_and_nested_imports_is_found() {
    let found = tangles_in(&[
        ROOT,
        (
            "a.rs",
            "use crate::{\n    c::W,\n    b::{X, y::{Z as Zed, self}},\n};\n",
        ),
        ("b.rs", "use crate::{a, c};\n"),
        ("c.rs", "pub struct W;\n"),
    ]);
    assert_eq!(found, vec![names(&["a", "b"])]);
}

#[test]
fn a_circle_through_super_chains_is_found_and_inner_supers_are_not_edges() {
    let found = tangles_in(&[
        ROOT,
        ("a/mod.rs", "mod x;\nmod y;\n"),
        ("a/x.rs", "use super::super::b::X;\n"),
        ("a/y.rs", "use super::x::X;\nuse self::super::x;\n"),
        ("b.rs", "fn f() { super::a::g(); }\n"),
        // `super::b` from `c/x.rs` is `c::b`, not the top-level `b`: no edge c -> b.
        ("c/mod.rs", "mod b;\nmod x;\n"),
        ("c/b.rs", ""),
        ("c/x.rs", "use super::b::Thing;\n"),
    ]);
    assert!(found.contains(&names(&["a", "b"])), "{found:?}");
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn a_circle_through_inline_paths_is_found() {
    let found = tangles_in(&[
        ROOT,
        (
            "a.rs",
            "pub fn make() -> crate::b::X {\n    crate::b::X::new()\n}\n",
        ),
        (
            "b.rs",
            "pub struct X;\nimpl X { fn new() -> Self { let _ = crate::a::make::<u8>(); X } }\n",
        ),
        ("c.rs", ""),
    ]);
    assert_eq!(found, vec![names(&["a", "b"])]);
}

#[test]
fn commented_out_and_quoted_paths_name_nothing() {
    let report = report_on(&[
        ROOT,
        (
            "a.rs",
            "//! See `crate::b::X`.\n// use crate::b::X;\n/// [`crate::b::X`]\n\
             /* use crate::b::X; /* nested */ crate::b */\n\
             const S: &str = \"crate::b::X\";\nconst R: &str = r#\"crate::b::X\"#;\n\
             const C: char = '\"'; fn f<'a>(_: &'a str) {}\n",
        ),
        ("b.rs", "use crate::a::S;\n"),
        ("c.rs", ""),
    ]);
    assert_eq!(report, "");
}

#[test]
fn a_clean_tree_reports_nothing() {
    let report = report_on(&[
        ROOT,
        ("a.rs", "use crate::b::X;\nuse crate::{c::Y};\n"),
        ("b/mod.rs", "mod inner;\nuse crate::c::Y;\n"),
        ("b/inner.rs", "use super::super::c::Z;\nuse super::X;\n"),
        ("c.rs", "use crate::Q;\nuse super::Q as R;\n"),
    ]);
    assert_eq!(report, "");
}

#[test]
fn test_modules_lean_on_others_without_making_a_circle() {
    let found = tangles_in(&[
        ROOT,
        (
            "a/mod.rs",
            "#[cfg(test)]\nmod tests;\n#[cfg(test)]\npub(crate) mod fixture;\n",
        ),
        ("a/tests.rs", "use crate::b::X;\n"),
        ("a/fixture.rs", "mod deeper;\n"),
        ("a/fixture/deeper.rs", "use crate::b::X;\n"),
        (
            "b.rs",
            "use crate::a::Y;\n#[cfg(test)]\nmod tests {\n    use crate::c::Z;\n}\n",
        ),
        ("c.rs", "use crate::b::X;\n"),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn every_edge_of_a_tangle_lies_on_a_printed_circle() {
    let dir = tree(&[
        ROOT,
        ("a.rs", "use crate::b::X;\nuse crate::c::Y;\n"),
        ("b.rs", "use crate::c::Y;\n"),
        ("c.rs", "use crate::a::Z;\n"),
    ]);
    let graph = module_graph(&dir.path().join("src"), dir.path()).expect("graph");
    let tangle = names(&["a", "b", "c"]);
    assert_eq!(tangles(&graph), vec![tangle.clone()]);
    let found = circles(&graph, &tangle);
    assert_eq!(
        found,
        vec![names(&["a", "b", "c", "a"]), names(&["a", "c", "a"])]
    );
}

#[test]
fn a_module_in_two_files_is_reported() {
    let report = report_on(&[
        ROOT,
        ("a.rs", ""),
        ("a/mod.rs", ""),
        ("b.rs", ""),
        ("c.rs", ""),
    ]);
    assert_eq!(
        report,
        "demo: one module in two files: src/a.rs and src/a/mod.rs\n"
    );
}

#[test]
fn literals_comments_and_lifetimes_leave_no_tokens() {
    let text: Vec<String> =
        tokenize("a::b /* x */ \"s\\\"\" br##\"r\"#\"## b'x' '\\'' 'l r#mod // c\nz")
            .into_iter()
            .map(|t| t.text)
            .collect();
    assert_eq!(text, ["a", "::", "b", "mod", "z"]);
    assert_eq!(
        tokenize("\n/* \n */ \"\n\" x").last().map(|t| t.line),
        Some(4)
    );
}

/// A package's dependencies by name, each with its kind (`None` for a normal one).
type Uses<'a> = &'a [(&'a str, Option<&'a str>)];

/// Metadata as `cargo metadata --no-deps` writes it, trimmed to what the check reads.
fn metadata(packages: &[(&str, Uses)]) -> serde_json::Value {
    let packages: Vec<_> = packages
        .iter()
        .map(|(name, deps)| {
            let deps: Vec<_> = deps
                .iter()
                .map(|(on, kind)| json!({ "name": on, "kind": kind, "source": null }))
                .collect();
            json!({
                "name": name,
                "id": format!("path+file:///w/{name}#0.1.0"),
                "manifest_path": format!("/w/{name}/Cargo.toml"),
                "dependencies": deps,
            })
        })
        .collect();
    let members: Vec<_> = packages.iter().map(|p| p["id"].clone()).collect();
    json!({ "packages": packages, "workspace_members": members })
}

#[test]
fn crates_get_floors_from_what_they_need_to_build() {
    let meta = metadata(&[
        ("low", &[]),
        ("mid", &[("low", None), ("serde", None)]),
        (
            "top",
            &[("mid", None), ("low", Some("dev")), ("gen", Some("build"))],
        ),
        ("gen", &[]),
    ]);
    let crates = workspace_crates(&meta).expect("crates");
    assert_eq!(crates["top"].uses[2], ("mid".to_string(), Kind::Normal));
    let floors = floors(&crates).expect("floors");
    let got: Vec<(&str, usize)> = floors.iter().map(|(n, f)| (n.as_str(), *f)).collect();
    assert_eq!(got, [("gen", 0), ("low", 0), ("mid", 1), ("top", 2)]);
    assert!(back_arrows(&crates, &floors).is_empty());
    assert_eq!(crates["mid"].dir, Path::new("/w/mid"));
}

#[test]
fn a_dev_dependency_pointing_up_or_level_is_a_back_arrow() {
    let meta = metadata(&[
        ("low", &[("top", Some("dev"))]),
        ("mid", &[("low", None), ("side", Some("dev"))]),
        ("side", &[("low", None)]),
        ("top", &[("mid", None)]),
    ]);
    let crates = workspace_crates(&meta).expect("crates");
    let floors = floors(&crates).expect("floors");
    assert_eq!(
        back_arrows(&crates, &floors),
        [
            "low (floor 0) -> top (floor 2) [dev]",
            "mid (floor 1) -> side (floor 1) [dev]",
        ]
    );
}

#[test]
fn a_registry_crate_named_like_a_member_is_not_a_workspace_edge() {
    let mut meta = metadata(&[("low", &[]), ("top", &[("low", None)])]);
    meta["packages"][0]["dependencies"] = json!([{ "name": "top", "kind": null, "source": "registry+https://github.com/rust-lang/crates.io-index" }]);
    let crates = workspace_crates(&meta).expect("crates");
    assert!(crates["low"].uses.is_empty());
}
