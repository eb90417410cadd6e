//! `gatehouse apply -f`, `get`, `list`, `delete` against the cluster.

use super::client::{self, explain};
use super::client::{Remote, RemoteArgs};
use super::{Output, OutputArgs};
use crate::exit::Exit;
use crate::files;
use clap::Args;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::Kind;
use gatehouse_registry::documents::to_yaml;
use serde_json::json;
use std::path::Path;

/// Resources per Apply call: big directories go in several Raft commands, none of them huge.
const BATCH: usize = 500;

#[derive(Debug, Args)]
pub struct ResourceArgs {
    /// Tenant, Principal, Upstream, Tool, Skill, Policy or Webhook (any case, singular or plural).
    pub kind: String,
    /// The resource's name.
    pub name: String,
    /// The tenant the resource belongs to (absent for cluster-wide resources).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Read after every write committed so far.
    #[arg(long)]
    pub linearizable: bool,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub async fn apply(remote: &Remote, path: &Path) -> anyhow::Result<Exit> {
    let parsed = files::load(path)?;
    if !parsed.problems.is_empty() {
        for problem in &parsed.problems {
            println!("{problem}");
        }
        println!("{} problem(s): nothing applied", parsed.problems.len());
        return Ok(Exit::Failed);
    }
    let resources: Vec<pb::Resource> = parsed
        .into_resources()
        .iter()
        .map(to_wire)
        .collect::<anyhow::Result<_>>()?;
    let total = resources.len();
    let mut registry = client::registry(remote).await?;
    let mut results = Vec::with_capacity(total);
    for (i, batch) in resources.chunks(BATCH).enumerate() {
        let answer = registry
            .apply(pb::ApplyRequest {
                resources: batch.to_vec(),
            })
            .await
            .map_err(explain)?
            .into_inner();
        results.extend(answer.results);
        if total > BATCH {
            eprintln!(
                "applied {}/{total} (batch {} at log index {})",
                results.len(),
                i + 1,
                answer.log_index
            );
        }
    }
    let mut applied = Vec::with_capacity(results.len());
    for r in &results {
        let key = r.key.clone().unwrap_or_default();
        let outcome = pb::ApplyOutcome::try_from(r.outcome).map_or("?", |o| match o {
            pb::ApplyOutcome::Created => "created",
            pb::ApplyOutcome::Updated => "updated",
            pb::ApplyOutcome::Unchanged | pb::ApplyOutcome::Unspecified => "unchanged",
        });
        if remote.output.is_text() {
            println!(
                "{} {outcome} (generation {})",
                display_key(&key),
                r.generation
            );
        } else {
            applied.push(json!({"kind": key.kind, "tenant": key.tenant, "name": key.name, "outcome": outcome, "generation": r.generation}));
        }
    }
    if !remote.output.is_text() {
        remote.output.print_list(applied);
    }
    Ok(Exit::Done)
}

pub async fn get(remote: &Remote, args: ResourceArgs) -> anyhow::Result<Exit> {
    let key = key(&args.kind, args.tenant, args.name)?;
    let mut registry = client::registry(remote).await?;
    let resource = registry
        .get(pb::GetResourceRequest {
            key: Some(key),
            linearizable: args.linearizable,
        })
        .await
        .map_err(explain)?
        .into_inner()
        .resource
        .unwrap_or_default();
    match remote.output {
        Output::Text => print_yaml(&[resource])?,
        json => json.print_one(&resource_json(&resource)?),
    }
    Ok(Exit::Done)
}

pub async fn list(
    remote: &Remote,
    kind: String,
    tenant: Option<String>,
    linearizable: bool,
) -> anyhow::Result<Exit> {
    let kind = parse_kind(&kind)?;
    let mut registry = client::registry(remote).await?;
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = registry
            .list(pb::ListResourcesRequest {
                kind: kind.as_str().to_owned(),
                tenant: tenant.clone(),
                page_size: 1_000,
                page_token,
                linearizable,
            })
            .await
            .map_err(explain)?
            .into_inner();
        all.extend(page.resources);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match remote.output {
        Output::Json | Output::Jsonl => remote.output.print_list(
            all.iter()
                .map(resource_json)
                .collect::<anyhow::Result<_>>()?,
        ),
        Output::Text => {
            for r in &all {
                let tenant = r
                    .tenant
                    .as_deref()
                    .map(|t| format!("{t}/"))
                    .unwrap_or_default();
                println!("{}/{tenant}{}  generation {}", r.kind, r.name, r.generation);
            }
            println!("{} {}(s)", all.len(), kind);
        }
    }
    Ok(Exit::Done)
}

pub async fn delete(remote: &Remote, args: ResourceArgs) -> anyhow::Result<Exit> {
    let key = key(&args.kind, args.tenant, args.name)?;
    let shown = display_key(&key);
    let mut registry = client::registry(remote).await?;
    let answer = registry
        .delete(pb::DeleteResourceRequest { key: Some(key) })
        .await
        .map_err(explain)?
        .into_inner();
    match remote.output {
        Output::Json | Output::Jsonl => remote
            .output
            .print_one(&json!({"deleted": answer.deleted, "log_index": answer.log_index})),
        Output::Text if answer.deleted => println!("{shown} deleted"),
        Output::Text => println!("{shown} did not exist"),
    }
    Ok(Exit::Done)
}

fn parse_kind(text: &str) -> anyhow::Result<Kind> {
    Kind::parse(text).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown kind {text:?}: one of Tenant, Principal, Upstream, Tool, Skill, Policy, Webhook"
        )
    })
}

fn key(kind: &str, tenant: Option<String>, name: String) -> anyhow::Result<pb::ResourceKey> {
    Ok(pb::ResourceKey {
        kind: parse_kind(kind)?.as_str().to_owned(),
        tenant,
        name,
    })
}

fn display_key(key: &pb::ResourceKey) -> String {
    match &key.tenant {
        Some(t) => format!("{}/{t}/{}", key.kind, key.name),
        None => format!("{}/{}", key.kind, key.name),
    }
}

fn to_wire(resource: &gatehouse_registry::Resource) -> anyhow::Result<pb::Resource> {
    let spec = serde_json::to_value(resource)?
        .get("spec")
        .cloned()
        .unwrap_or_default();
    let meta = resource.metadata();
    Ok(pb::Resource {
        kind: resource.kind().as_str().to_owned(),
        name: meta.name.clone(),
        tenant: meta.tenant.clone(),
        labels: meta.labels.clone().into_iter().collect(),
        spec_json: spec.to_string(),
        generation: 0,
    })
}

/// The resource as the document `apply -f` takes, with its generation beside it.
fn resource_json(r: &pb::Resource) -> anyhow::Result<serde_json::Value> {
    let spec: serde_json::Value = serde_json::from_str(&r.spec_json)?;
    let mut metadata = json!({"name": r.name});
    if let Some(t) = &r.tenant {
        metadata["tenant"] = json!(t);
    }
    if !r.labels.is_empty() {
        metadata["labels"] = json!(r.labels);
    }
    let document = json!({"apiVersion": gatehouse_registry::resource::API_VERSION, "kind": r.kind,
                          "metadata": metadata, "spec": spec});
    Ok(json!({"generation": r.generation, "resource": document}))
}

/// As the YAML documents `apply -f` takes back.
fn print_yaml(resources: &[pb::Resource]) -> anyhow::Result<()> {
    for r in resources {
        let document = resource_json(r)?["resource"].take();
        let resource: gatehouse_registry::Resource = serde_json::from_value(document)?;
        println!("# generation {}\n---\n{}", r.generation, to_yaml(&resource));
    }
    Ok(())
}
