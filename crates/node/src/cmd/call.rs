//! `gatehouse call`: calls a tool through the gateway, and with `--wait` follows a call that
//! went through approval until it ends.

use super::client::{Remote, RemoteArgs};
use super::client::{connect, explain};
use super::{OutputArgs, when};
use crate::exit::Exit;
use crate::exit::Usage;
use clap::Args;
use gatehouse_fronts::services::json::{embedded, mode_name, state_name};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::gateway_service_client::GatewayServiceClient;
use std::time::Duration;

const POLL_EVERY: Duration = Duration::from_millis(200);

#[derive(Debug, Args)]
pub struct CallArgs {
    /// The namespaced tool, `upstream.tool`.
    pub tool: String,
    /// The tenant the call is made for.
    #[arg(long)]
    pub tenant: String,
    /// The arguments, a JSON object.
    #[arg(long = "args", value_name = "JSON", default_value = "{}")]
    pub arguments: String,
    /// Makes the call safe to retry: a repeat with the same key and arguments returns the first
    /// call's outcome.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the call for up to this many seconds until it ends, printing each change of state.
    #[arg(long, value_name = "SECONDS")]
    pub wait: Option<f64>,
    #[command(flatten)]
    pub remote: RemoteArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

pub async fn run(remote: &Remote, args: CallArgs) -> anyhow::Result<Exit> {
    let wait = match args.wait {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(Usage("--wait takes a number of seconds, 0 or more".into()).into());
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let (channel, bearer) = connect(remote).await?;
    let mut gateway = GatewayServiceClient::with_interceptor(channel, bearer);
    let started = tokio::time::Instant::now();
    let mut envelope = gateway
        .call_tool(pb::CallToolRequest {
            tenant: args.tenant,
            tool: args.tool,
            arguments_json: args.arguments,
            idempotency_key: args.idempotency_key,
        })
        .await
        .map_err(explain)?
        .into_inner()
        .envelope
        .unwrap_or_default();
    let text = remote.output.is_text();
    if text {
        println!("{} {}", envelope.call_id, state_name(envelope.state));
    }
    if let Some(wait) = wait {
        let deadline = started + wait;
        while !finished(envelope.state) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL_EVERY.min(deadline - tokio::time::Instant::now())).await;
            let next = gateway
                .get_call(pb::GetCallRequest {
                    call_id: envelope.call_id.clone(),
                })
                .await
                .map_err(explain)?
                .into_inner()
                .envelope
                .unwrap_or_default();
            if next.state != envelope.state {
                // In JSON mode stdout holds the envelope only; the story goes to stderr.
                let line = format!("{} {}", next.call_id, state_name(next.state));
                if text {
                    println!("{line}");
                } else {
                    eprintln!("{line}");
                }
            }
            envelope = next;
        }
    }
    if text {
        print_outcome(&envelope);
    } else {
        remote.output.print_one(&envelope_json(&envelope));
    }
    if let Some(wait) = wait.filter(|_| !finished(envelope.state)) {
        eprintln!(
            "{} is still {} after waiting {:.1}s",
            envelope.call_id,
            state_name(envelope.state),
            wait.as_secs_f64()
        );
    }
    Ok(exit_for(envelope.state))
}

/// Succeeded is done; an end without success is a failure; a call that has not ended is
/// pending; an unknown outcome has a code of its own, for it needs a person.
fn exit_for(state: i32) -> Exit {
    match pb::CallState::try_from(state).unwrap_or_default() {
        pb::CallState::Succeeded => Exit::Done,
        pb::CallState::Failed
        | pb::CallState::Rejected
        | pb::CallState::Cancelled
        | pb::CallState::Expired
        | pb::CallState::Unspecified => Exit::Failed,
        pb::CallState::Pending | pb::CallState::Approved | pb::CallState::Executing => {
            Exit::Pending
        }
        pb::CallState::OutcomeUnknown => Exit::OutcomeUnknown,
    }
}

fn finished(state: i32) -> bool {
    matches!(
        pb::CallState::try_from(state),
        Ok(pb::CallState::Succeeded
            | pb::CallState::Failed
            | pb::CallState::Rejected
            | pb::CallState::Cancelled
            | pb::CallState::Expired)
    )
}

fn print_outcome(envelope: &pb::CallEnvelope) {
    if let Some(result) = &envelope.result_json {
        println!("{result}");
    }
    if let Some(error) = &envelope.error {
        eprintln!("error: {error}");
    }
    if let Some(at) = envelope.expires_at_unix_ms {
        println!(
            "expires {} if nobody acts; follow it with --wait",
            when(at as u64)
        );
    }
}

/// The envelope as JSON; a result that is JSON is embedded as JSON, not as a string.
fn envelope_json(envelope: &pb::CallEnvelope) -> serde_json::Value {
    let result = envelope.result_json.as_deref().map(embedded);
    serde_json::json!({
        "call_id": envelope.call_id,
        "state": state_name(envelope.state),
        "effective_mode": mode_name(envelope.effective_mode),
        "policy_decision_id": envelope.policy_decision_id,
        "trace_id": envelope.trace_id,
        "result": result,
        "is_error": envelope.is_error,
        "error": envelope.error,
        "expires_at_unix_ms": envelope.expires_at_unix_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_modes_read_as_words() {
        assert_eq!(
            state_name(pb::CallState::OutcomeUnknown as i32),
            "outcome_unknown"
        );
        assert_eq!(
            mode_name(pb::ApprovalMode::LocalWrite as i32),
            "local_write"
        );
        assert!(finished(pb::CallState::Expired as i32));
        assert!(!finished(pb::CallState::OutcomeUnknown as i32));
    }

    #[test]
    fn a_script_tells_the_ends_of_a_call_apart() {
        use pb::CallState as S;
        let exits = [
            (S::Succeeded, Exit::Done),
            (S::Rejected, Exit::Failed),
            (S::Failed, Exit::Failed),
            (S::Expired, Exit::Failed),
            (S::Pending, Exit::Pending),
            (S::Executing, Exit::Pending),
            (S::OutcomeUnknown, Exit::OutcomeUnknown),
        ];
        for (state, exit) in exits {
            assert_eq!(exit_for(state as i32), exit, "{state:?}");
        }
    }

    #[test]
    fn a_json_result_is_embedded_as_json() {
        let envelope = pb::CallEnvelope {
            call_id: "call_1".into(),
            state: pb::CallState::Succeeded as i32,
            result_json: Some(r#"{"isError":false}"#.into()),
            ..Default::default()
        };
        let json = envelope_json(&envelope);
        assert_eq!(json["result"]["isError"], serde_json::json!(false));
        assert_eq!(json["state"], "succeeded");
    }
}
