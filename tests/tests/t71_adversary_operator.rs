//! The adversary's tests for what belongs to the operator: upstream credentials, built-in tools,
//! what an upstream's URL may say, and `/metrics`. Each test is an attack by a tenant's admin or
//! agent against a real node (real sled, real gRPC, a real HTTP listener of the attacker's),
//! and checks that it fails with a typed error and changes nothing: no secret reaches the
//! attacker's listener, no ledger moves, the registry is as it was.
//!
//! The operator's grants on every node: the credential `acme-api` (a file) for acme,
//! `globex-stripe` (a file) for globex, `search` (a file) for acme only though a shared upstream
//! may name it; the built-in `echo` and `transfer` for demo, `transfer` for lab. acme has no
//! built-in tool.

use gatehouse_cluster::grants::BuiltinTool;
use gatehouse_cluster::grants::{CredentialSource, Grants};
use gatehouse_gateway::executor::builtin::{Ledger, ledger_path, tenant_dir};
use gatehouse_gateway::metrics::{MetricsSettings, ScrapeToken};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::registry_service_client::RegistryServiceClient;
use gatehouse_registry::{Command, Proposal, Resource};
use gatehouse_testkit::wire::{principal, resource};
use gatehouse_tests::flow::call_tool;
use gatehouse_tests::{Admin, McpUpstream, NodeOptions, RecordingUpstream, TestCluster};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::Code;

const ACME_ADMIN: &str = "gate_t71-acme-admin-000000000000000000";
const ACME_BOT: &str = "gate_t71-acme-bot-00000000000000000000";
const GLOBEX_ADMIN: &str = "gate_t71-globex-admin-0000000000000000";
const GLOBEX_BOT: &str = "gate_t71-globex-bot-000000000000000000";
const DEMO_BOT: &str = "gate_t71-demo-bot-00000000000000000000";
const LAB_BOT: &str = "gate_t71-lab-bot-000000000000000000000";

/// What the operator's credential files hold: none of it may reach a listener it was not
/// granted for.
const ACME_SECRET: &str = "acme-api-secret-0001";
const GLOBEX_SECRET: &str = "globex-stripe-secret-0002";
const SEARCH_SECRET: &str = "search-secret-0003";

const METRICS_TOKEN: &str = "scrape-token-t71-000000";
const SETTLE: Duration = Duration::from_secs(20);

/// A one-node cluster with the operator's grants, its tenants and principals, and the directory
/// holding the credential files (kept as long as the cluster is used).
struct Fixture {
    cluster: TestCluster,
    _secrets: tempfile::TempDir,
}

impl Fixture {
    fn start() -> anyhow::Result<Fixture> {
        Self::with_metrics(MetricsSettings::default())
    }

    /// The operator's grants as the module says, and `metrics`.
    fn with_metrics(metrics: MetricsSettings) -> anyhow::Result<Fixture> {
        let secrets = tempfile::tempdir()?;
        let file = |name: &str, secret: &str| -> anyhow::Result<CredentialSource> {
            let path = secrets.path().join(name);
            std::fs::write(&path, format!("{secret}\n"))?;
            Ok(CredentialSource::File(path))
        };
        let grants = Grants::default()
            .with_credential("acme-api", file("acme-api.key", ACME_SECRET)?, &["acme"])
            .with_credential(
                "globex-stripe",
                file("globex-stripe.key", GLOBEX_SECRET)?,
                &["globex"],
            )
            .with_credential("search", file("search.key", SEARCH_SECRET)?, &["acme"])
            .with_builtins("demo", [BuiltinTool::Echo, BuiltinTool::Transfer])
            .with_builtins("lab", [BuiltinTool::Transfer]);
        Self::with_options(
            NodeOptions {
                grants,
                metrics,
                ..NodeOptions::default()
            },
            secrets,
        )
    }

    /// A node with `options`, the tenants and their principals.
    fn with_options(options: NodeOptions, secrets: tempfile::TempDir) -> anyhow::Result<Fixture> {
        let cluster = TestCluster::with_options(&[1], options)?;
        let index = cluster.block_on(cluster.admin(1).apply(vec![
            resource("Tenant", "acme", None, json!({})),
            resource("Tenant", "globex", None, json!({})),
            resource("Tenant", "demo", None, json!({})),
            resource("Tenant", "lab", None, json!({})),
            principal("acme-admin", ACME_ADMIN, json!({"acme": ["admin"]}), None),
            principal("acme-bot", ACME_BOT, json!({"acme": ["agent"]}), None),
            principal(
                "globex-admin",
                GLOBEX_ADMIN,
                json!({"globex": ["admin"]}),
                None,
            ),
            principal("globex-bot", GLOBEX_BOT, json!({"globex": ["agent"]}), None),
            principal("demo-bot", DEMO_BOT, json!({"demo": ["agent"]}), None),
            principal("lab-bot", LAB_BOT, json!({"lab": ["agent"]}), None),
        ]))?;
        cluster.wait_for_applied(1, index, SETTLE)?;
        cluster.wait_all_placed(SETTLE)?;
        Ok(Fixture {
            cluster,
            _secrets: secrets,
        })
    }

    fn data_dir(&self) -> PathBuf {
        self.cluster.data_dir(1)
    }

    /// Applies as the principal of `key`: the log index, or the refusal's status.
    fn apply_as(&self, key: &str, resources: Vec<pb::Resource>) -> Result<u64, tonic::Status> {
        let admin = Admin::new(self.cluster.addr(1), key.to_owned());
        let applied = self.cluster.block_on(admin.apply(resources));
        let index = applied.map_err(|e| match e.downcast::<tonic::Status>() {
            Ok(status) => status,
            Err(other) => tonic::Status::unknown(other.to_string()),
        })?;
        self.cluster
            .wait_for_applied(1, index, SETTLE)
            .map_err(|e| tonic::Status::deadline_exceeded(e.to_string()))?;
        Ok(index)
    }

    /// Applies as the principal of `key` and expects an INVALID_ARGUMENT naming `field`, with
    /// nothing written: the registry's digest and applied index stand still.
    fn refused(&self, key: &str, resources: Vec<pb::Resource>, field: &str) -> tonic::Status {
        // The leader writes placements of its own accord: measure a registry at rest.
        self.cluster
            .wait_converged(self.cluster.applied(1), SETTLE)
            .expect("the registry settles");
        let (digest, applied) = (self.cluster.digest(1), self.cluster.applied(1));
        let status = self
            .apply_as(key, resources)
            .expect_err("the apply is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
        assert_eq!(self.cluster.applied(1), applied, "nothing was proposed");
        assert_eq!(self.cluster.digest(1), digest, "the registry is unchanged");
        status
    }

    /// What an earlier version's registry could hold, written past today's checks: the log
    /// of a cluster that accepted it before this version.
    fn written_before(&self, resources: Vec<Resource>) -> anyhow::Result<()> {
        let proposal = Proposal {
            request_id: uuid::Uuid::new_v4(),
            at: 0,
            command: Command::Put { resources },
        };
        let node = self.cluster.node(1);
        let (applied, index) = self.cluster.block_on(node.cluster.write(proposal))?;
        applied?;
        self.cluster.wait_for_applied(1, index, SETTLE)?;
        Ok(())
    }

    /// `tool` in `tenant` as the agent of `key`, through the gateway.
    fn call(&self, key: &str, tenant: &str, tool: &str, args: Value) -> pb::CallEnvelope {
        call_tool(&self.cluster, 1, key, tenant, tool, &args).expect("the call is answered")
    }
}

/// A read-only Tool `name` in `tenant`.
fn read_only_tool(name: &str, tenant: &str) -> pb::Resource {
    resource(
        "Tool",
        name,
        Some(tenant),
        json!({"approvalMode": "read_only", "inputSchema": {"type": "object"}}),
    )
}

/// An http Upstream `name` of `tenant` at `url`, with more of its spec in `extra`.
fn http_upstream(name: &str, tenant: Option<&str>, url: &str, extra: Value) -> pb::Resource {
    let mut spec = json!({"type": "http", "url": url, "timeoutMs": 5000});
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    resource("Upstream", name, tenant, spec)
}

/// The same as a registry resource, for [`Fixture::written_before`].
fn stored(resource: &pb::Resource) -> Resource {
    serde_json::from_value(json!({
        "kind": resource.kind,
        "apiVersion": "gatehouse.dev/v1",
        "metadata": {"name": resource.name, "tenant": resource.tenant},
        "spec": serde_json::from_str::<Value>(&resource.spec_json).expect("a spec is JSON"),
    }))
    .expect("a resource as an earlier version stored it")
}

/// Every `Authorization` the listener was sent.
fn bearers(upstream: &RecordingUpstream) -> Vec<String> {
    upstream
        .invocations()
        .into_iter()
        .filter_map(|i| i.authorization)
        .collect()
}

fn failed_saying(envelope: &pb::CallEnvelope, why: &str) {
    assert_eq!(envelope.state, pb::CallState::Failed as i32, "{envelope:?}");
    let error = envelope.error.as_deref().unwrap_or_default();
    assert!(error.contains(why), "{error}");
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn a_tenant_admin_cannot_make_an_upstream_read_the_cluster_key() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    let listener = RecordingUpstream::start();
    let data = fixture.data_dir();
    for stolen in ["cluster.key", "admin.key"] {
        let path = path_text(&data.join(stolen));
        // Finding 1 as it was done: the node's file named by path.
        let status = fixture.refused(
            ACME_ADMIN,
            vec![
                http_upstream(
                    "leak",
                    Some("acme"),
                    &listener.url(),
                    json!({"credential": {"file": path}}),
                ),
                read_only_tool("leak.read", "acme"),
            ],
            "spec.credential",
        );
        assert!(
            status.message().contains("`credential: NAME`"),
            "{status:?}"
        );
        // The path as a name, and a name the node does not know: refused alike.
        for credential in [path.as_str(), "cluster-key"] {
            fixture.refused(
                ACME_ADMIN,
                vec![http_upstream(
                    "leak",
                    Some("acme"),
                    &listener.url(),
                    json!({"credential": credential}),
                )],
                "spec.credential",
            );
        }
    }
    // The same through the variables of the node's environment.
    fixture.refused(
        ACME_ADMIN,
        vec![http_upstream(
            "leak",
            Some("acme"),
            &listener.url(),
            json!({"credential": {"env": "GATEHOUSE_TOKEN"}}),
        )],
        "spec.credential",
    );
    let envelope = call_tool(
        &fixture.cluster,
        1,
        ACME_BOT,
        "acme",
        "leak.read",
        &json!({}),
    );
    let status = envelope.expect_err("there is no such tool");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        listener.invocations().is_empty(),
        "nothing reached the listener"
    );
    Ok(())
}

#[test]
fn a_tenant_admin_cannot_name_a_credential_granted_to_another_tenant() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    let listener = RecordingUpstream::start();
    let status = fixture.refused(
        ACME_ADMIN,
        vec![
            http_upstream(
                "pay",
                Some("acme"),
                &listener.url(),
                json!({"credential": "globex-stripe"}),
            ),
            read_only_tool("pay.charge", "acme"),
        ],
        "spec.credential",
    );
    // Worded as for a credential that does not exist: no oracle for other tenants' names.
    assert!(
        status
            .message()
            .contains("is not a credential this node grants to tenant acme"),
        "{status:?}"
    );
    assert!(listener.invocations().is_empty());

    // What the grant is for: globex's own upstream is called with globex's secret, and acme's
    // with acme's.
    fixture.apply_as(
        GLOBEX_ADMIN,
        vec![
            http_upstream(
                "pay",
                Some("globex"),
                &listener.url(),
                json!({"credential": "globex-stripe"}),
            ),
            read_only_tool("pay.charge", "globex"),
        ],
    )?;
    fixture.apply_as(
        ACME_ADMIN,
        vec![
            http_upstream(
                "api",
                Some("acme"),
                &listener.url(),
                json!({"credential": "acme-api"}),
            ),
            read_only_tool("api.get", "acme"),
        ],
    )?;
    let paid = fixture.call(GLOBEX_BOT, "globex", "pay.charge", json!({}));
    assert_eq!(paid.state, pb::CallState::Succeeded as i32, "{paid:?}");
    let got = fixture.call(ACME_BOT, "acme", "api.get", json!({}));
    assert_eq!(got.state, pb::CallState::Succeeded as i32, "{got:?}");
    assert_eq!(
        bearers(&listener),
        [
            format!("Bearer {GLOBEX_SECRET}"),
            format!("Bearer {ACME_SECRET}")
        ]
    );
    Ok(())
}

#[test]
fn an_old_style_credential_is_refused_and_never_read() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    let listener = RecordingUpstream::start();
    let key = path_text(&fixture.data_dir().join("cluster.key"));
    let upstream = http_upstream(
        "legacy",
        Some("acme"),
        &listener.url(),
        json!({"credential": {"file": key}}),
    );
    let status = fixture.refused(
        ACME_ADMIN,
        vec![upstream.clone(), read_only_tool("legacy.read", "acme")],
        "spec.credential",
    );
    assert!(
        status.message().contains("`credential: NAME`"),
        "{status:?}"
    );

    // A registry an earlier version wrote holds it anyway: it loads, and is never used.
    fixture.written_before(vec![
        stored(&upstream),
        stored(&read_only_tool("legacy.read", "acme")),
    ])?;
    let envelope = fixture.call(ACME_BOT, "acme", "legacy.read", json!({}));
    failed_saying(&envelope, "it is not used");
    assert!(
        listener.invocations().is_empty(),
        "nothing was sent: {:?}",
        listener.invocations()
    );
    Ok(())
}

#[test]
fn an_old_style_credential_is_not_used_to_list_an_mcp_upstream() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    let server = McpUpstream::start();
    let key = path_text(&fixture.data_dir().join("cluster.key"));
    let mcp = |name: &str, extra: Value| {
        let mut spec = json!({"type": "mcp", "url": server.url(), "timeoutMs": 5000});
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        stored(&resource("Upstream", name, Some("acme"), spec))
    };
    // Listed in key order in one pass: once `z-plain`'s tools are in, `a-legacy` had its turn.
    fixture.written_before(vec![
        mcp("a-legacy", json!({"credential": {"file": key}})),
        mcp("z-plain", json!({})),
    ])?;
    let has_tools = |upstream: &str| {
        let registry = fixture.cluster.node(1).cluster.registry.read();
        registry
            .tools_for("acme")
            .iter()
            .any(|(name, _)| name.starts_with(&format!("{upstream}.")))
    };
    fixture
        .cluster
        .wait_until("z-plain's tools discovered", SETTLE, |_| {
            has_tools("z-plain")
        })?;
    assert!(
        !has_tools("a-legacy"),
        "the old form was never used to list"
    );
    Ok(())
}

#[test]
fn a_shared_upstreams_credential_serves_only_the_tenants_it_is_granted_to() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    let listener = RecordingUpstream::start();
    // A cluster admin's shared upstream naming `search`, which the operator granted to acme.
    fixture.apply_as(
        fixture.cluster.admin_key(),
        vec![
            http_upstream(
                "search",
                None,
                &listener.url(),
                json!({"credential": "search"}),
            ),
            resource(
                "Tool",
                "search.query",
                None,
                json!({"approvalMode": "read_only", "inputSchema": {"type": "object"}}),
            ),
        ],
    )?;
    let found = fixture.call(ACME_BOT, "acme", "search.query", json!({}));
    assert_eq!(found.state, pb::CallState::Succeeded as i32, "{found:?}");
    let refused = fixture.call(GLOBEX_BOT, "globex", "search.query", json!({}));
    failed_saying(&refused, "not one this node grants to tenant globex");
    assert_eq!(
        bearers(&listener),
        [format!("Bearer {SEARCH_SECRET}")],
        "globex's call sent nothing"
    );
    Ok(())
}

#[test]
fn a_credential_file_that_leads_into_the_data_directory_is_never_read() -> anyhow::Result<()> {
    // The operator's mistake: a credential file that, by the time it is read, is a link to the
    // node's own key.
    let links = tempfile::tempdir()?;
    let link = links.path().join("partner.key");
    let grants = Grants::default().with_credential(
        "partner",
        CredentialSource::File(link.clone()),
        &["acme"],
    );
    let fixture = Fixture::with_options(
        NodeOptions {
            grants,
            ..NodeOptions::default()
        },
        tempfile::tempdir()?,
    )?;
    std::os::unix::fs::symlink(fixture.data_dir().join("cluster.key"), &link)?;
    let listener = RecordingUpstream::start();
    fixture.apply_as(
        ACME_ADMIN,
        vec![
            http_upstream(
                "partner",
                Some("acme"),
                &listener.url(),
                json!({"credential": "partner"}),
            ),
            read_only_tool("partner.read", "acme"),
        ],
    )?;
    let envelope = fixture.call(ACME_BOT, "acme", "partner.read", json!({}));
    failed_saying(&envelope, "data directory");
    assert!(listener.invocations().is_empty(), "nothing was sent");
    Ok(())
}

/// demo's ledger as the built-in transfer keeps it, if it exists.
fn ledger(fixture: &Fixture, tenant: &str) -> Option<Ledger> {
    let path = ledger_path(&tenant_dir(&fixture.data_dir().join("builtin"), tenant));
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).expect("a ledger is JSON"))
}

fn builtin_upstream(tenant: &str) -> pb::Resource {
    resource("Upstream", "bank", Some(tenant), json!({"type": "builtin"}))
}

fn transfer(amount: i64) -> Value {
    json!({"from": "alice", "to": "bob", "amount": amount})
}

#[test]
fn builtin_tools_are_refused_to_tenants_the_operator_did_not_enable() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    // Finding 2 as it was done: a built-in upstream and a read-only transfer on it.
    fixture.refused(
        ACME_ADMIN,
        vec![
            builtin_upstream("acme"),
            read_only_tool("bank.transfer", "acme"),
        ],
        "spec.type",
    );
    // A tool the operator did not enable, even for a tenant that has built-ins.
    fixture.apply_as(fixture.cluster.admin_key(), vec![builtin_upstream("demo")])?;
    fixture.refused(
        fixture.cluster.admin_key(),
        vec![read_only_tool("bank.sleep", "demo")],
        "metadata.name",
    );
    // A shared built-in upstream would serve every tenant: refused.
    fixture.refused(
        fixture.cluster.admin_key(),
        vec![resource(
            "Upstream",
            "bank",
            None,
            json!({"type": "builtin"}),
        )],
        "metadata.tenant",
    );

    // An earlier version's registry holds acme's built-in upstream and transfer anyway: the
    // node refuses to run them, and no ledger moves.
    fixture.written_before(vec![
        stored(&builtin_upstream("acme")),
        stored(&read_only_tool("bank.transfer", "acme")),
    ])?;
    let envelope = fixture.call(ACME_BOT, "acme", "bank.transfer", transfer(500));
    failed_saying(
        &envelope,
        "built-in tool transfer is not enabled for tenant acme",
    );
    assert_eq!(ledger(&fixture, "acme"), None);
    assert_eq!(ledger(&fixture, "demo"), None);
    Ok(())
}

#[test]
fn builtin_state_is_per_tenant() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    for tenant in ["demo", "lab"] {
        fixture.apply_as(
            fixture.cluster.admin_key(),
            vec![
                builtin_upstream(tenant),
                read_only_tool("bank.transfer", tenant),
            ],
        )?;
    }
    let demos = fixture.call(DEMO_BOT, "demo", "bank.transfer", transfer(100));
    assert_eq!(demos.state, pb::CallState::Succeeded as i32, "{demos:?}");
    // lab's agent moves money in lab's ledger, never in demo's.
    for _ in 0..3 {
        let labs = fixture.call(LAB_BOT, "lab", "bank.transfer", transfer(300));
        assert_eq!(labs.state, pb::CallState::Succeeded as i32, "{labs:?}");
    }
    let demo = ledger(&fixture, "demo").expect("demo's ledger");
    let lab = ledger(&fixture, "lab").expect("lab's ledger");
    assert_eq!(demo.balances["alice"], 900);
    assert_eq!(demo.transfers.len(), 1);
    assert_eq!(demo.transfers[0].call_id, demos.call_id);
    assert_eq!(lab.balances["alice"], 100);
    assert_eq!(lab.transfers.len(), 3);
    assert!(
        !fixture.data_dir().join("builtin/demo-ledger.json").exists(),
        "no ledger is shared by the node's tenants"
    );
    Ok(())
}

#[test]
fn an_upstream_url_password_never_reaches_an_agent() -> anyhow::Result<()> {
    let fixture = Fixture::start()?;
    // Nothing listens on a port that was just free: every call fails and names the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let password_url = format!("http://svc:pa55w0rd@{closed}/api");
    let status = fixture.refused(
        ACME_ADMIN,
        vec![http_upstream("svc", Some("acme"), &password_url, json!({}))],
        "spec.url",
    );
    assert!(status.message().contains("credential"), "{status:?}");
    assert!(!status.message().contains("pa55w0rd"), "{status:?}");

    // A key in the query, which the admin may declare, and a password an earlier version
    // stored: the agent's error shows neither.
    fixture.apply_as(
        ACME_ADMIN,
        vec![
            http_upstream(
                "keyed",
                Some("acme"),
                &format!("http://{closed}/api?api_key=k3y-s3cret&region=eu"),
                json!({"retries": {"attempts": 0}}),
            ),
            read_only_tool("keyed.get", "acme"),
        ],
    )?;
    fixture.written_before(vec![
        stored(&http_upstream(
            "svc",
            Some("acme"),
            &password_url,
            json!({"retries": {"attempts": 0}}),
        )),
        stored(&read_only_tool("svc.get", "acme")),
    ])?;
    // Read back from the registry, the key is its admin's to see, not its agent's.
    let url_as = |key: &str| -> anyhow::Result<String> {
        let resource = fixture.cluster.block_on(read_upstream(
            fixture.cluster.addr(1),
            key,
            "acme",
            "keyed",
        ))?;
        let spec: Value = serde_json::from_str(&resource.spec_json)?;
        Ok(spec["url"].as_str().unwrap_or_default().to_owned())
    };
    assert!(url_as(ACME_ADMIN)?.contains("api_key=k3y-s3cret"));
    assert_eq!(
        url_as(ACME_BOT)?,
        format!("http://{closed}/api?api_key=redacted&region=eu")
    );
    for (tool, secret) in [("keyed.get", "k3y-s3cret"), ("svc.get", "pa55w0rd")] {
        let envelope = fixture.call(ACME_BOT, "acme", tool, json!({}));
        failed_saying(&envelope, &closed.to_string());
        let error = envelope.error.unwrap_or_default();
        assert!(!error.contains(secret), "{error}");
        let record = serde_json::to_string(&envelope.result_json)?;
        assert!(!record.contains(secret), "{record}");
    }
    Ok(())
}

/// The Upstream `tenant/name` as the principal of `key` reads it over `RegistryService.Get`.
async fn read_upstream(
    addr: std::net::SocketAddr,
    key: &str,
    tenant: &str,
    name: &str,
) -> anyhow::Result<pb::Resource> {
    let mut client = RegistryServiceClient::connect(format!("http://{addr}")).await?;
    let mut request = tonic::Request::new(pb::GetResourceRequest {
        key: Some(pb::ResourceKey {
            kind: "Upstream".into(),
            tenant: Some(tenant.into()),
            name: name.into(),
        }),
        linearizable: false,
    });
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse()?);
    let answer = client.get(request).await?.into_inner();
    answer
        .resource
        .ok_or_else(|| anyhow::anyhow!("no resource"))
}

/// `GET path` on the node's HTTP listener with an optional bearer: the status and the body.
fn get(fixture: &Fixture, path: &str, bearer: Option<&str>) -> anyhow::Result<(u16, String)> {
    let url = format!("http://{}{path}", fixture.cluster.node(1).http_addr);
    fixture.cluster.block_on(async {
        let mut request = reqwest::Client::new().get(url);
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    })
}

#[test]
fn metrics_name_no_tenant_by_default_and_can_require_a_token() -> anyhow::Result<()> {
    let fixture = Fixture::with_metrics(MetricsSettings {
        tenant_labels: false,
        token: Some(ScrapeToken::new(METRICS_TOKEN)),
    })?;
    fixture.apply_as(
        fixture.cluster.admin_key(),
        vec![
            builtin_upstream("demo"),
            read_only_tool("bank.echo", "demo"),
        ],
    )?;
    let echoed = fixture.call(DEMO_BOT, "demo", "bank.echo", json!({"text": "hi"}));
    assert_eq!(echoed.state, pb::CallState::Succeeded as i32, "{echoed:?}");

    // An agent's key, a wrong token and none are all refused with a challenge.
    for bearer in [None, Some("wrong"), Some(DEMO_BOT)] {
        let (status, body) = get(&fixture, "/metrics", bearer)?;
        assert_eq!(status, 401, "{bearer:?}: {body}");
        assert!(!body.contains("gatehouse_calls_total"), "{body}");
    }
    let (status, text) = get(&fixture, "/metrics", Some(METRICS_TOKEN))?;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("gatehouse_calls_total{outcome=\"succeeded\"} 1"),
        "{text}"
    );
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    for name in [
        "acme",
        "globex",
        "demo",
        "lab",
        "bank",
        "tenant=",
        "tool=",
        "upstream=",
    ] {
        assert!(
            samples.iter().all(|l| !l.contains(name)),
            "{name} is named: {text}"
        );
    }
    // Health and readiness stay open to the balancers.
    for path in ["/healthz", "/readyz"] {
        let (status, body) = get(&fixture, path, None)?;
        assert_eq!(status, 200, "{path}: {body}");
    }
    Ok(())
}
