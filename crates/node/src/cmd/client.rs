//! The command line's connection to a node: one channel, every request with the bearer key.

use crate::cli::Remote;
use anyhow::Context;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const MAX_MESSAGE: usize = 64 * 1024 * 1024;

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
    let channel = Channel::from_shared(format!("http://{}", remote.addr))?
        .connect()
        .await
        .with_context(|| format!("connecting to {}", remote.addr))?;
    Ok((channel, bearer))
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

/// A status as the operator should read it.
pub fn explain(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", status.code(), status.message())
}
