//! The command line's connection to a node: one channel, every request with the bearer key.

use super::{Output, OutputArgs};
use crate::exit::Refusal;
use anyhow::Context;
use clap::Args;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use std::path::{Path, PathBuf};
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The client flags given before the command (`gatehouse --addr HOST:PORT list tools`), as
/// scripts written for earlier versions give them. They mean the same as after the command;
/// `serve` and `dev` refuse them (but for `--token` before `serve`, its join key), and offline
/// commands do not use them.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Client options (also accepted after the command)")]
pub struct Before {
    /// Any node's gRPC address (see the command's own --addr).
    #[arg(long, value_name = "HOST:PORT")]
    pub addr: Option<String>,
    /// PEM file of the CA that signed the node's certificate.
    #[arg(long, value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// An API key.
    #[arg(long, value_name = "KEY")]
    pub token: Option<String>,
    /// Output format for commands that print data.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

/// The flags of a command that talks to a node. Given before the command ([`Before`]) they
/// mean the same.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Connection")]
pub struct RemoteArgs {
    /// Any node's gRPC address: `host:port`, or `https://host:port` for a node that serves TLS
    /// (with --ca). [default: 127.0.0.1:7401]
    #[arg(long, global = true, env = "GATEHOUSE_ADDR", value_name = "HOST:PORT")]
    pub addr: Option<String>,
    /// PEM file of the CA that signed the node's certificate: the connection is TLS, verified
    /// against it.
    #[arg(long, global = true, env = "GATEHOUSE_CA", value_name = "PEM")]
    pub ca: Option<PathBuf>,
    /// An API key (for a new cluster: the one in DATA_DIR/admin.key).
    #[arg(
        long,
        global = true,
        env = "GATEHOUSE_TOKEN",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub token: Option<String>,
}

/// Where a command that talks to the cluster goes, with which key, and how it prints.
#[derive(Debug, Clone)]
pub struct Remote {
    pub addr: String,
    pub ca: Option<PathBuf>,
    pub token: Option<String>,
    pub output: Output,
}

/// The address a client command goes to when none is given: `gatehouse dev`'s.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7401";

impl Remote {
    /// The flags after the command, with those before it where given (they were typed; the
    /// ones after may come from the environment).
    pub fn new(args: RemoteArgs, out: OutputArgs, before: &Before) -> Remote {
        Remote {
            addr: before
                .addr
                .clone()
                .or(args.addr)
                .unwrap_or_else(|| DEFAULT_ADDR.to_owned()),
            ca: before.ca.clone().or(args.ca),
            token: before.token.clone().or(args.token),
            output: before.output.or(out.output).unwrap_or_default(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

pub type Authed = InterceptedService<Channel, Bearer>;

pub async fn connect(remote: &Remote) -> anyhow::Result<(Channel, Bearer)> {
    let token = remote
        .token
        .as_deref()
        .context("no API key: pass --token or set GATEHOUSE_TOKEN (a new cluster's is in DATA_DIR/admin.key)")?;
    let bearer = Bearer(
        format!("Bearer {}", token.trim())
            .parse()
            .context("the API key has characters a header cannot carry")?,
    );
    let channel = endpoint(&remote.addr, remote.ca.as_deref())?
        .connect()
        .await
        .with_context(|| format!("connecting to {}", remote.addr))?;
    Ok((channel, bearer))
}

/// How the CLI reaches `addr`: TLS verified against `ca` when `addr` says `https://` or a CA is
/// given, plain otherwise.
fn endpoint(addr: &str, ca: Option<&Path>) -> anyhow::Result<Endpoint> {
    let uri = target(addr, ca.is_some())?;
    let endpoint = Endpoint::from_shared(uri.clone()).with_context(|| format!("{addr:?}"))?;
    let Some(ca) = ca else {
        return Ok(endpoint);
    };
    let tls = ClientTlsConfig::new().ca_certificate(gatehouse_cluster::tls::read_ca(ca)?);
    endpoint
        .tls_config(tls)
        .with_context(|| format!("TLS to {uri}"))
}

/// The URI for `addr`: `https://` when TLS (an `https://` address, or a CA given), else
/// `http://`. An `https://` address without a CA, or a CA with an `http://` address, is a
/// mistake said as such.
fn target(addr: &str, with_ca: bool) -> anyhow::Result<String> {
    if let Some(host) = addr.strip_prefix("https://") {
        anyhow::ensure!(
            with_ca,
            "--addr {addr}: TLS needs --ca FILE (or GATEHOUSE_CA), the CA that signed the \
             node's certificate"
        );
        return Ok(format!("https://{host}"));
    }
    if let Some(host) = addr.strip_prefix("http://") {
        anyhow::ensure!(
            !with_ca,
            "--addr {addr} is plain http://, but --ca asks for TLS: use https://{host}"
        );
        return Ok(addr.to_owned());
    }
    Ok(if with_ca {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    })
}

pub async fn registry(remote: &Remote) -> anyhow::Result<RegistryServiceClient<Authed>> {
    let (channel, bearer) = connect(remote).await?;
    Ok(RegistryServiceClient::with_interceptor(channel, bearer)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE))
}

pub async fn cluster(remote: &Remote) -> anyhow::Result<ClusterServiceClient<Authed>> {
    let (channel, bearer) = connect(remote).await?;
    Ok(ClusterServiceClient::with_interceptor(channel, bearer))
}

/// A node's refusal, kept with its code for the exit code.
pub fn explain(status: tonic::Status) -> anyhow::Error {
    Refusal::from(status).into()
}

#[cfg(test)]
mod tests {
    use super::target;

    #[test]
    fn an_address_with_a_ca_is_tls_and_mixed_signals_are_refused() {
        assert_eq!(
            target("10.0.0.1:7401", false).unwrap(),
            "http://10.0.0.1:7401"
        );
        assert_eq!(
            target("10.0.0.1:7401", true).unwrap(),
            "https://10.0.0.1:7401"
        );
        assert_eq!(target("https://gh:7401", true).unwrap(), "https://gh:7401");
        assert_eq!(target("http://gh:7401", false).unwrap(), "http://gh:7401");
        let no_ca = target("https://gh:7401", false).unwrap_err().to_string();
        assert!(no_ca.contains("--ca"), "{no_ca}");
        let plain = target("http://gh:7401", true).unwrap_err().to_string();
        assert!(plain.contains("https://gh:7401"), "{plain}");
    }
}
