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

/// A command that prints more than a pipe holds, read by a reader that stops after one line
/// (`| head -1`): it ends quietly, without a panic or a word on stderr.
#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    // 4,000 tenants with a bad name: one problem line each, far more than a pipe's 64 KiB.
    let bad: String = (0..4_000)
        .map(|i| {
            format!("apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: \"Bad Name {i}\"}}\nspec: {{}}\n---\n")
        })
        .collect();
    std::fs::write(dir.path().join("bad.yaml"), bad).unwrap();
    let mut child = Command::new(common::BIN)
        .args(["validate", "-f", dir.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("Bad Name"), "{first}");
    // The read end is closed here.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "said on stderr: {stderr}");
    assert_ne!(out.status.code(), Some(101), "it panicked");
}

/// The documented exit codes for what a script cannot otherwise tell apart: a usage mistake (2)
/// and a node that does not answer (4); a check that finds problems is 1.
#[test]
fn usage_mistakes_and_unreachable_nodes_have_their_own_exit_codes() {
    let bad_wait = gatehouse(&["call", "x.y", "--tenant", "t", "--wait=-1", "--token", "k"]);
    assert_eq!(bad_wait.status.code(), Some(2));
    let typo = gatehouse(&["lsit", "tools"]);
    assert_eq!(typo.status.code(), Some(2));
    let node_flag = gatehouse(&["--addr", "127.0.0.1:1", "dev"]);
    assert_eq!(node_flag.status.code(), Some(2));
    let unreachable = gatehouse(&["list", "tools", "--addr", "127.0.0.1:1", "--token", "k"]);
    assert_eq!(unreachable.status.code(), Some(4));
    let said = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(said.lines().count(), 1, "one line: {said}");
    assert_eq!(
        said.matches("tcp connect error").count(),
        1,
        "each cause said once: {said}"
    );
}

/// `keygen -o json` prints one object scripts can read, not the text for people.
#[test]
fn keygen_speaks_json_when_asked() {
    let out = gatehouse(&["keygen", "-o", "json"]);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    let key: Value = serde_json::from_str(&text).expect("keygen -o json is JSON");
    let api_key = key["api_key"].as_str().expect("the key");
    let digest = key["api_key_sha256"].as_str().expect("its digest");
    assert_eq!(
        digest,
        gatehouse_registry::canonical::sha256_hex(api_key.as_bytes())
    );
}
