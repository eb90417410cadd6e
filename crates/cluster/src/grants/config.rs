//! The grants as the operator writes them, and their validation into [`Grants`].
//!
//! ```toml
//! [[credential]]
//! name = "stripe"                       # what an Upstream names: `credential: stripe`
//! file = "/etc/gatehouse/stripe.key"    # or env = "STRIPE_KEY": exactly one
//! tenants = ["acme"]                    # who may name it; "*" for every tenant
//!
//! credentials-file = "/etc/gatehouse/credentials.toml"  # more [[credential]] tables
//! builtins = ["demo:echo", "demo:transfer", "lab:*"]    # built-in tools per tenant
//! ```

use super::{CredentialSource, EVERY_TENANT, Grants, OperatorCredential};
use crate::ENV_PREFIX;
use crate::grants::BuiltinTool;
use gatehouse_registry::resource::is_valid_name;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

/// One `[[credential]]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CredentialConfig {
    pub name: String,
    #[serde(default)]
    pub env: Option<String>,
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub tenants: Vec<String>,
}

/// The shape of `credentials-file`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialsFile {
    #[serde(default)]
    credential: Vec<CredentialConfig>,
}

/// The grants the settings give, every problem with them added to `problems`: each credential's
/// name, source (exactly one of `env` and `file`; no file in `data_dir`, where the node's keys
/// are; no `GATEHOUSE_*` variable, which are the node's own settings and keys) and tenants, names
/// given twice, and each `builtins` entry.
pub fn grants_from_config(
    inline: &[CredentialConfig],
    credentials_file: Option<&Path>,
    builtins: &[String],
    data_dir: &Path,
    problems: &mut Vec<String>,
) -> Grants {
    let mut grants = Grants::default().guarding(data_dir);
    let mut entries: Vec<(String, CredentialConfig)> = inline
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("credential[{i}]"), c.clone()))
        .collect();
    if let Some(path) = credentials_file {
        let shown = path.display();
        match std::fs::read_to_string(path) {
            Err(e) => problems.push(format!("credentials-file: reading {shown}: {e}")),
            Ok(text) => match toml::from_str::<CredentialsFile>(&text) {
                Err(e) => problems.push(format!("credentials-file: {shown}: {e}")),
                Ok(file) => entries.extend(
                    file.credential
                        .into_iter()
                        .enumerate()
                        .map(|(i, c)| (format!("credentials-file {shown}: credential[{i}]"), c)),
                ),
            },
        }
        if inside(path, data_dir) {
            problems.push(format!(
                "credentials-file: {shown} is inside data-dir, which holds the node's own keys"
            ));
        }
    }
    for (at, entry) in entries {
        let Some(credential) = credential(&at, &entry, data_dir, problems) else {
            continue;
        };
        if grants.credentials.contains_key(&entry.name) {
            problems.push(format!("{at}.name: {:?} is declared twice", entry.name));
            continue;
        }
        grants.credentials.insert(entry.name, credential);
    }
    for entry in builtins {
        match builtin_grant(entry) {
            Ok((tenant, tools)) => grants = grants.with_builtins(&tenant, tools),
            Err(why) => problems.push(format!("builtins: {entry:?} {why}")),
        }
    }
    grants
}

/// One checked credential; `None` (and its problems added) when it is not usable.
fn credential(
    at: &str,
    entry: &CredentialConfig,
    data_dir: &Path,
    problems: &mut Vec<String>,
) -> Option<OperatorCredential> {
    let before = problems.len();
    if !is_valid_name(&entry.name) {
        problems.push(format!(
            "{at}.name: {:?} is not a name: 1 to 128 of a-z, 0-9, '-', '_' and '.', starting \
             with a letter or digit",
            entry.name
        ));
    }
    let source = match (&entry.env, &entry.file) {
        (Some(var), None) => {
            if var.is_empty() || var.contains('=') || var.contains('\0') {
                problems.push(format!(
                    "{at}.env: {var:?} is not an environment variable name"
                ));
            } else if var.to_ascii_uppercase().starts_with(ENV_PREFIX) {
                problems.push(format!(
                    "{at}.env: {var} is one of the node's own settings, never a credential"
                ));
            }
            CredentialSource::Env(var.clone())
        }
        (None, Some(file)) => {
            if inside(file, data_dir) {
                problems.push(format!(
                    "{at}.file: {} is inside data-dir, which holds the node's own keys: \
                     nothing in it may be sent to an upstream",
                    file.display()
                ));
            }
            CredentialSource::File(file.clone())
        }
        _ => {
            problems.push(format!("{at}: give exactly one of env and file"));
            CredentialSource::Env(String::new())
        }
    };
    if entry.tenants.is_empty() {
        problems.push(format!(
            "{at}.tenants: name the tenants that may use it (\"*\" for every tenant)"
        ));
    }
    for tenant in &entry.tenants {
        if tenant != EVERY_TENANT && !is_valid_name(tenant) {
            problems.push(format!("{at}.tenants: {tenant:?} is not a tenant name"));
        }
    }
    (problems.len() == before).then(|| OperatorCredential {
        source,
        tenants: entry.tenants.iter().cloned().collect(),
    })
}

/// `TENANT:TOOL` (or `TENANT:*`, every built-in tool) as the tenant and the tools it enables.
pub fn builtin_grant(entry: &str) -> Result<(String, BTreeSet<BuiltinTool>), String> {
    let tools = BuiltinTool::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ");
    let Some((tenant, tool)) = entry.split_once(':') else {
        return Err(format!("is not TENANT:TOOL (tools: {tools}, or * for all)"));
    };
    if !is_valid_name(tenant) {
        return Err(format!("names no tenant: {tenant:?} is not a tenant name"));
    }
    let enabled = match tool {
        "*" => BuiltinTool::ALL.into_iter().collect(),
        name => match BuiltinTool::parse(name) {
            Some(tool) => BTreeSet::from([tool]),
            None => return Err(format!("names no built-in tool (tools: {tools}, or *)")),
        },
    };
    Ok((tenant.to_owned(), enabled))
}

/// Whether `path` is `dir` or inside it: compared as written (made absolute, `.` and `..`
/// resolved) and, where both exist, with symbolic links followed.
pub fn inside(path: &Path, dir: &Path) -> bool {
    if dir.as_os_str().is_empty() {
        return false;
    }
    if lexical(path).starts_with(lexical(dir)) {
        return true;
    }
    let real = |p: &Path| std::fs::canonicalize(p).ok();
    match (real(path).or_else(|| real_parent(path)), real(dir)) {
        (Some(path), Some(dir)) => path.starts_with(dir),
        _ => false,
    }
}

/// A file that does not exist yet, by its directory's real path.
fn real_parent(path: &Path) -> Option<PathBuf> {
    let parent = std::fs::canonicalize(path.parent()?).ok()?;
    Some(parent.join(path.file_name()?))
}

/// `path` made absolute against the working directory, with `.` and `..` resolved as written.
fn lexical(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for part in absolute.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
