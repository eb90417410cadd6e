//! The workspace's crates on floors: a crate that uses no workspace crate stands on floor 0, any
//! other one floor above the highest crate it needs to build (normal and build dependencies).
//! Every dependency on a workspace crate, dev-dependencies included, must point to a lower floor.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Normal,
    Build,
    Dev,
}

/// A workspace crate: its directory and the workspace crates it depends on.
#[derive(Debug)]
pub struct Crate {
    pub dir: PathBuf,
    pub uses: Vec<(String, Kind)>,
}

/// Workspace crates by package name.
pub type Crates = BTreeMap<String, Crate>;

/// `cargo metadata --no-deps` for the workspace at `root`, as JSON.
pub fn cargo_metadata(root: &Path) -> Result<Value, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!("cargo metadata failed: {stderr}"));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("cargo metadata output: {e}"))
}

/// The workspace members of `metadata` and their dependencies on each other. A dependency is on a
/// workspace crate when it names a member and comes from no registry or git source.
pub fn workspace_crates(metadata: &Value) -> Result<Crates, String> {
    let members = metadata["workspace_members"]
        .as_array()
        .ok_or("metadata has no workspace_members")?;
    let packages = metadata["packages"]
        .as_array()
        .ok_or("metadata has no packages")?;
    let packages: Vec<&Value> = packages
        .iter()
        .filter(|p| members.contains(&p["id"]))
        .collect();
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut crates = Crates::new();
    for package in packages {
        let name = package["name"].as_str().ok_or("a package without a name")?;
        let manifest = package["manifest_path"].as_str().unwrap_or_default();
        let mut uses = Vec::new();
        for dependency in package["dependencies"].as_array().into_iter().flatten() {
            let on = dependency["name"].as_str().unwrap_or_default();
            if names.contains(&on) && dependency["source"].is_null() {
                uses.push((on.to_string(), kind(dependency)));
            }
        }
        uses.sort();
        uses.dedup();
        let dir = Path::new(manifest)
            .parent()
            .unwrap_or(Path::new(""))
            .to_path_buf();
        crates.insert(name.to_string(), Crate { dir, uses });
    }
    Ok(crates)
}

fn kind(dependency: &Value) -> Kind {
    match dependency["kind"].as_str() {
        Some("dev") => Kind::Dev,
        Some("build") => Kind::Build,
        _ => Kind::Normal,
    }
}

/// Each crate's floor. Cargo refuses circles among normal and build dependencies; should one
/// show up anyway, it is named instead of looping.
pub fn floors(crates: &Crates) -> Result<BTreeMap<String, usize>, String> {
    let mut floors = BTreeMap::new();
    for name in crates.keys() {
        floor_of(name, crates, &mut floors, &mut Vec::new())?;
    }
    Ok(floors)
}

fn floor_of(
    name: &str,
    crates: &Crates,
    floors: &mut BTreeMap<String, usize>,
    climbing: &mut Vec<String>,
) -> Result<usize, String> {
    if let Some(floor) = floors.get(name) {
        return Ok(*floor);
    }
    if climbing.iter().any(|c| c == name) {
        return Err(format!(
            "crates need each other to build: {} -> {name}",
            climbing.join(" -> ")
        ));
    }
    climbing.push(name.to_string());
    let mut floor = 0;
    for (on, kind) in &crates[name].uses {
        if *kind != Kind::Dev {
            floor = floor.max(floor_of(on, crates, floors, climbing)? + 1);
        }
    }
    climbing.pop();
    floors.insert(name.to_string(), floor);
    Ok(floor)
}

/// Dependencies that point to a crate on the same floor or above, one line each.
pub fn back_arrows(crates: &Crates, floors: &BTreeMap<String, usize>) -> Vec<String> {
    let mut arrows = Vec::new();
    for (name, krate) in crates {
        for (on, kind) in &krate.uses {
            if floors[on] >= floors[name] {
                arrows.push(format!(
                    "{name} (floor {}) -> {on} (floor {}){}",
                    floors[name],
                    floors[on],
                    kind_note(*kind)
                ));
            }
        }
    }
    arrows
}

fn kind_note(kind: Kind) -> &'static str {
    match kind {
        Kind::Normal => "",
        Kind::Build => " [build]",
        Kind::Dev => " [dev]",
    }
}

/// The crates floor by floor, top floor first, each with the workspace crates it uses.
pub fn picture(crates: &Crates, floors: &BTreeMap<String, usize>) -> String {
    let top = floors.values().copied().max().unwrap_or(0);
    let mut picture = String::new();
    for floor in (0..=top).rev() {
        let _ = writeln!(picture, "floor {floor}");
        for (name, krate) in crates.iter().filter(|(n, _)| floors[n.as_str()] == floor) {
            let uses: Vec<String> = krate
                .uses
                .iter()
                .map(|(on, kind)| format!("{on}{}", kind_note(*kind)))
                .collect();
            let uses = if uses.is_empty() {
                "(no workspace crate)".to_string()
            } else {
                uses.join(", ")
            };
            let _ = writeln!(picture, "    {name}: {uses}");
        }
    }
    picture
}
