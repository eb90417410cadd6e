//! Discovery against a real MCP server; the cluster is a registry applying proposals in order.

use super::*;
use crate::executor::test_mcp;
use futures::future::BoxFuture;
use gatehouse_registry::call::NodeId;
use gatehouse_registry::{Proposal, Response};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Mutex;

/// A one-node cluster without Raft: each proposal is validated and applied at the next index.
struct OneNodeCluster {
    registry: SharedRegistry,
    proposed: Mutex<Vec<Command>>,
}

impl ClusterPort for OneNodeCluster {
    fn node_id(&self) -> NodeId {
        1
    }

    fn propose(&self, command: Command) -> BoxFuture<'static, Result<Response, ProposeError>> {
        self.proposed.lock().unwrap().push(command.clone());
        let result = command
            .validate()
            .and_then(|()| {
                let mut registry = self.registry.write().unwrap();
                let index = registry.applied_index() + 1;
                registry.apply(
                    index,
                    &Proposal {
                        request_id: uuid::Uuid::new_v4(),
                        at: 0,
                        command,
                    },
                )
            })
            .map_err(|e| ProposeError::Refused(e.to_string()));
        Box::pin(futures::future::ready(result))
    }

    fn is_leader(&self) -> bool {
        true
    }

    fn voters(&self) -> Vec<NodeId> {
        vec![1]
    }

    fn reachable(&self, _: NodeId, _: Duration) -> bool {
        true
    }

    fn place_new_tenants(&self, _: Option<gatehouse_actors::NewTenantPlacer>) {}
}

fn cluster(yaml: &str) -> OneNodeCluster {
    OneNodeCluster {
        registry: SharedRegistry::new(gatehouse_testkit::yaml::registry(yaml)),
        proposed: Mutex::default(),
    }
}

fn tool(name: &str, description: &str, annotations: Value) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "annotations": annotations,
    })
}

fn stored_tool(
    local: &OneNodeCluster,
    tenant: Option<&str>,
    name: &str,
) -> Option<Object<ToolSpec>> {
    let key = ResourceKey {
        kind: Kind::Tool,
        tenant: tenant.map(str::to_owned),
        name: name.into(),
    };
    match local.registry.read().get(&key).map(|s| s.resource.clone()) {
        Some(Resource::Tool(tool)) => Some(tool),
        _ => None,
    }
}

/// The credential `kb`, granted to acme.
fn kb_grants() -> Grants {
    Grants::default().with_credential(
        "kb",
        gatehouse_cluster::grants::CredentialSource::Env("KB_TOKEN".into()),
        &["acme"],
    )
}

fn upstream_key(tenant: Option<&str>) -> ResourceKey {
    ResourceKey {
        kind: Kind::Upstream,
        tenant: tenant.map(str::to_owned),
        name: "kb".into(),
    }
}

#[tokio::test]
async fn discovery_puts_updates_deletes_and_leaves_admin_tools_alone() {
    let upstream = test_mcp::Upstream::default();
    *upstream.tools.lock().unwrap() = vec![
        tool("search", "Search the base.", json!({"readOnlyHint": true})),
        tool("pinned", "The upstream's own words.", json!({})),
        tool(
            "purge",
            "Remove everything.",
            json!({"destructiveHint": true}),
        ),
        tool("bad name!", "Not a tool name here.", json!({})),
        tool(
            "ask",
            "Ask a question.",
            json!({"readOnlyHint": true, "idempotentHint": true}),
        ),
    ];
    let addr = test_mcp::serve(upstream.clone()).await;
    let local = cluster(&format!(
        "apiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: acme}}\nspec: {{}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: kb, tenant: acme}}\n\
         spec: {{type: mcp, url: 'http://{addr}/mcp', credential: kb}}\n\
         ---\napiVersion: gatehouse.dev/v1\nkind: Tool\nmetadata: {{name: kb.pinned, tenant: acme}}\n\
         spec: {{description: The admin's words., approvalMode: read_only}}\n"
    ));
    let env: HashMap<String, String> = [("KB_TOKEN".to_owned(), "t".to_owned())].into();
    let grants = kb_grants();
    let registry = local.registry.clone();
    let key = upstream_key(Some("acme"));

    let next = discover(&local, &registry, &grants, &env, &key)
        .await
        .unwrap();
    assert_eq!(next, Some(Duration::from_secs(300)));
    assert_eq!(
        upstream.lists.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "all three pages"
    );
    let proposed = std::mem::take(&mut *local.proposed.lock().unwrap());
    assert_eq!(proposed.len(), 1, "{proposed:?}");
    let Command::Put { resources } = &proposed[0] else {
        panic!("{proposed:?}")
    };
    let names: Vec<&str> = resources.iter().map(Resource::name).collect();
    assert_eq!(names, ["kb.ask", "kb.purge", "kb.search"]);
    let search = stored_tool(&local, Some("acme"), "kb.search").unwrap();
    assert_eq!(search.metadata.labels[DISCOVERED_FROM], "kb");
    assert_eq!(search.spec.description, "Search the base.");
    assert_eq!(
        search.spec.input_schema["properties"]["q"],
        json!({"type": "string"})
    );
    assert_eq!(
        search.spec.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    assert_eq!(search.spec.approval_mode, None);
    // The upstream is not trusted: its read-only hint does not make the tool read-only.
    assert_eq!(
        search.spec.declared_mode(false).0,
        gatehouse_registry::ApprovalMode::Destructive
    );
    let pinned = stored_tool(&local, Some("acme"), "kb.pinned").unwrap();
    assert_eq!(pinned.spec.description, "The admin's words.");
    assert!(pinned.metadata.labels.is_empty());

    // Nothing changed upstream: nothing is proposed.
    discover(&local, &registry, &grants, &env, &key)
        .await
        .unwrap();
    assert!(local.proposed.lock().unwrap().is_empty());

    // One tool changes, one disappears; the admin's tool is neither updated nor deleted.
    *upstream.tools.lock().unwrap() = vec![
        tool(
            "search",
            "Search the whole base.",
            json!({"readOnlyHint": true}),
        ),
        tool(
            "ask",
            "Ask a question.",
            json!({"readOnlyHint": true, "idempotentHint": true}),
        ),
    ];
    discover(&local, &registry, &grants, &env, &key)
        .await
        .unwrap();
    let proposed = std::mem::take(&mut *local.proposed.lock().unwrap());
    assert_eq!(proposed.len(), 2, "{proposed:?}");
    assert!(
        matches!(&proposed[0], Command::Put { resources } if resources.len() == 1
        && resources[0].name() == "kb.search")
    );
    assert!(
        matches!(&proposed[1], Command::Delete { keys } if keys.len() == 1
        && keys[0].name == "kb.purge")
    );
    assert_eq!(
        stored_tool(&local, Some("acme"), "kb.search")
            .unwrap()
            .spec
            .description,
        "Search the whole base."
    );
    assert!(stored_tool(&local, Some("acme"), "kb.purge").is_none());
    assert!(stored_tool(&local, Some("acme"), "kb.pinned").is_some());
}

#[tokio::test]
async fn a_deleted_upstream_takes_its_discovered_tools_with_it() {
    let upstream = test_mcp::Upstream::default();
    *upstream.tools.lock().unwrap() = vec![tool("search", "Search.", json!({}))];
    let addr = test_mcp::serve(upstream.clone()).await;
    let local = cluster(&format!(
        "apiVersion: gatehouse.dev/v1\nkind: Upstream\nmetadata: {{name: kb}}\n\
         spec: {{type: mcp, url: 'http://{addr}/mcp'}}\n"
    ));
    let env: HashMap<String, String> = HashMap::new();
    let grants = kb_grants();
    let registry = local.registry.clone();
    let key = upstream_key(None);
    discover(&local, &registry, &grants, &env, &key)
        .await
        .unwrap();
    assert!(
        stored_tool(&local, None, "kb.search").is_some(),
        "a shared upstream's tools are shared"
    );

    local
        .propose(Command::Delete {
            keys: vec![key.clone()],
        })
        .await
        .unwrap();
    let next = discover(&local, &registry, &grants, &env, &key)
        .await
        .unwrap();
    assert_eq!(next, None);
    assert!(stored_tool(&local, None, "kb.search").is_none());
}

#[test]
fn a_failed_listing_is_retried_within_a_second_then_less_and_less_often() {
    let waits: Vec<u64> = (1..=8).map(|n| retry_after(n).as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
    assert_eq!(retry_after(u32::MAX), MOST_RETRY);
}
