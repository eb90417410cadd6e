//! How the command line ends: the exit codes scripts may rely on, and an error said once, as a
//! sentence, whatever chain of causes produced it.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | done, and it failed: a call failed, was rejected, cancelled or expired; a check found problems; an error of no other kind |
//! | 2 | usage: the command line itself is wrong |
//! | 3 | refused by the cluster: not allowed, not found, invalid, or not in a state to do it |
//! | 4 | unreachable: no node answered, or it was unavailable or too slow |
//! | 5 | pending: the call waits for approval (or did not end within `--wait`) |
//! | 6 | outcome unknown: the call may or may not have run; a person must resolve it |

use std::process::ExitCode;

/// What a command's end means to a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Done,
    Failed,
    Usage,
    Refused,
    Unreachable,
    Pending,
    OutcomeUnknown,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Refused => 3,
            Exit::Unreachable => 4,
            Exit::Pending => 5,
            Exit::OutcomeUnknown => 6,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// A command line the parser took but a command found wrong (a bad `--wait`, unreadable JSON in
/// `--args`): exit 2, like the parser's own usage errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

/// A node's answer that is not a success, kept with its gRPC code so the exit code can follow
/// it. It reads as the code's name and the node's words (`PermissionDenied: ...`).
#[derive(Debug, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct Refusal {
    pub code: tonic::Code,
    pub message: String,
}

impl From<tonic::Status> for Refusal {
    fn from(status: tonic::Status) -> Refusal {
        let message = match status.message() {
            "" => format!("the node answered {:?}", status.code()),
            m => m.to_owned(),
        };
        Refusal {
            code: status.code(),
            message,
        }
    }
}

/// The exit code for an error that ended a command.
pub fn classify(error: &anyhow::Error) -> Exit {
    for cause in error.chain() {
        if cause.is::<Usage>() {
            return Exit::Usage;
        }
        if let Some(refusal) = cause.downcast_ref::<Refusal>() {
            return by_code(refusal.code);
        }
        if cause.is::<tonic::transport::Error>() {
            return Exit::Unreachable;
        }
    }
    Exit::Failed
}

/// Unavailable and slow are worth a retry elsewhere; what the cluster decided is not.
fn by_code(code: tonic::Code) -> Exit {
    use tonic::Code;
    match code {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => Exit::Unreachable,
        Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::FailedPrecondition
        | Code::Aborted
        | Code::OutOfRange
        | Code::ResourceExhausted => Exit::Refused,
        Code::Ok | Code::Unknown | Code::Internal | Code::Unimplemented | Code::DataLoss => {
            Exit::Failed
        }
    }
}

/// The error as one sentence: its causes joined by ": ", each said once
/// ([`gatehouse_gateway::error::sentence`]).
pub fn sentence(error: &anyhow::Error) -> String {
    gatehouse_gateway::error::sentence(error.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn each_kind_of_end_has_its_own_code() {
        let refused = anyhow::Error::from(Refusal::from(tonic::Status::permission_denied("no")))
            .context("approving call_1");
        assert_eq!(classify(&refused), Exit::Refused);
        let gone = anyhow::Error::from(Refusal::from(tonic::Status::unavailable("stopping")));
        assert_eq!(classify(&gone), Exit::Unreachable);
        let typo = anyhow::Error::from(Usage("--wait takes seconds".into()));
        assert_eq!(classify(&typo), Exit::Usage);
        assert_eq!(classify(&anyhow::anyhow!("disk full")), Exit::Failed);
        let codes: std::collections::HashSet<u8> = [
            Exit::Done,
            Exit::Failed,
            Exit::Usage,
            Exit::Refused,
            Exit::Unreachable,
            Exit::Pending,
            Exit::OutcomeUnknown,
        ]
        .map(Exit::code)
        .into();
        assert_eq!(codes.len(), 7);
    }

    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("tcp connect error")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = Err::<(), _>(Outer(Inner(refused)))
            .context("connecting to 127.0.0.1:1")
            .unwrap_err();
        assert_eq!(
            sentence(&error),
            "connecting to 127.0.0.1:1: tcp connect error: refused"
        );
    }
}
