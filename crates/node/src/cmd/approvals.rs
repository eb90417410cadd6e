//! `gatehouse approvals ...`: an approver's view of the queue: list, watch, read and decide.

use super::Output;
use super::client::Remote;
use super::client::{self, explain};
use crate::exit::Exit;
use clap::{Subcommand, ValueEnum};
use futures::StreamExt;
use gatehouse_fronts::services::convert::{approval_mode_to, call_state_to};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::approval_service_client::ApprovalServiceClient;
use gatehouse_registry::{ApprovalMode, CallState};
use std::collections::HashSet;
use std::time::Duration;

mod print;

use gatehouse_fronts::services::json::record_json;
use print::{decided, details, print_event, summary};

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List a tenant's calls that wait for someone (or those in one state).
    List {
        /// The tenant whose calls to list (you must be its approver or a cluster admin).
        #[arg(long)]
        tenant: String,
        /// Only calls of this tool (`upstream.tool`).
        #[arg(long)]
        tool: Option<String>,
        /// Only calls with this effective mode (read_only, local_write, network, delegated,
        /// destructive).
        #[arg(long, value_parser = named::<ApprovalMode>)]
        mode: Option<ApprovalMode>,
        /// Only calls in this state (pending, approved, executing, outcome_unknown, ...; default:
        /// every unfinished one).
        #[arg(long, value_parser = named::<CallState>)]
        state: Option<CallState>,
    },
    /// Print a tenant's call changes as they happen, one line each, until interrupted.
    Watch {
        /// The tenant whose calls to follow (you must be its approver or a cluster admin).
        #[arg(long)]
        tenant: String,
        /// The index of the last event already seen; 0 starts with the whole pending set.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// Show one call.
    Get {
        /// The call's id (`call_...`).
        id: String,
    },
    /// Approve a call. It shows the tool, the mode and the arguments and asks you to confirm;
    /// the approval is bound to the arguments you saw.
    Approve {
        /// The call's id (`call_...`).
        id: String,
        /// Why you approve; kept in the call's record and the audit log.
        #[arg(long)]
        reason: String,
        /// Approve without asking, only if the call still has exactly the arguments whose
        /// SHA-256 `approvals get` showed you.
        #[arg(long, value_name = "SHA256", conflicts_with = "yes")]
        args_sha256: Option<String>,
        /// Approve the arguments the call has now without asking (for scripts); what was
        /// approved is printed all the same.
        #[arg(long)]
        yes: bool,
    },
    /// Reject a call; one rejection is final.
    Reject {
        /// The call's id (`call_...`).
        id: String,
        /// Why you reject; the agent is told it, and it is kept in the call's record and the
        /// audit log.
        #[arg(long)]
        reason: String,
    },
    /// Withdraw a pending call (for a principal of the call's own chain).
    Cancel {
        /// The call's id (`call_...`).
        id: String,
        /// Why you withdraw it; kept in the call's record and the audit log.
        #[arg(long)]
        reason: String,
    },
    /// Settle an outcome-unknown call.
    Resolve {
        /// The call's id (`call_...`).
        id: String,
        /// What really happened at the upstream.
        #[arg(long, value_enum)]
        outcome: ResolveAs,
        /// What really happened, and how you know; kept in the call's record and the audit
        /// log. (`--note` is an older name for it.)
        #[arg(long, alias = "note")]
        reason: String,
    },
}

/// A registry enum by its snake_case name, as the registry's files spell it.
fn named<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| format!("{text:?} is not one of the names listed in --help"))
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ResolveAs {
    /// The upstream did what the call asked.
    Succeeded,
    /// The upstream did not do it.
    Failed,
}

type Client = ApprovalServiceClient<client::Authed>;

async fn connect(remote: &Remote) -> anyhow::Result<Client> {
    let (channel, bearer) = client::connect(remote).await?;
    Ok(ApprovalServiceClient::with_interceptor(channel, bearer))
}

pub async fn run(remote: &Remote, command: ApprovalsCommand) -> anyhow::Result<Exit> {
    let out = remote.output;
    match command {
        ApprovalsCommand::List {
            tenant,
            tool,
            mode,
            state,
        } => list(remote, tenant, tool, mode, state).await,
        ApprovalsCommand::Watch { tenant, from } => watch(remote, tenant, from).await,
        ApprovalsCommand::Get { id } => {
            let call = get(&mut connect(remote).await?, id).await?;
            match out {
                Output::Text => print!("{}", details(&call)),
                json => json.print_one(&record_json(&call)),
            }
            Ok(Exit::Done)
        }
        ApprovalsCommand::Approve {
            id,
            reason,
            args_sha256,
            yes,
        } => {
            let mut client = connect(remote).await?;
            let seen = get(&mut client, id.clone()).await?;
            let args_sha256 = match args_sha256 {
                Some(hash) => hash,
                None if yes => seen.args_sha256.clone(),
                None => confirm(&seen)?,
            };
            let answer = client
                .approve(pb::ApproveCallRequest {
                    call_id: id,
                    args_sha256: args_sha256.clone(),
                    reason,
                })
                .await
                .map_err(explain)?
                .into_inner();
            let call = answer.call.unwrap_or_default();
            if out.is_text() {
                println!(
                    "approved {} of tool {} (mode {}) with arguments {} (sha256 {args_sha256})",
                    call.call_id,
                    call.tool,
                    print::mode_name(call.effective_mode),
                    call.args_json,
                );
            }
            decided(out, &call, answer.log_index);
            Ok(Exit::Done)
        }
        ApprovalsCommand::Reject { id, reason } => {
            let answer = connect(remote)
                .await?
                .reject(pb::RejectCallRequest {
                    call_id: id,
                    reason,
                })
                .await
                .map_err(explain)?
                .into_inner();
            decided(out, &answer.call.unwrap_or_default(), answer.log_index);
            Ok(Exit::Done)
        }
        ApprovalsCommand::Cancel { id, reason } => {
            let answer = connect(remote)
                .await?
                .cancel(pb::CancelCallRequest {
                    call_id: id,
                    reason,
                })
                .await
                .map_err(explain)?
                .into_inner();
            decided(out, &answer.call.unwrap_or_default(), answer.log_index);
            Ok(Exit::Done)
        }
        ApprovalsCommand::Resolve {
            id,
            outcome,
            reason,
        } => {
            let outcome = match outcome {
                ResolveAs::Succeeded => pb::ResolveOutcome::Succeeded,
                ResolveAs::Failed => pb::ResolveOutcome::Failed,
            };
            let answer = connect(remote)
                .await?
                .resolve(pb::ResolveCallRequest {
                    call_id: id,
                    outcome: outcome as i32,
                    reason,
                })
                .await
                .map_err(explain)?
                .into_inner();
            decided(out, &answer.call.unwrap_or_default(), answer.log_index);
            Ok(Exit::Done)
        }
    }
}

/// Shows the call to the approver (on stderr, so `-o json` stays clean) and asks for a yes on
/// stdin: the arguments' hash it answers with is the one that was shown.
fn confirm(call: &pb::CallRecord) -> anyhow::Result<String> {
    use std::io::{BufRead, Write};
    let mut err = std::io::stderr().lock();
    write!(
        err,
        "{}\nApprove call {} of tool {} (mode {}) with the arguments above? [y/N] ",
        details(call),
        call.call_id,
        call.tool,
        print::mode_name(call.effective_mode),
    )?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(call.args_sha256.clone()),
        "" => anyhow::bail!(
            "not approved: no answer came. In a script, pass --args-sha256 with the hash \
             `approvals get {}` showed, or --yes",
            call.call_id
        ),
        _ => anyhow::bail!("not approved"),
    }
}

async fn get(client: &mut Client, call_id: String) -> anyhow::Result<pb::CallRecord> {
    Ok(client
        .get(pb::GetCallRecordRequest { call_id })
        .await
        .map_err(explain)?
        .into_inner()
        .call
        .unwrap_or_default())
}

async fn list(
    remote: &Remote,
    tenant: String,
    tool: Option<String>,
    mode: Option<ApprovalMode>,
    state: Option<CallState>,
) -> anyhow::Result<Exit> {
    let mut client = connect(remote).await?;
    let mut all = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_pending(pb::ListCallsRequest {
                tenant: tenant.clone(),
                state: state.map_or(pb::CallState::Unspecified, call_state_to) as i32,
                page_size: 1_000,
                page_token,
                tool: tool.clone().unwrap_or_default(),
                mode: mode.map_or(pb::ApprovalMode::Unspecified, approval_mode_to) as i32,
            })
            .await
            .map_err(explain)?
            .into_inner();
        all.extend(page.calls);
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    match remote.output {
        Output::Text => {
            all.iter().for_each(|call| println!("{}", summary(call)));
            println!("{} call(s)", all.len());
        }
        json => json.print_list(all.iter().map(record_json).collect()),
    }
    Ok(Exit::Done)
}

/// Where a watch resumes: after the last index whose events all arrived. One entry may change
/// several calls, and a stream can break between them; those already printed are skipped.
#[derive(Debug, Default)]
struct Position {
    complete: u64,
    partial: Option<(u64, HashSet<String>)>,
}

impl Position {
    /// Whether the event is new; it is counted as seen.
    fn take(&mut self, event: &pb::ApprovalEvent) -> bool {
        use pb::approval_event::Event;
        let call_id = match &event.event {
            Some(Event::Change(c)) => c.call.as_ref().map_or("", |c| c.call_id.as_str()),
            Some(Event::Resync(_)) | None => {
                self.complete = event.index;
                self.partial = None;
                return true;
            }
        };
        match &mut self.partial {
            Some((index, seen)) if *index == event.index => seen.insert(call_id.to_owned()),
            _ => {
                if let Some((index, _)) = self.partial.take() {
                    self.complete = index;
                }
                self.partial = Some((event.index, HashSet::from([call_id.to_owned()])));
                true
            }
        }
    }
}

/// Follows the tenant's changes; when the node goes away, resumes where it was.
async fn watch(remote: &Remote, tenant: String, from: u64) -> anyhow::Result<Exit> {
    let mut position = Position {
        complete: from,
        partial: None,
    };
    let mut followed = false;
    loop {
        let opened = async {
            let mut client = connect(remote).await?;
            let request = pb::WatchCallsRequest {
                tenant: tenant.clone(),
                from_index: position.complete,
            };
            anyhow::Ok(client.watch_pending(request).await.map_err(explain)?)
        };
        let why = match opened.await {
            Ok(response) => {
                followed = true;
                let mut events = response.into_inner();
                loop {
                    match events.next().await {
                        Some(Ok(event)) => {
                            if position.take(&event) {
                                print_event(remote.output, &event);
                            }
                        }
                        Some(Err(status)) if status.code() == tonic::Code::Unavailable => {
                            break status.message().to_owned();
                        }
                        Some(Err(status)) => return Err(explain(status)),
                        None => break "the stream ended".to_owned(),
                    }
                }
            }
            // A refusal at the start is final; a node going away later is worth a retry.
            Err(e) if !followed => return Err(e),
            Err(e) => format!("{e:#}"),
        };
        eprintln!(
            "watch interrupted ({why}); resuming after index {}",
            position.complete
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
