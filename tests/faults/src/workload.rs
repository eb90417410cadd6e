//! The clients, concurrent for the whole campaign, each recording every operation it makes:
//! registry writes and linearizable reads of shared registers, agents proposing destructive
//! calls over gRPC, MCP and A2A under idempotency keys (retrying an unknown outcome with the
//! same key, and cancelling some), and an approver pair deciding what waits (two approvals each, or a rejection).

use crate::client::{Channels, Recorder, outcome_of};
use crate::fronts;
use crate::history::{Decision, OpKind, Outcome};
use crate::setup::{self, AGENT, CAROL, DAVE, TENANT, TOOL};
use gatehouse_proto::v1 as pb;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Most operations one client makes, whatever the campaign's length.
const MAX_OPS: usize = 100_000;
/// How often an agent tries one intent before it gives up on it.
const ATTEMPTS: usize = 5;

/// What every client shares.
#[derive(Debug, Clone)]
pub struct Shared {
    pub channels: Channels,
    pub recorder: Recorder,
    pub admin: String,
    pub stop: Arc<AtomicBool>,
    values: Arc<AtomicU64>,
}

impl Shared {
    pub fn new(channels: Channels, recorder: Recorder, admin: String) -> Shared {
        Shared {
            channels,
            recorder,
            admin,
            stop: Arc::default(),
            values: Arc::default(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn any_node(&self, rng: &mut StdRng) -> u64 {
        let ids = self.channels.ids();
        ids[rng.random_range(0..ids.len())]
    }
}

async fn pause(rng: &mut StdRng, from_ms: u64, to_ms: u64) {
    tokio::time::sleep(Duration::from_millis(rng.random_range(from_ms..to_ms))).await;
}

/// Writes and linearizable reads of the shared registers, to random nodes.
pub async fn registers(client: usize, seed: u64, shared: Shared) {
    let mut rng = StdRng::seed_from_u64(seed);
    let rec = &shared.recorder;
    for _ in 0..MAX_OPS {
        if shared.stopped() {
            return;
        }
        let node = shared.any_node(&mut rng);
        let key = setup::register(rng.random_range(0..setup::REGISTERS));
        let mut registry = shared.channels.registry(node, &shared.admin);
        let invoke = rec.now();
        if rng.random_bool(0.5) {
            let value = shared.values.fetch_add(1, Ordering::Relaxed) + 1;
            let request = pb::ApplyRequest {
                resources: vec![setup::register_resource(&key, value)],
            };
            let outcome = match registry.apply(request).await {
                Ok(_) => Outcome::Ok,
                Err(status) => {
                    rec.note_error(&status);
                    outcome_of(&status)
                }
            };
            rec.record(client, node, invoke, outcome, OpKind::Write { key, value });
        } else {
            let request = pb::GetResourceRequest {
                key: Some(setup::key_of(&key)),
                linearizable: true,
            };
            let (outcome, value) = match registry.get(request).await {
                Ok(found) => {
                    let value = found
                        .into_inner()
                        .resource
                        .as_ref()
                        .and_then(setup::register_value);
                    (Outcome::Ok, value)
                }
                Err(status) if status.code() == tonic::Code::NotFound => (Outcome::Ok, None),
                Err(status) => {
                    rec.note_error(&status);
                    (outcome_of(&status), None)
                }
            };
            rec.record(client, node, invoke, outcome, OpKind::Read { key, value });
        }
        pause(&mut rng, 5, 30).await;
    }
}

/// The protocol an agent proposes an intent over; every retry of the intent uses the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    Grpc,
    Mcp,
    A2a,
}

/// An agent proposing destructive calls, one intent at a time, over gRPC, MCP or A2A; an intent
/// whose outcome is unknown is tried again with the same idempotency key (over A2A, the same
/// message id). One call in ten is cancelled.
pub async fn agent(client: usize, seed: u64, shared: Shared) {
    let mut rng = StdRng::seed_from_u64(seed);
    let rec = &shared.recorder;
    for n in 0..MAX_OPS {
        if shared.stopped() {
            return;
        }
        let logical = format!("c{client}-{n}");
        let front = match rng.random_range(0..4) {
            0 => Front::Mcp,
            1 => Front::A2a,
            _ => Front::Grpc,
        };
        let idempotency_key = match front {
            Front::A2a => format!("a2a:{logical}"),
            Front::Grpc | Front::Mcp => logical.clone(),
        };
        let arguments = serde_json::json!({"table": logical});
        for _ in 0..ATTEMPTS {
            let node = shared.any_node(&mut rng);
            let invoke = rec.now();
            let (outcome, call_id) = match front {
                Front::Grpc => grpc(&shared, node, &arguments, &logical).await,
                Front::Mcp => {
                    let http = shared.channels.http(node);
                    fronts::mcp(&http, &logical, arguments.clone()).await
                }
                Front::A2a => {
                    let http = shared.channels.http(node);
                    fronts::a2a(&http, &logical, arguments.clone()).await
                }
            };
            let kind = OpKind::Propose {
                logical: logical.clone(),
                idempotency_key: idempotency_key.clone(),
                call_id: call_id.clone(),
            };
            rec.record(client, node, invoke, outcome, kind);
            match (outcome, call_id) {
                (Outcome::Ok, Some(call_id)) => {
                    if rng.random_bool(0.1) {
                        decide(
                            &shared,
                            client,
                            &mut rng,
                            AGENT,
                            &call_id,
                            Decision::Cancel,
                            "",
                        )
                        .await;
                    }
                    break;
                }
                (Outcome::Unknown, _) if !shared.stopped() => pause(&mut rng, 50, 200).await,
                _ => break,
            }
        }
        pause(&mut rng, 20, 120).await;
    }
}

/// `GatewayService.CallTool` under the idempotency key `key`.
async fn grpc(
    shared: &Shared,
    node: u64,
    arguments: &serde_json::Value,
    key: &str,
) -> fronts::Proposed {
    let mut gateway = shared.channels.gateway(node, AGENT);
    let request = pb::CallToolRequest {
        tenant: TENANT.into(),
        tool: TOOL.into(),
        arguments_json: arguments.to_string(),
        idempotency_key: Some(key.to_owned()),
    };
    match gateway.call_tool(request).await {
        Ok(reply) => (Outcome::Ok, reply.into_inner().envelope.map(|e| e.call_id)),
        Err(status) => {
            shared.recorder.note_error(&status);
            (outcome_of(&status), None)
        }
    }
}

/// Two approvers taking turns over what waits: each call gets carol's and dave's approval, or,
/// one time in ten, carol's rejection.
pub async fn approvers(client: usize, seed: u64, shared: Shared) {
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..MAX_OPS {
        if shared.stopped() {
            return;
        }
        let node = shared.any_node(&mut rng);
        let mut approvals = shared.channels.approvals(node, CAROL);
        let request = pb::ListCallsRequest {
            tenant: TENANT.into(),
            state: pb::CallState::Pending as i32,
            page_size: 50,
            ..Default::default()
        };
        let pending = match approvals.list_pending(request).await {
            Ok(list) => list.into_inner().calls,
            Err(_) => Vec::new(),
        };
        for call in pending {
            if shared.stopped() {
                return;
            }
            let approved_by = |key: &str| {
                call.approvals
                    .iter()
                    .any(|a| a.principal == principal_of(key))
            };
            if rng.random_bool(0.1) {
                decide(
                    &shared,
                    client,
                    &mut rng,
                    CAROL,
                    &call.call_id,
                    Decision::Reject,
                    "",
                )
                .await;
                continue;
            }
            for key in [CAROL, DAVE] {
                if !approved_by(key) {
                    decide(
                        &shared,
                        client,
                        &mut rng,
                        key,
                        &call.call_id,
                        Decision::Approve,
                        &call.args_sha256,
                    )
                    .await;
                }
            }
        }
        pause(&mut rng, 50, 150).await;
    }
}

fn principal_of(key: &str) -> &'static str {
    match key {
        CAROL => "carol",
        DAVE => "dave",
        _ => "agent",
    }
}

async fn decide(
    shared: &Shared,
    client: usize,
    rng: &mut StdRng,
    key: &str,
    call_id: &str,
    decision: Decision,
    args_sha256: &str,
) {
    let rec = &shared.recorder;
    let node = shared.any_node(rng);
    let mut approvals = shared.channels.approvals(node, key);
    let invoke = rec.now();
    let reason = "fault campaign".to_owned();
    let answer = match decision {
        Decision::Approve => approvals
            .approve(pb::ApproveCallRequest {
                call_id: call_id.into(),
                args_sha256: args_sha256.into(),
                reason,
            })
            .await
            .map(drop),
        Decision::Reject => approvals
            .reject(pb::RejectCallRequest {
                call_id: call_id.into(),
                reason,
            })
            .await
            .map(drop),
        Decision::Cancel => approvals
            .cancel(pb::CancelCallRequest {
                call_id: call_id.into(),
                reason,
            })
            .await
            .map(drop),
    };
    let outcome = match answer {
        Ok(()) => Outcome::Ok,
        Err(status) => {
            rec.note_error(&status);
            outcome_of(&status)
        }
    };
    let kind = OpKind::Decide {
        call_id: call_id.into(),
        decision,
    };
    rec.record(client, node, invoke, outcome, kind);
}
