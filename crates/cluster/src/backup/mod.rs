//! Backups of the replicated state: the file `gatehouse snapshot save` writes and `gatehouse
//! snapshot restore` reads, and what a node restored from one does on its first start.
//!
//! A backup file is a line naming the format (`gatehouse-snapshot`), a line of JSON (the
//! [`Header`]), then the body: the registry's own serialisation (`Registry::to_bytes`) at the
//! header's index. The header carries the body's length and SHA-256, so a truncated or damaged
//! file is refused before anything is written.

mod adopt;

pub use adopt::{check_restored_for, finish_restore};

use gatehouse_registry::canonical::sha256_hex;
use serde::{Deserialize, Serialize};

/// The first line of every backup file.
pub const MAGIC: &str = "gatehouse-snapshot";

/// The body format this build writes and reads: version 1 is `Registry::to_bytes` (JSON of the
/// applied index and the state).
pub const FORMAT: u32 = 1;

/// What a backup says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The body's format; see [`FORMAT`].
    pub format: u32,
    /// The log index of the last command the state holds.
    pub index: u64,
    /// The Raft term the serving node was in when it read the state.
    pub term: u64,
    /// When the state was read, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The node that served the backup.
    pub source_node: u64,
    /// The body's length in bytes.
    pub body_bytes: u64,
    /// Hex SHA-256 of the body.
    pub body_sha256: String,
}

/// Why a file cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("not a gatehouse backup: it does not start with the line {MAGIC:?}")]
    NotABackup,
    #[error("the backup ends inside its header: it is truncated")]
    HeaderCut,
    #[error("the backup's header is damaged: {0}")]
    Header(#[source] serde_json::Error),
    #[error(
        "the backup has format {0}; this gatehouse reads format {FORMAT} only (use the version that wrote it)"
    )]
    UnknownFormat(u32),
    #[error(
        "the backup is truncated or padded: its header says {expected} body bytes, it holds {found}"
    )]
    Length { expected: u64, found: u64 },
    #[error("the backup is damaged: its body's SHA-256 is {found}, its header says {expected}")]
    Checksum { expected: String, found: String },
}

impl Header {
    /// A header for `body`, which holds the state at `index`.
    pub fn for_body(body: &[u8], index: u64, term: u64, source_node: u64, at_ms: u64) -> Self {
        Header {
            format: FORMAT,
            index,
            term,
            created_at_ms: at_ms,
            source_node,
            body_bytes: body.len() as u64,
            body_sha256: sha256_hex(body),
        }
    }

    /// Checks that `body` is the one this header describes.
    pub fn check(&self, body: &[u8]) -> Result<(), BackupError> {
        if self.format != FORMAT {
            return Err(BackupError::UnknownFormat(self.format));
        }
        if self.body_bytes != body.len() as u64 {
            return Err(BackupError::Length {
                expected: self.body_bytes,
                found: body.len() as u64,
            });
        }
        let found = sha256_hex(body);
        if found != self.body_sha256 {
            return Err(BackupError::Checksum {
                expected: self.body_sha256.clone(),
                found,
            });
        }
        Ok(())
    }
}

/// The whole file: the magic line, the header line, the body.
pub fn encode(header: &Header, body: &[u8]) -> Vec<u8> {
    // A struct of numbers and a string: serialising it cannot fail.
    let line = serde_json::to_string(header).unwrap_or_default();
    let mut out = Vec::with_capacity(MAGIC.len() + line.len() + 2 + body.len());
    out.extend_from_slice(MAGIC.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(line.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// Splits a file into its header and body, and checks the body against the header.
pub fn decode(file: &[u8]) -> Result<(Header, &[u8]), BackupError> {
    let rest = file
        .strip_prefix(MAGIC.as_bytes())
        .and_then(|rest| rest.strip_prefix(b"\n"))
        .ok_or(BackupError::NotABackup)?;
    let end = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or(BackupError::HeaderCut)?;
    let (line, body) = (&rest[..end], &rest[end + 1..]);
    // The format is read on its own first, so a newer header is named as a newer format rather
    // than as damage.
    #[derive(Deserialize)]
    struct Versioned {
        format: u32,
    }
    let versioned: Versioned = serde_json::from_slice(line).map_err(BackupError::Header)?;
    if versioned.format != FORMAT {
        return Err(BackupError::UnknownFormat(versioned.format));
    }
    let header: Header = serde_json::from_slice(line).map_err(BackupError::Header)?;
    header.check(body)?;
    Ok((header, body))
}

#[cfg(test)]
mod tests;
