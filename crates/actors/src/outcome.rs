//! Turning an executor's answer into the outcome a `Complete` records.

use crate::ports::{ExecError, ToolOutput};
use gatehouse_registry::call::{MAX_RESULT_BYTES, Outcome};
use gatehouse_registry::canonical::sha256_hex;

/// What an execution's result becomes in the registry: the digest and length of the whole
/// output, and the output itself while it fits.
pub fn outcome_of(result: Result<ToolOutput, ExecError>) -> Outcome {
    match result {
        Ok(out) if !out.is_error => Outcome::Succeeded {
            output_sha256: sha256_hex(out.result_json.as_bytes()),
            output_len: out.result_json.len() as u64,
            result: (out.result_json.len() <= MAX_RESULT_BYTES).then_some(out.result_json),
        },
        Ok(out) => Outcome::Failed {
            error: bounded(format!("the tool reported an error: {}", out.result_json)),
        },
        Err(e) => Outcome::Failed {
            error: bounded(e.message),
        },
    }
}

fn bounded(mut text: String) -> String {
    if text.len() > MAX_RESULT_BYTES {
        let mut cut = MAX_RESULT_BYTES - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}
