//! The environment layer: `GATEHOUSE_*` variables, each named after a setting, read into the
//! same raw shape as the file and the flags.

use super::problems::ConfigErrors;
use super::raw::RawServeConfig;
use gatehouse_cluster::ENV_PREFIX;

/// `GATEHOUSE_*` variables that are not settings of the file: the command-line client's address,
/// key (a joining node's key is `--token`'s) and CA, the file's own path (`--config`), and the
/// test tooling's Python environment.
pub const NOT_SERVER_SETTINGS: [&str; 5] = [
    "GATEHOUSE_ADDR",
    "GATEHOUSE_TOKEN",
    "GATEHOUSE_CA",
    "GATEHOUSE_CONFIG",
    "GATEHOUSE_VENV",
];

/// Settings whose value is a list: comma-separated in the environment.
const LIST_SETTINGS: [&str; 3] = ["mcp-allowed-origins", "mcp-allowed-hosts", "builtins"];

/// Settings made of tables, which only the file gives, and where they go.
const FILE_ONLY: [(&str, &str); 2] = [
    ("jwt", "JWT issuers are set in the file's [[jwt]] tables"),
    (
        "credential",
        "credentials are set in the file's [[credential]] tables, or in credentials-file",
    ),
];

/// What the environment gives a node: its settings, and the `GATEHOUSE_*` variables that name
/// none (a wrapper script's own, a typo), which the node warns about and leaves alone.
#[derive(Debug, Default)]
pub struct EnvSettings {
    pub raw: RawServeConfig,
    pub unknown: Vec<String>,
}

impl RawServeConfig {
    /// The settings `vars` (the process environment, in production) give: every `GATEHOUSE_*`
    /// variable but [`NOT_SERVER_SETTINGS`]. A variable whose value does not fit its setting is
    /// a problem, and all of them are reported at once; a variable that names no setting is
    /// only listed in `unknown`. JWT issuers and credentials come from the file only.
    pub fn from_env(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<EnvSettings, ConfigErrors> {
        let mut table = toml::Table::new();
        let mut problems = Vec::new();
        let mut unknown = Vec::new();
        let mut vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, _)| {
                name.starts_with(ENV_PREFIX) && !NOT_SERVER_SETTINGS.contains(&name.as_str())
            })
            .collect();
        vars.sort();
        for (name, value) in vars {
            let key = name[ENV_PREFIX.len()..]
                .to_ascii_lowercase()
                .replace('_', "-");
            if let Some((_, why)) = FILE_ONLY.iter().find(|(setting, _)| *setting == key) {
                problems.push(format!("{name}: {why}"));
                continue;
            }
            match env_value(&key, &value) {
                Ok(value) => {
                    table.insert(key, value);
                }
                Err(Misfit::NoSetting) => unknown.push(name),
                Err(Misfit::Value(why)) => problems.push(format!("{name}={value:?}: {why}")),
            }
        }
        if !problems.is_empty() {
            return Err(ConfigErrors(problems));
        }
        let raw = table
            .try_into()
            .map_err(|e: toml::de::Error| ConfigErrors(vec![format!("environment: {e}")]))?;
        Ok(EnvSettings { raw, unknown })
    }
}

/// Why a variable gives no setting.
enum Misfit {
    /// Its name is no setting's.
    NoSetting,
    /// Its value does not fit the setting it names.
    Value(String),
}

/// One variable's value as the setting `key` takes it: a list, a number or a flag where the
/// setting is one, else text.
fn env_value(key: &str, value: &str) -> Result<toml::Value, Misfit> {
    let candidates = if LIST_SETTINGS.contains(&key) {
        let items = value
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| toml::Value::String(v.to_owned()))
            .collect();
        vec![toml::Value::Array(items)]
    } else {
        let mut candidates = Vec::new();
        if let Ok(n) = value.trim().parse::<i64>() {
            candidates.push(toml::Value::Integer(n));
        }
        if let Ok(b) = value.trim().parse::<bool>() {
            candidates.push(toml::Value::Boolean(b));
        }
        candidates.push(toml::Value::String(value.to_owned()));
        candidates
    };
    let mut last = String::new();
    for candidate in candidates {
        let mut one = toml::Table::new();
        one.insert(key.to_owned(), candidate.clone());
        match one.try_into::<RawServeConfig>() {
            Ok(_) => return Ok(candidate),
            // The raw config denies unknown fields: that error names a key that is no setting.
            Err(e) if e.message().starts_with("unknown field") => return Err(Misfit::NoSetting),
            Err(e) => last = e.message().to_owned(),
        }
    }
    Err(Misfit::Value(last))
}
