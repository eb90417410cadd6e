//! Tools the gateway itself provides, for dev mode and tests: `echo` answers with its arguments
//! (or its `text` and the skill context it was sent), `sleep` (`{"ms": N}`) answers after N
//! milliseconds, `fail` answers with an error result, and `transfer` moves an amount between
//! demo accounts kept in a file under the node's data directory, outside the registry, logging
//! every execution so that a call run twice would show.
//!
//! The operator enables them per tenant (`gatehouse_cluster::grants`), and each tenant's state is its own:
//! `DATA_DIR/builtin/<tenant>/`.

use super::tool_result;
use gatehouse_actors::{ExecError, Execution, ToolOutput};
use gatehouse_cluster::grants::BuiltinTool;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The longest a `sleep` may ask for: long enough for any test, short enough that a typo cannot
/// park an execution for days.
const MAX_SLEEP: Duration = Duration::from_secs(600);

/// Where a tenant's built-in tools keep their state, under the node's directory for them.
pub fn tenant_dir(state_dir: &Path, tenant: &str) -> PathBuf {
    state_dir.join(tenant)
}

/// Runs `tool` for the execution's tenant; `state_dir` is that tenant's own directory.
pub(super) async fn run(
    tool: BuiltinTool,
    execution: Execution,
    state_dir: Option<PathBuf>,
) -> Result<ToolOutput, ExecError> {
    let arguments: Value = serde_json::from_str(&execution.arguments).map_err(|e| ExecError {
        message: format!("the arguments are not JSON: {e}"),
    })?;
    match tool {
        BuiltinTool::Echo => {
            Ok(match arguments.get("text").and_then(Value::as_str) {
                Some(text) => {
                    let answer = json!({"text": text, "skill_context": execution.skill_context});
                    let mut output = tool_result(text.to_owned(), Some(answer), false);
                    if let Some(context) = &execution.skill_context {
                        let mut result: Value = serde_json::from_str(&output.result_json)
                            .expect("a tool result is JSON");
                        result["content"]
                        .as_array_mut()
                        .expect("a tool result has content")
                        .push(json!({"type": "text", "text": format!("skill context:\n{context}")}));
                        output.result_json = result.to_string();
                    }
                    output
                }
                None => tool_result(execution.arguments, Some(arguments), false),
            })
        }
        BuiltinTool::Transfer => {
            let Some(dir) = state_dir else {
                return Err(ExecError {
                    message: "this node keeps no state for built-in tools".into(),
                });
            };
            transfer(&dir, &execution, &arguments).await
        }
        BuiltinTool::Sleep => {
            let Some(ms) = arguments.get("ms").and_then(Value::as_u64) else {
                return Ok(tool_result(
                    "sleep needs {\"ms\": N}, N a whole number of milliseconds".into(),
                    None,
                    true,
                ));
            };
            let slept = Duration::from_millis(ms).min(MAX_SLEEP);
            tokio::time::sleep(slept).await;
            let answer = serde_json::json!({"slept_ms": slept.as_millis() as u64});
            Ok(tool_result(answer.to_string(), Some(answer), false))
        }
        BuiltinTool::Fail => {
            let message = arguments
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the fail tool failed, as asked");
            Ok(tool_result(message.to_owned(), None, true))
        }
    }
}

/// The demo accounts' file: balances, and every transfer executed, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub balances: BTreeMap<String, i64>,
    pub transfers: Vec<Transfer>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    pub call_id: String,
    pub from: String,
    pub to: String,
    pub amount: i64,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            balances: ["alice", "bob", "carol"]
                .into_iter()
                .map(|a| (a.to_owned(), 1_000))
                .collect(),
            transfers: Vec::new(),
        }
    }
}

/// Where the ledger lives in a tenant's state directory for built-in tools
/// ([`tenant_dir`]).
pub fn ledger_path(tenant_dir: &Path) -> PathBuf {
    tenant_dir.join("demo-ledger.json")
}

/// One transfer at a time per process: read, change, write the ledger whole.
static LEDGER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn transfer(
    dir: &Path,
    execution: &Execution,
    arguments: &Value,
) -> Result<ToolOutput, ExecError> {
    let from = arguments.get("from").and_then(Value::as_str);
    let to = arguments.get("to").and_then(Value::as_str);
    let amount = arguments.get("amount").and_then(Value::as_i64);
    let (Some(from), Some(to), Some(amount)) = (from, to, amount) else {
        return Ok(tool_result(
            "transfer needs {\"from\": account, \"to\": account, \"amount\": N}".into(),
            None,
            true,
        ));
    };
    let _one_at_a_time = LEDGER.lock().await;
    let io = |e: std::io::Error| ExecError {
        message: format!("the demo ledger in {}: {e}", dir.display()),
    };
    let path = ledger_path(dir);
    let mut ledger = match tokio::fs::read(&path).await {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| ExecError {
            message: format!("the demo ledger {} is damaged: {e}", path.display()),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ledger::default(),
        Err(e) => return Err(io(e)),
    };
    let refusal = if amount <= 0 {
        Some("the amount must be above 0".to_owned())
    } else if from == to {
        Some("from and to are the same account".to_owned())
    } else {
        match (ledger.balances.get(from), ledger.balances.contains_key(to)) {
            (None, _) => Some(format!("no account {from}")),
            (_, false) => Some(format!("no account {to}")),
            (Some(balance), _) if *balance < amount => {
                Some(format!("{from} has {balance}, less than {amount}"))
            }
            _ => None,
        }
    };
    if let Some(refusal) = refusal {
        return Ok(tool_result(refusal, None, true));
    }
    *ledger.balances.entry(from.to_owned()).or_default() -= amount;
    *ledger.balances.entry(to.to_owned()).or_default() += amount;
    ledger.transfers.push(Transfer {
        call_id: execution.call_id.to_string(),
        from: from.to_owned(),
        to: to.to_owned(),
        amount,
    });
    tokio::fs::create_dir_all(dir).await.map_err(io)?;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(&ledger).expect("the ledger serialises");
    tokio::fs::write(&tmp, bytes).await.map_err(io)?;
    tokio::fs::rename(&tmp, &path).await.map_err(io)?;
    let answer = json!({
        "moved": amount,
        "from": from,
        "to": to,
        "balances": ledger.balances,
    });
    Ok(tool_result(
        format!("moved {amount} from {from} to {to}"),
        Some(answer),
        false,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_registry::CallId;

    fn execution(id: u128, tool: &str, arguments: Value, context: Option<&str>) -> Execution {
        Execution {
            call_id: CallId::from_random(id),
            claim_id: None,
            tenant: "demo".into(),
            tool: format!("demo.{tool}"),
            arguments: arguments.to_string(),
            idempotency_key: String::new(),
            skill_context: context.map(str::to_owned),
            end_user: None,
            retry_safe: false,
            trace_parent: None,
        }
    }

    fn structured(output: &ToolOutput) -> Value {
        serde_json::from_str::<Value>(&output.result_json).unwrap()["structuredContent"].clone()
    }

    #[tokio::test]
    async fn echo_answers_with_its_text_and_the_skill_context_it_was_sent() {
        let run_echo = |context| {
            run(
                BuiltinTool::Echo,
                execution(1, "echo", json!({"text": "hi"}), context),
                None,
            )
        };
        let with = run_echo(Some("Be brief.")).await.unwrap();
        assert_eq!(
            structured(&with),
            json!({"text": "hi", "skill_context": "Be brief."})
        );
        assert!(with.result_json.contains("skill context:\\nBe brief."));
        let without = run_echo(None).await.unwrap();
        assert_eq!(
            structured(&without),
            json!({"text": "hi", "skill_context": null})
        );
    }

    #[tokio::test]
    async fn transfers_move_money_once_per_execution_and_refuse_overdrafts() {
        let dir = tempfile::tempdir().unwrap();
        let send = |id, amount| {
            run(
                BuiltinTool::Transfer,
                execution(
                    id,
                    "transfer",
                    json!({"from": "alice", "to": "bob", "amount": amount}),
                    None,
                ),
                Some(dir.path().to_owned()),
            )
        };
        let first = send(1, 300).await.unwrap();
        assert!(!first.is_error);
        assert_eq!(structured(&first)["balances"]["alice"], 700);
        let overdraft = send(2, 701).await.unwrap();
        assert!(overdraft.is_error);
        // Every execution is logged, so the same call run twice would show as two lines.
        send(1, 300).await.unwrap();
        let ledger: Ledger =
            serde_json::from_slice(&std::fs::read(ledger_path(dir.path())).unwrap()).unwrap();
        assert_eq!(ledger.balances["alice"], 400);
        assert_eq!(ledger.balances["bob"], 1_600);
        let ids: Vec<_> = ledger.transfers.iter().map(|t| t.call_id.clone()).collect();
        assert_eq!(ids, [CallId::from_random(1).0, CallId::from_random(1).0]);
    }
}
