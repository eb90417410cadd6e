//! A test's admin client: the same gRPC services an operator's CLI uses.

use anyhow::Context;
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::resource;
use std::net::SocketAddr;
use tonic::transport::Channel;

#[derive(Debug, Clone)]
pub struct Admin {
    addr: SocketAddr,
    key: String,
}

impl Admin {
    pub fn new(addr: SocketAddr, key: String) -> Self {
        Admin { addr, key }
    }

    fn request<T>(&self, message: T) -> anyhow::Result<tonic::Request<T>> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {}", self.key).parse()?);
        Ok(request)
    }

    async fn channel(&self) -> anyhow::Result<Channel> {
        Channel::from_shared(format!("http://{}", self.addr))?
            .connect()
            .await
            .with_context(|| format!("connecting to {}", self.addr))
    }

    /// Puts a tenant named `name`; the log index it committed at.
    pub async fn put_tenant(&self, name: &str) -> anyhow::Result<u64> {
        self.apply(vec![tenant(name)]).await
    }

    pub async fn apply(&self, resources: Vec<pb::Resource>) -> anyhow::Result<u64> {
        let mut client = RegistryServiceClient::new(self.channel().await?)
            .max_encoding_message_size(64 << 20)
            .max_decoding_message_size(64 << 20);
        let answer = client
            .apply(self.request(pb::ApplyRequest { resources })?)
            .await?;
        Ok(answer.into_inner().log_index)
    }

    pub async fn get_tenant(
        &self,
        name: &str,
        linearizable: bool,
    ) -> anyhow::Result<Option<pb::Resource>> {
        let mut client = RegistryServiceClient::new(self.channel().await?);
        let key = pb::ResourceKey {
            kind: "Tenant".into(),
            tenant: None,
            name: name.into(),
        };
        match client
            .get(self.request(pb::GetResourceRequest {
                key: Some(key),
                linearizable,
            })?)
            .await
        {
            Ok(r) => Ok(r.into_inner().resource),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(s.into()),
        }
    }

    pub async fn status(&self) -> anyhow::Result<pb::ClusterStatusResponse> {
        let mut client = ClusterServiceClient::new(self.channel().await?);
        Ok(client
            .status(self.request(pb::ClusterStatusRequest {})?)
            .await?
            .into_inner())
    }

    pub async fn promote(&self, node_id: u64) -> anyhow::Result<()> {
        let mut client = ClusterServiceClient::new(self.channel().await?);
        client
            .promote(self.request(pb::PromoteRequest { node_id })?)
            .await?;
        Ok(())
    }

    pub async fn remove(&self, node_id: u64) -> anyhow::Result<()> {
        let mut client = ClusterServiceClient::new(self.channel().await?);
        client
            .remove(self.request(pb::RemoveRequest { node_id })?)
            .await?;
        Ok(())
    }

    pub async fn add_learner(&self, node_id: u64, grpc_addr: String) -> Result<(), tonic::Status> {
        let mut client = ClusterServiceClient::new(
            self.channel()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?,
        );
        let request = self
            .request(pb::AddLearnerRequest { node_id, grpc_addr })
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        client.add_learner(request).await?;
        Ok(())
    }
}

/// A Tenant resource as the wire carries it.
pub fn tenant(name: &str) -> pb::Resource {
    resource("Tenant", name, None, serde_json::json!({}))
}
