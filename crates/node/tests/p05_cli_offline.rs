//! The command line without a cluster: `validate` and `skills resolve --offline`, run as the
//! real binary against files on disk.

use serde_json::Value;
use std::path::{Path, PathBuf};

mod common;

use common::{gatehouse, stdout};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

#[test]
fn the_adr_example_resolves_to_its_three_lines_in_order() {
    let adr = examples().join("adr");
    let out = gatehouse(&[
        "skills",
        "resolve",
        "--offline",
        "-f",
        adr.to_str().unwrap(),
        "--tenant",
        "acme",
        "--tool",
        "api-create",
        "--user",
        "john",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["resolved_context"],
        "Always include a request ID in API calls.\n\
         Use ISO 8601 dates, amounts in EUR.\n\
         api-create requires approval for amounts > 10000."
    );
    let trace = json["trace"].as_array().unwrap();
    let rows: Vec<(&str, bool)> = trace
        .iter()
        .map(|e| {
            (
                e["level"].as_str().unwrap(),
                e["matched"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("global", true),
            ("tenant", true),
            ("tool", true),
            ("user", false)
        ]
    );
    for entry in trace {
        for field in [
            "level",
            "skill",
            "priority",
            "matched",
            "reason",
            "overridden_by",
        ] {
            assert!(
                entry.get(field).is_some(),
                "trace entry lacks {field}: {entry}"
            );
        }
    }
}

#[test]
fn validate_accepts_every_shipped_example() {
    let out = gatehouse(&["validate", "-f", examples().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("valid"));
}

#[test]
fn validate_reports_every_problem_of_every_file_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: gatehouse.dev/v1\nkind: Skill\nmetadata: {name: s}\nspec:\n  scope: {type: tool, tenant: acme}\n  instructions: \"\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.yml"),
        "apiVersion: gatehouse.dev/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  approvals: {required: 0}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not yaml: [").unwrap();
    let out = gatehouse(&["validate", "-f", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    for expected in [
        "a.yaml: document 1 (Skill/s): spec.scope.toolPattern:",
        "a.yaml: document 1 (Skill/s): spec.instructions:",
        "b.yml: document 1 (Policy/p): metadata.tenant:",
        "b.yml: document 1 (Policy/p): spec.approvals.required:",
        "4 problem(s)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn resolve_refuses_invalid_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "apiVersion: gatehouse.dev/v1\nkind: Skill\nmetadata: {name: s}\nspec: {scope: {type: global}}\n").unwrap();
    let out = gatehouse(&[
        "skills",
        "resolve",
        "--offline",
        "-f",
        file.to_str().unwrap(),
        "--tenant",
        "t",
        "--tool",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("instructions"));
}

#[test]
fn a_missing_path_is_a_clear_error() {
    let out = gatehouse(&["validate", "-f", "/nonexistent/gatehouse"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/gatehouse"));
}

#[test]
fn keygen_prints_a_key_and_its_digest() {
    let out = gatehouse(&["keygen"]);
    assert!(out.status.success());
    let text = stdout(&out);
    let key = text.lines().next().unwrap().rsplit(' ').next().unwrap();
    let digest = text.lines().nth(1).unwrap().rsplit(' ').next().unwrap();
    assert_eq!(key.len(), "gate_".len() + 64);
    assert_eq!(
        digest,
        gatehouse_registry::canonical::sha256_hex(key.as_bytes())
    );
}

#[test]
fn validate_speaks_json_for_scripts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: gatehouse.dev/v1\nkind: Skill\nmetadata: {name: s}\nspec:\n  scope: {type: global}\n  priority: high\n  instructions: x\n",
    )
    .unwrap();
    let out = gatehouse(&["-o", "json", "validate", "-f", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], 0);
    assert_eq!(json["problems"][0]["field"], "spec.priority");
    assert_eq!(json["problems"][0]["line"], 6);
    assert_eq!(json["problems"][0]["document"], 1);
}
