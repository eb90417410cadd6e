//! The registry's state and its deterministic `apply`. Every node holds the whole registry, so
//! every read is local; the same sequence of proposals gives a byte-identical state everywhere.

mod calls;
mod lookup;
mod placement;
mod resources;
mod restore;
mod sorted_key;
mod toolsets;

pub use placement::Placement;
pub use resources::MAX_WEBHOOKS_PER_TENANT;
pub use toolsets::ToolsetInfo;

use crate::call::{Call, CallId, NodeId, Timestamp};
use crate::cascade::{self, Candidate, Query, Resolution};
use crate::command::{Command, Proposal, Response};
use crate::error::ApplyError;
use crate::resource::NotifyEvent;
use crate::resource::{
    Kind, PolicySpec, PrincipalSpec, Resource, ResourceKey, Role, SkillSpec, WebhookSpec,
};
use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};
use sorted_key::SortedKey;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use uuid::Uuid;

/// A resource as stored: the resource and the generation that grows on each change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub resource: Resource,
    pub generation: u64,
}

/// A tenant's webhook, as the notifier reads it.
#[derive(Debug, Clone, Copy)]
pub struct Webhook<'a> {
    pub tenant: &'a str,
    pub name: &'a str,
    pub spec: &'a WebhookSpec,
    /// When it was created (ms): nothing before is announced.
    pub since: Timestamp,
    /// Its generation: a change to the webhook changes it.
    pub generation: u64,
}

/// A request id already applied, and the answer it got, so a retried proposal gets it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct AppliedRequest {
    at: Timestamp,
    response: Response,
}

/// Everything the log builds. Ordered maps, and one hash map written in key order, so its
/// serialisation is canonical.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct State {
    /// By key, each behind the beginning of its sort order (`sorted_key.rs`).
    #[serde(with = "pairs")]
    resources: BTreeMap<SortedKey, Stored>,
    /// Generation counters that outlive deletes, so a re-created resource never reuses one.
    /// Only looked up one key at a time, by every change, so hashed like `placements`.
    #[serde(
        serialize_with = "pairs::serialize_sorted",
        deserialize_with = "pairs::deserialize"
    )]
    generations: HashMap<ResourceKey, u64>,
    /// Grows on every change to any of a tenant's policies.
    policy_generations: BTreeMap<String, u64>,
    /// The applied index of the last change to the skills a tenant's cascade reads (`None`:
    /// global skills).
    #[serde(with = "pairs")]
    cascade_changed: BTreeMap<Option<String>, u64>,
    calls: BTreeMap<CallId, Call>,
    /// (tenant, principal, key) to the call that used the key.
    #[serde(with = "pairs")]
    idempotency: BTreeMap<(String, String, String), CallId>,
    /// Looked up by every tenant write, placement step and call routed to a home, so hashed:
    /// in an ordered map of tens of thousands of tenants each look-up was a dozen string
    /// compares out of cache. Written in key order, as the ordered map it replaced wrote it.
    #[serde(serialize_with = "sorted_map")]
    placements: HashMap<String, Placement>,
    /// Looked up and added to by every proposal, so hashed like `placements`.
    #[serde(serialize_with = "sorted_map")]
    requests: HashMap<Uuid, AppliedRequest>,
    /// Every node id ever admitted, with the address it joined with.
    nodes: BTreeMap<NodeId, String>,
    /// (tenant, owner slot: the principal, or the principal and end user) to the toolsets it
    /// loaded, each with whether its write tools came too.
    #[serde(default, with = "pairs")]
    toolsets: BTreeMap<(String, String), BTreeMap<String, bool>>,
    /// When each webhook was created: it is told of nothing that happened before.
    #[serde(default, with = "pairs")]
    webhooks_since: BTreeMap<ResourceKey, Timestamp>,
    /// Per call, the (webhook, event) notices delivered or given up on. Purged with the call.
    #[serde(default)]
    notified: BTreeMap<CallId, BTreeSet<(String, NotifyEvent)>>,
}

/// Maps whose keys are not strings travel as sequences of pairs, in key order.
mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::{BTreeMap, HashMap};

    pub fn serialize<S: Serializer, K: Serialize, V: Serialize>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    /// A hash map's pairs, written as [`serialize`] writes an ordered map of the same entries.
    pub fn serialize_sorted<S: Serializer, K: Serialize + Ord, V: Serialize>(
        map: &HashMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(super::in_key_order(map))
    }

    /// The pairs, into an ordered map or a hash map alike.
    pub fn deserialize<'de, D, K, V, M>(d: D) -> Result<M, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de>,
        V: Deserialize<'de>,
        M: FromIterator<(K, V)>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

/// A hash map written as a map in key order, so it serialises like a `BTreeMap` of the same
/// entries (it reads back as any map does).
fn sorted_map<S: Serializer, K: Serialize + Ord, V: Serialize>(
    map: &HashMap<K, V>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(in_key_order(map))
}

/// A hash map's entries in key order: the order its ordered counterpart would write them in.
fn in_key_order<K: Ord, V>(map: &HashMap<K, V>) -> Vec<(&K, &V)> {
    let mut entries: Vec<(&K, &V)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    entries
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registry {
    applied_index: u64,
    state: State,
    /// API key digest to principal name: derived from the state, rebuilt on load, kept in step
    /// by every put and delete of a principal.
    keys: BTreeMap<String, String>,
    /// (JWT issuer, subject) to principal name, derived and kept in step like `keys`.
    jwt_subjects: BTreeMap<(String, String), String>,
    /// Each tenant's call ids: derived the same way, kept in step by propose and purge, so a
    /// tenant's queue is read without scanning every call.
    calls_by_tenant: BTreeMap<String, BTreeSet<CallId>>,
    /// The calls not yet finished, kept in step by every call command's answer.
    unfinished: BTreeSet<CallId>,
    /// Tenants with no home yet or a move under way, kept in step by every put and delete of a
    /// tenant and every placement step, so the leader's review need not look at every tenant.
    unsettled: BTreeSet<String>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one committed proposal at log index `index`. A refused command leaves the state
    /// as it was; a request id seen before gets the answer it got the first time.
    pub fn apply(&mut self, index: u64, proposal: &Proposal) -> Result<Response, ApplyError> {
        self.applied_index = self.applied_index.max(index);
        if let Some(done) = self.state.requests.get(&proposal.request_id) {
            return Ok(done.response.clone());
        }
        let at = proposal.at;
        let response = match &proposal.command {
            Command::Put { resources } => self.put(index, resources, at)?,
            Command::Delete { keys } => self.delete(index, keys)?,
            Command::Propose { call } => self.propose(call, at)?,
            Command::Approve {
                call_id,
                approver,
                user,
                args_sha256,
                note,
            } => self.approve(call_id, approver, user.as_deref(), args_sha256, note, at)?,
            Command::Reject {
                call_id,
                approver,
                user,
                reason,
            } => self.reject(call_id, approver, user.as_deref(), reason, at)?,
            Command::Cancel {
                call_id,
                principal,
                user,
                reason,
            } => self.cancel(call_id, principal, user.as_deref(), reason, at)?,
            Command::Expire {
                call_id,
                node,
                epoch,
            } => self.expire(call_id, *node, *epoch, at)?,
            Command::Claim {
                call_id,
                node,
                epoch,
                claim_id,
                replaces_unsent,
            } => self.claim(
                call_id,
                *node,
                *epoch,
                claim_id,
                replaces_unsent.as_deref(),
                at,
            )?,
            Command::Complete {
                call_id,
                claim_id,
                outcome,
            } => self.complete(call_id, claim_id, outcome, at)?,
            Command::MarkUnknown {
                call_id,
                node,
                epoch,
            } => self.mark_unknown(call_id, *node, *epoch, at)?,
            Command::Resolve {
                call_id,
                approver,
                user,
                outcome,
                note,
            } => self.resolve_unknown(call_id, approver, user.as_deref(), outcome, note, at)?,
            Command::Place {
                tenant,
                home,
                epoch,
            } => self.place(tenant, *home, *epoch)?,
            Command::StartMove { tenant, epoch, to } => self.start_move(tenant, *epoch, *to)?,
            Command::Purge { before } => self.purge(*before),
            Command::Notified {
                tenant,
                webhook,
                notices,
            } => self.mark_notified(tenant, webhook, notices),
            Command::AdmitNode { node, addr } => self.admit(*node, addr)?,
            Command::LoadToolset {
                tenant,
                principal,
                user,
                toolset,
                include_write_tools,
            } => self.load_toolset(
                tenant,
                principal,
                user.as_deref(),
                toolset,
                *include_write_tools,
            )?,
            // Each proposal is applied (and deduplicated) on its own; a nested batch is refused
            // like any other bad command, so apply never recurses more than once.
            Command::Batch { proposals } => Response::Batch {
                results: proposals
                    .iter()
                    .map(|p| match p.command {
                        Command::Batch { .. } => Err(ApplyError::Refused {
                            reason: "batches do not nest".into(),
                        }),
                        _ => self.apply(index, p),
                    })
                    .collect(),
            },
        };
        if let Response::Call { call_id, state } = &response {
            if state.is_finished() {
                self.unfinished.remove(call_id);
            } else {
                self.unfinished.insert(call_id.clone());
            }
        }
        // A batch whose proposals were all taken answers a retry from their own ids, each kept
        // on its own, exactly as its kept answer would: keeping that too would double what every
        // batch leaves in the state (and in every snapshot) until it is purged. A batch with a
        // refusal keeps its answer, since a refused proposal left nothing of its own and might be
        // taken on a retry: every node, of either version in a rolling upgrade, must answer that
        // retry the same way.
        if !Self::answered_by_its_proposals(&proposal.command, &response) {
            self.state.requests.insert(
                proposal.request_id,
                AppliedRequest {
                    at,
                    response: response.clone(),
                },
            );
        }
        Ok(response)
    }

    /// A batch all of whose proposals were taken: its answer is theirs, kept under their ids.
    fn answered_by_its_proposals(command: &Command, response: &Response) -> bool {
        matches!(command, Command::Batch { .. })
            && matches!(response, Response::Batch { results } if results.iter().all(Result::is_ok))
    }

    pub fn applied_index(&self) -> u64 {
        self.applied_index
    }

    /// SHA-256 over the canonical serialisation of the whole state: equal on every node that
    /// applied the same log.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.to_bytes());
        hex::encode(hasher.finalize())
    }

    /// The state as bytes, for snapshots. `from_bytes` gives it back.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&(self.applied_index, &self.state)).expect("registry state serialises")
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        let (applied_index, state): (u64, State) = serde_json::from_slice(bytes)?;
        let mut registry = Registry {
            applied_index,
            state,
            keys: BTreeMap::new(),
            jwt_subjects: BTreeMap::new(),
            calls_by_tenant: BTreeMap::new(),
            unfinished: BTreeSet::new(),
            unsettled: BTreeSet::new(),
        };
        registry.rebuild_key_index();
        registry.rebuild_unsettled();
        for call in registry.state.calls.values() {
            registry
                .calls_by_tenant
                .entry(call.spec.tenant.clone())
                .or_default()
                .insert(call.spec.id.clone());
            if !call.state.is_finished() {
                registry.unfinished.insert(call.spec.id.clone());
            }
        }
        Ok(registry)
    }

    pub fn get(&self, key: &ResourceKey) -> Option<&Stored> {
        self.state.resources.get(key)
    }

    /// Resources of one kind, optionally of one tenant (`Some(None)` for cluster-wide ones), in
    /// key order, starting after `after` (for paging).
    pub fn list<'a>(
        &'a self,
        kind: Kind,
        tenant: Option<Option<&'a str>>,
        after: Option<&'a ResourceKey>,
    ) -> impl Iterator<Item = &'a Stored> + 'a {
        use std::ops::Bound;
        // Keys order by (kind, tenant, name): one tenant's resources of a kind are contiguous,
        // and a page starts right after the last key served instead of scanning up to it.
        let first = ResourceKey {
            kind,
            tenant: tenant.flatten().map(str::to_owned),
            name: String::new(),
        };
        let start = match after {
            Some(a) if *a >= first => Bound::Excluded(SortedKey::new(a.clone())),
            _ => Bound::Included(SortedKey::new(first)),
        };
        self.state
            .resources
            .range((start, Bound::Unbounded))
            .take_while(move |(k, _)| {
                let k = k.key();
                k.kind == kind && tenant.is_none_or(|t| k.tenant.as_deref() == t)
            })
            .map(|(_, s)| s)
    }

    pub fn call(&self, id: &CallId) -> Option<&Call> {
        self.state.calls.get(id)
    }

    /// A tenant's calls, by id.
    pub fn calls_of<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a Call> + 'a {
        self.calls_by_tenant
            .get(tenant)
            .into_iter()
            .flatten()
            .filter_map(|id| self.state.calls.get(id))
    }

    /// A tenant's calls not yet finished, by id.
    pub fn unfinished_calls_of<'a>(
        &'a self,
        tenant: &'a str,
    ) -> impl Iterator<Item = &'a Call> + 'a {
        self.calls_of(tenant).filter(|c| !c.state.is_finished())
    }

    /// Every tenant's name, in order.
    pub fn tenants(&self) -> impl Iterator<Item = &str> + '_ {
        self.list(Kind::Tenant, Some(None), None)
            .map(|s| s.resource.metadata().name.as_str())
    }

    /// Every call not yet finished, of every tenant, by id.
    pub fn unfinished_calls(&self) -> impl Iterator<Item = &Call> + '_ {
        self.unfinished
            .iter()
            .filter_map(|id| self.state.calls.get(id))
    }

    pub fn principal(&self, name: &str) -> Option<&PrincipalSpec> {
        let key = ResourceKey {
            kind: Kind::Principal,
            tenant: None,
            name: name.to_owned(),
        };
        match self
            .state
            .resources
            .get(&SortedKey::new(key))
            .map(|s| &s.resource)
        {
            Some(Resource::Principal(p)) => Some(&p.spec),
            _ => None,
        }
    }

    /// The principal holding an API key, by the key's SHA-256 (lower-case hex).
    pub fn principal_by_key(&self, key_sha256: &str) -> Option<(&str, &PrincipalSpec)> {
        let name = self.keys.get(key_sha256)?;
        self.principal(name).map(|p| (name.as_str(), p))
    }

    /// The roles an end user holds in a tenant: those of the principals that are the user, that
    /// is named as the user or whose JWT subject is exactly the user. An API key bound to a user
    /// is an agent acting for the user, not the user, and an issuer-wide `*` principal is no one
    /// user. Sorted, without repeats.
    pub fn user_roles(&self, tenant: &str, user: &str) -> Vec<Role> {
        let mut roles: Vec<Role> = self
            .list(Kind::Principal, None, None)
            .filter_map(|s| match &s.resource {
                Resource::Principal(p)
                    if p.metadata.name == user
                        || p.spec.jwt.as_ref().is_some_and(|j| j.subject == user) =>
                {
                    p.spec.roles.get(tenant)
                }
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        roles.sort();
        roles.dedup();
        roles
    }

    /// The principal a JWT of `issuer` about `subject` acts as: the one declared for exactly that
    /// subject, else the issuer-wide one (`subject: "*"`), every subject of which acts as it.
    /// When several principals declare the same pair, the first by name holds it.
    pub fn principal_by_jwt(&self, issuer: &str, subject: &str) -> Option<(&str, &PrincipalSpec)> {
        let find = |subject: &str| {
            self.jwt_subjects
                .get(&(issuer.to_owned(), subject.to_owned()))
        };
        let name = find(subject).or_else(|| find("*"))?;
        self.principal(name).map(|p| (name.as_str(), p))
    }

    /// Whether a node id was ever admitted to the cluster.
    pub fn node_admitted(&self, node: NodeId) -> bool {
        self.state.nodes.contains_key(&node)
    }

    fn admit(&mut self, node: NodeId, addr: &str) -> Result<Response, ApplyError> {
        if let Some(earlier) = self.state.nodes.get(&node) {
            return Err(ApplyError::AlreadyExists {
                what: format!("node id {node} (admitted at {earlier}; ids are never reused)"),
            });
        }
        self.state.nodes.insert(node, addr.to_owned());
        Ok(Response::Admitted { node })
    }

    /// Rebuilds the API key and JWT subject indexes from the principals.
    fn rebuild_key_index(&mut self) {
        self.keys = self
            .list(Kind::Principal, None, None)
            .filter_map(|s| match &s.resource {
                Resource::Principal(p) => p
                    .spec
                    .api_key_sha256
                    .clone()
                    .map(|k| (k, p.metadata.name.clone())),
                _ => None,
            })
            .collect();
        let mut jwt_subjects = BTreeMap::new();
        for stored in self.list(Kind::Principal, None, None) {
            if let Resource::Principal(p) = &stored.resource
                && let Some(jwt) = &p.spec.jwt
            {
                jwt_subjects
                    .entry((jwt.issuer.clone(), jwt.subject.clone()))
                    .or_insert_with(|| p.metadata.name.clone());
            }
        }
        self.jwt_subjects = jwt_subjects;
    }

    pub fn policy_generation(&self, tenant: &str) -> u64 {
        self.state
            .policy_generations
            .get(tenant)
            .copied()
            .unwrap_or(0)
    }

    /// A tenant's policies as (name, spec).
    pub fn policies<'a>(&'a self, tenant: &'a str) -> Vec<(&'a str, &'a PolicySpec)> {
        self.list(Kind::Policy, Some(Some(tenant)), None)
            .filter_map(|s| match &s.resource {
                Resource::Policy(p) => Some((p.metadata.name.as_str(), &p.spec)),
                _ => None,
            })
            .collect()
    }

    /// Every webhook, with its tenant, name and the time it was created: notices of moments
    /// before then are never due.
    pub fn webhooks(&self) -> impl Iterator<Item = Webhook<'_>> + '_ {
        self.list(Kind::Webhook, None, None).filter_map(|stored| {
            let Resource::Webhook(w) = &stored.resource else {
                return None;
            };
            let key = stored.resource.key();
            Some(Webhook {
                tenant: w.metadata.tenant.as_deref()?,
                name: &w.metadata.name,
                spec: &w.spec,
                since: self.state.webhooks_since.get(&key).copied().unwrap_or(0),
                generation: stored.generation,
            })
        })
    }

    /// Whether `webhook` of the call's tenant was told of (or gave up on) `event` of the call.
    pub fn notified(&self, call: &CallId, webhook: &str, event: NotifyEvent) -> bool {
        self.state
            .notified
            .get(call)
            .is_some_and(|marks| marks.contains(&(webhook.to_owned(), event)))
    }

    /// The skills a tenant's cascade reads: the global ones and the tenant's own. Nothing of
    /// another tenant is ever offered.
    pub fn skills_for<'a>(
        &'a self,
        tenant: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a SkillSpec)> + 'a {
        self.list(Kind::Skill, Some(None), None)
            .chain(self.list(Kind::Skill, Some(Some(tenant)), None))
            .filter_map(|s| match &s.resource {
                Resource::Skill(o) => Some((o.metadata.name.as_str(), &o.spec)),
                _ => None,
            })
    }

    /// The applied index of the last change that can alter a tenant's cascade: a cached
    /// resolution computed at or after it is current.
    pub fn cascade_changed_at(&self, tenant: &str) -> u64 {
        let global = self.state.cascade_changed.get(&None).copied().unwrap_or(0);
        let own = self
            .state
            .cascade_changed
            .get(&Some(tenant.to_owned()))
            .copied()
            .unwrap_or(0);
        global.max(own)
    }

    pub fn resolve_skills(&self, query: &Query) -> Resolution {
        cascade::resolve(
            self.skills_for(&query.tenant)
                .map(|(name, spec)| Candidate { name, spec }),
            query,
        )
    }
}

#[cfg(test)]
mod tests;
