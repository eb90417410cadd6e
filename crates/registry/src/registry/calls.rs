//! The call lifecycle: DESIGN's propose, approve, execute table, each row a method that checks
//! its guard and either moves the call or refuses without touching anything.

use super::Registry;
use crate::call::{Call, CallId, CallState, Claim, NewCall, NodeId, Outcome, Timestamp, Verdict};
use crate::command::Response;
use crate::error::ApplyError;
use crate::identity::{self, Owner};
use crate::resource::NotifyEvent;
use crate::resource::Role;

impl Registry {
    pub(super) fn propose(
        &mut self,
        spec: &NewCall,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        if self.state.calls.contains_key(&spec.id) {
            return Err(ApplyError::AlreadyExists {
                what: format!("call {}", spec.id),
            });
        }
        if !self.tenant_exists(&spec.tenant) {
            return Err(ApplyError::NotFound {
                what: format!("tenant {}", spec.tenant),
            });
        }
        if spec.effective_mode > spec.highest_mode {
            return Err(ApplyError::Refused {
                reason: format!(
                    "effective mode {} is above the tool's maximum {}",
                    spec.effective_mode, spec.highest_mode
                ),
            });
        }
        if spec.effective_mode.needs_approval() && spec.required_approvals == 0 {
            return Err(ApplyError::Refused {
                reason: format!("a {} call needs at least one approval", spec.effective_mode),
            });
        }
        if let Some(key) = &spec.idempotency_key {
            let owner = Owner {
                principal: &spec.chain.agent,
                end_user: spec.chain.end_user.as_deref(),
            };
            let slot = (spec.tenant.clone(), owner.slot(), key.clone());
            if let Some(earlier) = self.state.idempotency.get(&slot) {
                let call = &self.state.calls[earlier];
                if call.spec.tool != spec.tool || call.spec.args_sha256 != spec.args_sha256 {
                    return Err(ApplyError::IdempotencyConflict {
                        key: key.clone(),
                        call: earlier.clone(),
                    });
                }
                return Ok(Response::Existing {
                    call_id: earlier.clone(),
                    state: call.state,
                });
            }
            self.state.idempotency.insert(slot, spec.id.clone());
        }
        let call = Call::new(spec.clone(), at);
        let state = call.state;
        self.state.calls.insert(spec.id.clone(), call);
        self.calls_by_tenant
            .entry(spec.tenant.clone())
            .or_default()
            .insert(spec.id.clone());
        Ok(Response::Call {
            call_id: spec.id.clone(),
            state,
        })
    }

    pub(super) fn approve(
        &mut self,
        id: &CallId,
        approver: &str,
        user: Option<&str>,
        args_sha256: &str,
        note: &str,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Pending], "approved")?;
        let person = self.check_approver(call, approver, user)?;
        if call.spec.chain.includes(approver, &person) {
            return Err(ApplyError::InChain {
                principal: approver.to_owned(),
                call: id.clone(),
            });
        }
        if call.spec.args_sha256 != args_sha256 {
            return Err(ApplyError::ArgsMismatch {
                call: id.clone(),
                given: args_sha256.to_owned(),
                actual: call.spec.args_sha256.clone(),
            });
        }
        if call.approvals.iter().any(|v| v.person() == person) {
            return Err(ApplyError::AlreadyDecided {
                principal: person,
                call: id.clone(),
            });
        }
        if at >= call.spec.expires_at {
            return Err(ApplyError::DeadlinePassed {
                call: id.clone(),
                deadline: call.spec.expires_at,
            });
        }
        let call = self.call_mut(id);
        call.approvals.push(Verdict {
            principal: approver.to_owned(),
            person: Some(person),
            at,
            note: note.to_owned(),
        });
        if call.approvals.len() >= call.spec.required_approvals as usize {
            call.state = CallState::Approved;
            call.approval_valid_until = Some(at + call.spec.approval_valid_ms);
        }
        Ok(touched(call, at))
    }

    pub(super) fn reject(
        &mut self,
        id: &CallId,
        approver: &str,
        user: Option<&str>,
        reason: &str,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Pending], "rejected")?;
        let person = self.check_approver(call, approver, user)?;
        let call = self.call_mut(id);
        call.rejections.push(Verdict {
            principal: approver.to_owned(),
            person: Some(person),
            at,
            note: reason.to_owned(),
        });
        call.state = CallState::Rejected;
        Ok(touched(call, at))
    }

    pub(super) fn cancel(
        &mut self,
        id: &CallId,
        principal: &str,
        user: Option<&str>,
        reason: &str,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Pending], "cancelled")?;
        let chain = &call.spec.chain;
        let in_chain = chain.agent == principal || chain.a2a_peer.as_deref() == Some(principal);
        let same_user = user.is_none_or(|u| chain.end_user.as_deref() == Some(u));
        if !(in_chain && same_user) {
            return Err(ApplyError::NotInChain {
                principal: principal.to_owned(),
                call: id.clone(),
            });
        }
        let call = self.call_mut(id);
        call.state = CallState::Cancelled;
        call.note = Some(format!("cancelled by {principal}: {reason}"));
        Ok(touched(call, at))
    }

    pub(super) fn expire(
        &mut self,
        id: &CallId,
        node: NodeId,
        epoch: u64,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Pending, CallState::Approved], "expired")?;
        self.check_home(&call.spec.tenant, node, epoch)?;
        let deadline = match call.state {
            CallState::Approved => call.approval_valid_until.unwrap_or(call.spec.expires_at),
            _ => call.spec.expires_at,
        };
        if at < deadline {
            return Err(ApplyError::NotExpired { call: id.clone() });
        }
        let call = self.call_mut(id);
        call.state = CallState::Expired;
        Ok(touched(call, at))
    }

    /// Claims an approved call for execution. A retry-safe call left executing under an older
    /// epoch may be claimed again by the new home; nothing else is ever claimed twice.
    pub(super) fn claim(
        &mut self,
        id: &CallId,
        node: NodeId,
        epoch: u64,
        claim_id: &str,
        replaces_unsent: Option<&str>,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Approved, CallState::Executing], "claimed")?;
        if call.state == CallState::Executing {
            let lost = call
                .claim
                .as_ref()
                .is_some_and(|c| claim_lost(c, node, epoch));
            // Only the claimant knows whether it sent the request, so only it may say it did not.
            let unsent = call
                .claim
                .as_ref()
                .is_some_and(|c| c.node == node && replaces_unsent == Some(c.claim_id.as_str()));
            if !((call.spec.retry_safe && lost) || unsent) {
                return Err(ApplyError::WrongState {
                    call: id.clone(),
                    state: call.state,
                    action: "claimed again".into(),
                });
            }
        }
        self.check_home(&call.spec.tenant, node, epoch)?;
        // A home whose tenant is moving away starts nothing new; it may still take back a lost
        // claim of a retry-safe call, which the move is waiting for.
        let moving_to = self.placement(&call.spec.tenant).and_then(|p| p.moving_to);
        if let Some(to) = moving_to.filter(|_| call.state == CallState::Approved) {
            return Err(ApplyError::Refused {
                reason: format!(
                    "tenant {} is moving to node {to}: its home claims nothing more",
                    call.spec.tenant
                ),
            });
        }
        if let Some(deadline) = call.approval_valid_until.filter(|d| at >= *d) {
            return Err(ApplyError::DeadlinePassed {
                call: id.clone(),
                deadline,
            });
        }
        let tool_generation = self
            .tool(&call.spec.tenant, &call.spec.tool)
            .map_or(0, |(_, generation)| generation);
        let changed = tool_generation != call.spec.tool_generation
            || self.policy_generation(&call.spec.tenant) != call.spec.policy_generation;
        let call = self.call_mut(id);
        if changed {
            call.state = CallState::Failed;
            call.note = Some(
                "policy changed: the tool or the tenant's policy changed after approval".to_owned(),
            );
        } else {
            call.state = CallState::Executing;
            call.claim = Some(Claim {
                claim_id: claim_id.to_owned(),
                node,
                epoch,
                at,
            });
        }
        Ok(touched(call, at))
    }

    /// The claimant reports; it is matched by claim id, whatever the epoch is now.
    pub(super) fn complete(
        &mut self,
        id: &CallId,
        claim_id: &str,
        outcome: &Outcome,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(
            id,
            &[CallState::Executing, CallState::OutcomeUnknown],
            "completed",
        )?;
        if call.claim.as_ref().is_none_or(|c| c.claim_id != claim_id) {
            return Err(ApplyError::ClaimMismatch {
                call: id.clone(),
                given: claim_id.to_owned(),
            });
        }
        let call = self.call_mut(id);
        call.state = outcome.state();
        call.outcome = Some(outcome.clone());
        Ok(touched(call, at))
    }

    /// The home found this call executing under a claim that is lost (taken under an older
    /// epoch, or by this very node before it restarted), and the tool is not safe to run again:
    /// nobody knows whether it ran.
    pub(super) fn mark_unknown(
        &mut self,
        id: &CallId,
        node: NodeId,
        epoch: u64,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::Executing], "marked unknown")?;
        self.check_home(&call.spec.tenant, node, epoch)?;
        if call
            .claim
            .as_ref()
            .is_some_and(|c| !claim_lost(c, node, epoch))
        {
            return Err(ApplyError::Refused {
                reason: format!("call {id} is claimed by another node under epoch {epoch}"),
            });
        }
        let call = self.call_mut(id);
        call.state = CallState::OutcomeUnknown;
        Ok(touched(call, at))
    }

    pub(super) fn resolve_unknown(
        &mut self,
        id: &CallId,
        approver: &str,
        user: Option<&str>,
        outcome: &Outcome,
        note: &str,
        at: Timestamp,
    ) -> Result<Response, ApplyError> {
        let call = self.call_in(id, &[CallState::OutcomeUnknown], "resolved")?;
        // Saying what a call did is evidence about it: nobody of its chain may give it.
        let person = self.check_approver(call, approver, user)?;
        if call.spec.chain.includes(approver, &person) {
            return Err(ApplyError::InChain {
                principal: approver.to_owned(),
                call: id.clone(),
            });
        }
        if note.trim().is_empty() {
            return Err(ApplyError::Refused {
                reason: "resolving needs a note saying what really happened".to_owned(),
            });
        }
        let call = self.call_mut(id);
        call.state = outcome.state();
        call.outcome = Some(outcome.clone());
        call.note = Some(format!("resolved by {approver}: {note}"));
        Ok(touched(call, at))
    }

    pub(super) fn purge(&mut self, before: Timestamp) -> Response {
        let old: Vec<CallId> = self
            .state
            .calls
            .values()
            .filter(|c| c.state.is_finished() && c.updated_at < before)
            .map(|c| c.spec.id.clone())
            .collect();
        for id in &old {
            if let Some(call) = self.state.calls.remove(id)
                && let Some(ids) = self.calls_by_tenant.get_mut(&call.spec.tenant)
            {
                ids.remove(id);
                if ids.is_empty() {
                    self.calls_by_tenant.remove(&call.spec.tenant);
                }
            }
        }
        for id in &old {
            self.state.notified.remove(id);
        }
        self.state.idempotency.retain(|_, id| !old.contains(id));
        let requests_before = self.state.requests.len();
        self.state.requests.retain(|_, r| r.at >= before);
        Response::Purged {
            calls: old.len(),
            requests: requests_before - self.state.requests.len(),
        }
    }

    /// Marks notices of a tenant's calls as given. Marks for calls that are gone (purged) or
    /// of another tenant are skipped: a mark never names what its tenant cannot see.
    pub(super) fn mark_notified(
        &mut self,
        tenant: &str,
        webhook: &str,
        notices: &[(CallId, NotifyEvent)],
    ) -> Response {
        let mut marked = 0;
        for (id, event) in notices {
            if self
                .state
                .calls
                .get(id)
                .is_none_or(|c| c.spec.tenant != tenant)
            {
                continue;
            }
            let marks = self.state.notified.entry(id.clone()).or_default();
            if marks.insert((webhook.to_owned(), *event)) {
                marked += 1;
            }
        }
        Response::Notified { marked }
    }

    fn call_in(
        &self,
        id: &CallId,
        states: &[CallState],
        action: &'static str,
    ) -> Result<&Call, ApplyError> {
        let call = self
            .state
            .calls
            .get(id)
            .ok_or_else(|| ApplyError::NotFound {
                what: format!("call {id}"),
            })?;
        if !states.contains(&call.state) {
            return Err(ApplyError::WrongState {
                call: id.clone(),
                state: call.state,
                action: action.into(),
            });
        }
        Ok(call)
    }

    fn call_mut(&mut self, id: &CallId) -> &mut Call {
        self.state.calls.get_mut(id).expect("checked by call_in")
    }

    /// The person deciding, if the principal is an approver of the call's tenant.
    fn check_approver(
        &self,
        call: &Call,
        approver: &str,
        user: Option<&str>,
    ) -> Result<String, ApplyError> {
        match self.principal(approver) {
            Some(spec) if spec.has_role(&call.spec.tenant, Role::Approver) => {
                Ok(identity::person(approver, spec, user))
            }
            _ => Err(ApplyError::NotApprover {
                principal: approver.to_owned(),
                tenant: call.spec.tenant.clone(),
            }),
        }
    }
}

/// Whether the home `node`, under the tenant's current `epoch`, may treat a claim as lost: it was
/// taken under an older epoch, or by this node itself (which only asks after a restart, when no
/// execution of it can be running here). A claim by another node under the current epoch is live.
fn claim_lost(claim: &Claim, node: NodeId, epoch: u64) -> bool {
    claim.epoch < epoch || claim.node == node
}

fn touched(call: &mut Call, at: Timestamp) -> Response {
    call.updated_at = at;
    Response::Call {
        call_id: call.spec.id.clone(),
        state: call.state,
    }
}
