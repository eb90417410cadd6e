//! The commands that change the registry: each one complete in itself (classification, policy
//! and timestamps travel inside it), so applying it computes nothing that another version of
//! the code could compute differently.

use crate::call::{CallId, CallState, NewCall, NodeId, Outcome, Timestamp};
use crate::canonical;
use crate::error::ApplyError;
use crate::resource::NotifyEvent;
use crate::resource::{Resource, ResourceKey};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod by_tag;

/// Most notices one `Notified` command marks.
pub const MAX_NOTICES: usize = 1_024;

/// A command as it goes through Raft: the request id lets apply run a retried proposal once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub request_id: Uuid,
    pub at: Timestamp,
    pub command: Command,
}

/// Written as a map with its `type` first; read the same way without buffering (`by_tag`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Create or change resources, all or none.
    Put {
        resources: Vec<Resource>,
    },
    /// Remove resources, all or none.
    Delete {
        keys: Vec<ResourceKey>,
    },
    Propose {
        call: Box<NewCall>,
    },
    Approve {
        call_id: CallId,
        approver: String,
        /// The subject of the token the decider signed in with (a JWT's `sub`); absent for an
        /// API key. Apply turns it into the person with `identity::person`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        args_sha256: String,
        note: String,
    },
    Reject {
        call_id: CallId,
        approver: String,
        /// The subject of the token the decider signed in with (a JWT's `sub`); absent for an
        /// API key. Apply turns it into the person with `identity::person`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        reason: String,
    },
    Cancel {
        call_id: CallId,
        principal: String,
        /// The end user the canceller acts for: only the call's own end user may cancel it.
        /// Absent in commands written before calls were scoped by user.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        reason: String,
    },
    Expire {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
    },
    Claim {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
        claim_id: String,
        /// The claimant's own earlier claim of the call under which, it attests, no request was
        /// ever sent (its audit log holds no execution start for it): such a claim may be
        /// replaced even for a call that is not safe to run twice. Absent in a first claim, and
        /// in commands written before re-claims existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces_unsent: Option<String>,
    },
    Complete {
        call_id: CallId,
        claim_id: String,
        outcome: Outcome,
    },
    MarkUnknown {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
    },
    Resolve {
        call_id: CallId,
        approver: String,
        /// The subject of the token the approver signed in with, as for `Approve`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        outcome: Outcome,
        note: String,
    },
    /// Make `home` the tenant's home node; `epoch` must be above the current one.
    Place {
        tenant: String,
        home: NodeId,
        epoch: u64,
    },
    /// Start a planned move of the tenant's queue to `to`: the home under `epoch` claims nothing
    /// more; the leader places the tenant on `to` once the home's executions have finished.
    /// `handover` is its name in the log and in snapshots, as the entries written so far hold it.
    #[serde(rename = "handover")]
    StartMove {
        tenant: String,
        epoch: u64,
        to: NodeId,
    },
    /// Forget finished calls, their idempotency records and request ids older than `before`.
    Purge {
        before: Timestamp,
    },
    /// Record that a node id joins the cluster. Ids are never reused: a second admission of the
    /// same id is refused, even after the node was removed.
    AdmitNode {
        node: NodeId,
        addr: String,
    },
    /// Widen what a principal sees in `tools/list` by a toolset of the tenant: its read-only
    /// tools, and its other tools too when `include_write_tools`. Loading never narrows.
    LoadToolset {
        tenant: String,
        principal: String,
        /// The end user the principal loads it for; absent for a principal acting for none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
        toolset: String,
        include_write_tools: bool,
    },
    /// Record that a tenant's webhook was told of these moments of its calls, or gave up on
    /// them, so that no home announces them again.
    Notified {
        tenant: String,
        webhook: String,
        notices: Vec<(CallId, NotifyEvent)>,
    },
    /// Several independent proposals in one log entry, applied in order, each answered on its
    /// own (one refused does not refuse the others). How a busy node commits many writes with
    /// one Raft round and one disk sync.
    Batch {
        proposals: Vec<Proposal>,
    },
}

/// What applying a command did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    Resources {
        changes: Vec<ResourceChange>,
    },
    Call {
        call_id: CallId,
        state: CallState,
    },
    /// A proposal whose idempotency key and arguments match an earlier call: that call's id.
    Existing {
        call_id: CallId,
        state: CallState,
    },
    Placed {
        tenant: String,
        home: NodeId,
        epoch: u64,
    },
    Purged {
        calls: usize,
        requests: usize,
    },
    Admitted {
        node: NodeId,
    },
    ToolsetLoaded {
        toolset: String,
        include_write_tools: bool,
    },
    /// How many of a `Notified`'s notices were new marks.
    Notified {
        marked: usize,
    },
    /// What a Raft entry that carries no command (a blank or a membership change) answers.
    Nothing,
    /// One answer per proposal of a batch, in order.
    Batch {
        results: Vec<Result<Response, ApplyError>>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceChange {
    pub key: ResourceKey,
    pub change: Change,
    pub generation: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Created,
    Updated,
    Unchanged,
    Deleted,
}

impl Command {
    /// The checks made before a command is proposed. Apply does not repeat them: a node running
    /// newer validation code (a new secret pattern, a schema draft) must never reach another
    /// verdict on a committed entry than the node that proposed it.
    pub fn validate(&self) -> Result<(), ApplyError> {
        match self {
            Command::Put { resources } => {
                if resources.is_empty() {
                    return Err(ApplyError::Refused {
                        reason: "nothing to put".into(),
                    });
                }
                for resource in resources {
                    let problems = resource.validate();
                    if !problems.is_empty() {
                        return Err(ApplyError::Invalid {
                            key: resource.key(),
                            problems,
                        });
                    }
                }
                Ok(())
            }
            Command::Delete { keys } if keys.is_empty() => Err(ApplyError::Refused {
                reason: "nothing to delete".into(),
            }),
            Command::Propose { call } => {
                if canonical::sha256_hex(call.arguments.as_bytes()) != call.args_sha256 {
                    return Err(ApplyError::Refused {
                        reason: "args_sha256 is not the digest of the arguments".into(),
                    });
                }
                Ok(())
            }
            Command::Complete { outcome, .. } | Command::Resolve { outcome, .. } => {
                match outcome.size_problem() {
                    Some(problem) => Err(ApplyError::Refused { reason: problem }),
                    None => Ok(()),
                }
            }
            Command::Delete { .. }
            | Command::Approve { .. }
            | Command::Reject { .. }
            | Command::Cancel { .. }
            | Command::Expire { .. }
            | Command::Claim { .. }
            | Command::MarkUnknown { .. }
            | Command::Place { .. }
            | Command::StartMove { .. }
            | Command::Purge { .. }
            | Command::AdmitNode { .. }
            | Command::LoadToolset { .. } => Ok(()),
            Command::Notified { notices, .. } if notices.is_empty() => Err(ApplyError::Refused {
                reason: "a notified mark needs at least one notice".into(),
            }),
            Command::Notified { notices, .. } if notices.len() > MAX_NOTICES => {
                Err(ApplyError::Refused {
                    reason: format!("at most {MAX_NOTICES} notices in one mark"),
                })
            }
            Command::Notified { .. } => Ok(()),
            Command::Batch { proposals } => {
                if proposals.is_empty() {
                    return Err(ApplyError::Refused {
                        reason: "an empty batch".into(),
                    });
                }
                for p in proposals {
                    if matches!(p.command, Command::Batch { .. }) {
                        return Err(ApplyError::Refused {
                            reason: "batches do not nest".into(),
                        });
                    }
                    p.command.validate()?;
                }
                Ok(())
            }
        }
    }
}
