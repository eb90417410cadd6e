//! Every gRPC call is authenticated by API key, and each service checks the caller's role in the
//! tenant it touches. Another tenant's resources do not exist for a caller: NOT_FOUND, never a
//! hint that they are there.

use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::cluster_service_client::ClusterServiceClient;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_testkit::wire::{bearer, principal, resource};
use gatehouse_tests::{Admin, TestCluster};
use tonic::Code;
use tonic::transport::Channel;

const ACME_ADMIN: &str = "gate_acme-admin-key-0000000000000000";
const ACME_AGENT: &str = "gate_acme-agent-key-0000000000000000";

fn skill(name: &str, tenant: &str) -> pb::Resource {
    resource(
        "Skill",
        name,
        Some(tenant),
        serde_json::json!({"scope": {"type": "tenant", "tenant": tenant}, "instructions": "Be brief."}),
    )
}

struct Caller {
    channel: Channel,
    key: &'static str,
}

impl Caller {
    fn request<T>(&self, message: T) -> tonic::Request<T> {
        bearer(message, self.key)
    }

    async fn apply(&self, resources: Vec<pb::Resource>) -> Result<(), tonic::Status> {
        let mut c = RegistryServiceClient::new(self.channel.clone());
        c.apply(self.request(pb::ApplyRequest { resources }))
            .await
            .map(|_| ())
    }

    async fn get(
        &self,
        kind: &str,
        tenant: Option<&str>,
        name: &str,
    ) -> Result<pb::Resource, tonic::Status> {
        let mut c = RegistryServiceClient::new(self.channel.clone());
        let key = pb::ResourceKey {
            kind: kind.into(),
            tenant: tenant.map(str::to_owned),
            name: name.into(),
        };
        let r = c
            .get(self.request(pb::GetResourceRequest {
                key: Some(key),
                linearizable: false,
            }))
            .await?;
        Ok(r.into_inner().resource.unwrap_or_default())
    }

    async fn list(&self, kind: &str) -> Result<Vec<String>, tonic::Status> {
        let mut c = RegistryServiceClient::new(self.channel.clone());
        let r = c
            .list(self.request(pb::ListResourcesRequest {
                kind: kind.into(),
                tenant: None,
                page_size: 0,
                page_token: String::new(),
                linearizable: false,
            }))
            .await?;
        Ok(r.into_inner()
            .resources
            .into_iter()
            .map(|r| r.name)
            .collect())
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, tonic::Status>) -> Code {
    r.expect_err("the call is refused").code()
}

#[test]
fn callers_reach_only_what_their_roles_allow() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1])?;
    let admin: Admin = cluster.admin(1);
    cluster.block_on(admin.apply(vec![
        resource("Tenant", "acme", None, serde_json::json!({})),
        resource("Tenant", "globex", None, serde_json::json!({})),
        principal(
            "acme-admin",
            ACME_ADMIN,
            serde_json::json!({"acme": ["admin"]}),
            None,
        ),
        principal(
            "acme-agent",
            ACME_AGENT,
            serde_json::json!({"acme": ["agent"]}),
            None,
        ),
        skill("globex-secret-plan", "globex"),
    ]))?;
    let channel =
        cluster.block_on(Channel::from_shared(format!("http://{}", cluster.addr(1)))?.connect())?;
    let acme_admin = Caller {
        channel: channel.clone(),
        key: ACME_ADMIN,
    };
    let acme_agent = Caller {
        channel: channel.clone(),
        key: ACME_AGENT,
    };
    let stranger = Caller {
        channel: channel.clone(),
        key: "gate_unknown",
    };

    cluster.block_on(async {
        // A tenant admin manages its own tenant.
        acme_admin
            .apply(vec![skill("acme-tone", "acme")])
            .await
            .expect("own tenant");
        assert_eq!(
            acme_admin
                .get("Skill", Some("acme"), "acme-tone")
                .await
                .unwrap()
                .name,
            "acme-tone"
        );

        // Another tenant's resources do not exist for it, to read or to write.
        assert_eq!(
            code(acme_admin.apply(vec![skill("intrusion", "globex")]).await),
            Code::NotFound
        );
        assert_eq!(
            code(
                acme_admin
                    .get("Skill", Some("globex"), "globex-secret-plan")
                    .await
            ),
            Code::NotFound
        );
        assert_eq!(
            code(acme_admin.get("Tenant", None, "globex").await),
            Code::NotFound
        );
        let skills = acme_admin.list("Skill").await.unwrap();
        assert_eq!(
            skills,
            ["acme-tone"],
            "a list shows only what the caller may see"
        );

        // Cluster-wide resources and membership are for cluster admins.
        assert_eq!(
            code(
                acme_admin
                    .apply(vec![resource(
                        "Tenant",
                        "acme2",
                        None,
                        serde_json::json!({})
                    )])
                    .await
            ),
            Code::PermissionDenied
        );
        let mut clusters = ClusterServiceClient::new(channel.clone());
        let status = clusters
            .status(acme_admin.request(pb::ClusterStatusRequest {}))
            .await;
        assert_eq!(code(status), Code::PermissionDenied);

        // An agent may not change its tenant's registry.
        assert_eq!(
            code(acme_agent.apply(vec![skill("agent-written", "acme")]).await),
            Code::PermissionDenied
        );

        // No key, no entry.
        assert_eq!(code(stranger.list("Skill").await), Code::Unauthenticated);
        let mut raw = RegistryServiceClient::new(channel.clone());
        let anonymous = raw
            .list(pb::ListResourcesRequest {
                kind: "Skill".into(),
                tenant: None,
                page_size: 0,
                page_token: String::new(),
                linearizable: false,
            })
            .await;
        assert_eq!(code(anonymous), Code::Unauthenticated);
    });
    Ok(())
}

#[test]
fn lists_page_through_every_resource_once() -> anyhow::Result<()> {
    let cluster = TestCluster::new(&[1])?;
    let admin = cluster.admin(1);
    let tenants: Vec<pb::Resource> = (0..250)
        .map(|i| resource("Tenant", &format!("t{i:03}"), None, serde_json::json!({})))
        .collect();
    cluster.block_on(admin.apply(tenants))?;
    let channel =
        cluster.block_on(Channel::from_shared(format!("http://{}", cluster.addr(1)))?.connect())?;
    let caller = Caller { channel, key: "" };
    let key = cluster.admin_key().to_owned();
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    cluster.block_on(async {
        let mut client = RegistryServiceClient::new(caller.channel.clone());
        loop {
            let mut request = tonic::Request::new(pb::ListResourcesRequest {
                kind: "Tenant".into(),
                tenant: None,
                page_size: 100,
                page_token: token.clone(),
                linearizable: false,
            });
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {key}").parse().unwrap());
            let page = client.list(request).await.unwrap().into_inner();
            pages += 1;
            seen.extend(page.resources.into_iter().map(|r| r.name));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    });
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..250).map(|i| format!("t{i:03}")).collect();
    assert_eq!(seen, expected);
    Ok(())
}
