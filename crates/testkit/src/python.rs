//! Drives the official Python SDKs from tests: `scripts/python-env` makes (once per machine) a
//! virtual environment with the pinned `mcp` and `a2a-sdk` packages; `tests/python/mcp_client.py`
//! and `tests/python/a2a_client.py` run one command against an endpoint and print what they saw
//! as one JSON object.
//!
//! The environment is prepared once per test process; the script holds a lock file while it
//! checks or makes the environment, so parallel test processes do not race. Without `python3`
//! the tests that need it skip, saying so.

use anyhow::{Context, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script() -> PathBuf {
    repo_root().join("tests/python/mcp_client.py")
}

/// The venv's python, or why there is none: `Err` carries the message a skipping test prints.
static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn prepare() -> Result<PathBuf, String> {
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let found = Command::new(&python)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        return Err(format!(
            "no {} on PATH: the Python interoperability tests are skipped",
            python.to_string_lossy()
        ));
    }
    let root = repo_root();
    let output = Command::new(root.join("scripts/python-env"))
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running scripts/python-env: {e}"))?;
    if !output.status.success() {
        // python3 is there, so a failure to set up is a failure, not a skip.
        panic!(
            "scripts/python-env failed ({}); see its message above",
            output.status
        );
    }
    let path = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok(PathBuf::from(path))
}

/// The environment's python; `None` (after printing why) if the tests must skip.
pub fn venv_python() -> Option<PathBuf> {
    match VENV.get_or_init(prepare) {
        Ok(path) => Some(path.clone()),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// One run of `mcp_client.py` against `url` with `key`.
#[derive(Debug, Clone)]
pub struct PythonClient {
    python: PathBuf,
    url: String,
    key: Option<String>,
    extra: Vec<String>,
}

/// A run in the background: the test acts (approves, rejects) while the client polls.
#[derive(Debug)]
pub struct Running {
    child: Child,
}

impl Running {
    /// Waits for the client to finish and reads what it printed.
    pub fn finish(self) -> anyhow::Result<Value> {
        parse(self.child.wait_with_output()?)
    }
}

impl PythonClient {
    /// A client of `url`; `None` (the test skips) if there is no Python.
    pub fn new(url: &str, key: Option<&str>) -> Option<PythonClient> {
        Some(PythonClient {
            python: venv_python()?,
            url: url.to_owned(),
            key: key.map(str::to_owned),
            extra: Vec::new(),
        })
    }

    /// The SDK's protocol negotiation: `auto` (its default), `legacy`, or a version.
    pub fn mode(mut self, mode: &str) -> Self {
        self.extra.extend(["--mode".into(), mode.into()]);
        self
    }

    /// How long `call-and-poll` polls before giving up, in seconds.
    pub fn deadline(mut self, seconds: f64) -> Self {
        self.extra
            .extend(["--deadline".into(), seconds.to_string()]);
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.python);
        command.arg(script()).arg("--url").arg(&self.url);
        if let Some(key) = &self.key {
            command.arg("--key").arg(key);
        }
        command.args(&self.extra).args(args);
        command
    }

    /// Runs a command to its end; the JSON object it printed.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Value> {
        run_to_end(self.command(args))
    }

    /// Starts a command and returns at once.
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<Running> {
        start(self.command(args))
    }

    pub fn list_tools(&self) -> anyhow::Result<Value> {
        self.run(&["list-tools"])
    }

    pub fn call(&self, tool: &str, arguments: &Value) -> anyhow::Result<Value> {
        self.run(&["call", tool, &arguments.to_string()])
    }

    pub fn call_and_poll(&self, tool: &str, arguments: &Value) -> anyhow::Result<Running> {
        self.spawn(&["call-and-poll", tool, &arguments.to_string()])
    }
}

fn run_to_end(mut command: Command) -> anyhow::Result<Value> {
    let output = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    parse(output)
}

fn start(mut command: Command) -> anyhow::Result<Running> {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    Ok(Running { child })
}

/// The object printed on stdout; exit status 1 still printed one (with `exception`).
fn parse(output: Output) -> anyhow::Result<Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let Some(line) = stdout.lines().rev().find(|l| l.starts_with('{')) else {
        bail!(
            "the Python client printed no JSON ({}); stdout: {stdout}; stderr: {stderr}",
            output.status
        );
    };
    let value: Value = serde_json::from_str(line)
        .with_context(|| format!("the Python client printed {line}; stderr: {stderr}"))?;
    if !output.status.success() && value.get("exception").is_none() {
        bail!("the Python client failed ({}): {stderr}", output.status);
    }
    Ok(value)
}

/// The official Python A2A SDK (`a2a-sdk`) driven through `tests/python/a2a_client.py`: it
/// fetches the Agent Card from `card_url`, picks the card's interface of `transport` (`jsonrpc`
/// or `grpc`), and runs one command, printing what it saw as one JSON object.
#[derive(Debug, Clone)]
pub struct A2aClient {
    python: PathBuf,
    card_url: String,
    transport: String,
    key: Option<String>,
    extra: Vec<String>,
}

impl A2aClient {
    /// A client of the agent whose card is under `card_url`; `None` (the test skips) if there
    /// is no Python.
    pub fn new(card_url: &str, transport: &str, key: Option<&str>) -> Option<A2aClient> {
        Some(A2aClient {
            python: venv_python()?,
            card_url: card_url.to_owned(),
            transport: transport.to_owned(),
            key: key.map(str::to_owned),
            extra: Vec::new(),
        })
    }

    /// The same client with another credential.
    pub fn with_key(&self, key: &str) -> A2aClient {
        A2aClient {
            key: Some(key.to_owned()),
            ..self.clone()
        }
    }

    /// How long waiting commands (`wait`, `stream`, `subscribe`) may take, in seconds.
    pub fn deadline(mut self, seconds: f64) -> Self {
        self.extra
            .extend(["--deadline".into(), seconds.to_string()]);
        self
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.python);
        command
            .arg(repo_root().join("tests/python/a2a_client.py"))
            .args(["--card-url", &self.card_url, "--transport", &self.transport]);
        if let Some(key) = &self.key {
            command.arg("--key").arg(key);
        }
        command.args(&self.extra).args(args);
        command
    }

    /// Runs a command to its end; the JSON object it printed.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<Value> {
        run_to_end(self.command(args))
    }

    /// Starts a command and returns at once.
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<Running> {
        start(self.command(args))
    }

    /// SendMessage with one data part naming `tool` and its arguments.
    pub fn send(&self, tool: &str, arguments: &Value) -> anyhow::Result<Value> {
        self.run(&["send", tool, &arguments.to_string()])
    }
}
