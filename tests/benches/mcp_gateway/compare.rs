//! Another MCP gateway put beside Gatehouse: started from a command line and a config template
//! with the listener's host and port and the upstream's URL filled in, called by the same client
//! in the same rounds. Its process is the one whose CPU time is counted: the command runs under
//! `sh -c "exec …"`, so the shell becomes the gateway.

use anyhow::{Context, bail};
use gatehouse_tests::mcp_wire::RawMcp;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What `--compare`, `--compare-config`, `--compare-path` and `--compare-tool` said.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    /// A shell command; `{config}`, `{host}`, `{port}` and `{upstream}` are filled in.
    pub command: String,
    /// A file whose `{{host}}`, `{{port}}` and `{{upstream}}` are filled in; its copy's path is
    /// the command's `{config}`.
    pub config: Option<PathBuf>,
    /// Where the gateway serves MCP.
    pub path: String,
    /// The upstream's `echo` tool as the gateway names it.
    pub tool: String,
}

impl Spec {
    /// `NAME=CMD`.
    pub fn parse(value: &str) -> anyhow::Result<Spec> {
        let Some((name, command)) = value.split_once('=') else {
            bail!("--compare takes NAME=CMD, as in agentgateway='agentgateway -f {{config}}'");
        };
        if name.is_empty() || command.trim().is_empty() {
            bail!("--compare needs a name and a command: NAME=CMD");
        }
        Ok(Spec {
            name: name.to_owned(),
            command: command.to_owned(),
            config: None,
            path: "/mcp".into(),
            tool: "echo".into(),
        })
    }
}

/// The other gateway, running; killed when dropped.
pub struct Other {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Other {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Other {
    /// Starts the gateway on a free loopback port in front of `upstream`, and waits until it
    /// lists the tool.
    pub fn start(spec: &Spec, upstream: &str) -> anyhow::Result<Other> {
        let dir = tempfile::tempdir()?;
        let host = "127.0.0.1";
        let port = free_port()?;
        let fill = |text: &str, open: &str, close: &str| {
            text.replace(&format!("{open}host{close}"), host)
                .replace(&format!("{open}port{close}"), &port.to_string())
                .replace(&format!("{open}upstream{close}"), upstream)
        };
        let config_path = dir.path().join("config");
        if let Some(template) = &spec.config {
            let text = std::fs::read_to_string(template)
                .with_context(|| format!("reading {}", template.display()))?;
            std::fs::write(&config_path, fill(&text, "{{", "}}"))?;
        }
        let command =
            fill(&spec.command, "{", "}").replace("{config}", &config_path.display().to_string());
        let log_path = dir.path().join("gateway.log");
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}: {command}", spec.name))?;
        let other = Other {
            child,
            url: format!("http://{host}:{port}{}", spec.path),
            _dir: dir,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime
            .block_on(other.wait_listed(&spec.tool, Duration::from_secs(30)))
            .with_context(|| {
                let said = std::fs::read_to_string(&log_path).unwrap_or_default();
                format!(
                    "{} ({command}) did not come up; it said:\n{said}",
                    spec.name
                )
            })?;
        Ok(other)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_listed(&self, tool: &str, timeout: Duration) -> anyhow::Result<()> {
        let client = RawMcp::new(&self.url, None);
        let deadline = Instant::now() + timeout;
        loop {
            let last = match client.list_tools().await {
                Ok(answer) => {
                    let listed = answer
                        .message
                        .pointer("/result/tools")
                        .and_then(|t| t.as_array())
                        .is_some_and(|tools| tools.iter().any(|t| t["name"] == tool));
                    if listed {
                        return Ok(());
                    }
                    format!("HTTP {}: {}", answer.status, answer.text)
                }
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() > deadline {
                bail!(
                    "{} did not list {tool} within {timeout:?}; last: {last}",
                    self.url
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A loopback port nobody holds now. The other gateway cannot tell which port it bound, so the
/// bench picks one; another process may take it first, and then the start fails and says so.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
