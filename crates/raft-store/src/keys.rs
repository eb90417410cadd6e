//! The keys the state tree uses in sled: the applied log id and membership (written when a
//! snapshot is installed), and, in a store written before applying stopped writing, every
//! applied command under `cmd/` (indexes big-endian, so they sort in index order; recovery
//! still reads them and the next snapshot drops them). A leaf: the state machine, snapshots and
//! recovery read these, and it reads none of them.

use crate::StoreError;

/// The state tree's key for the last applied log id.
pub(crate) const APPLIED: &[u8] = b"applied";
/// The state tree's key for the membership as of the last applied log id.
pub(crate) const MEMBERSHIP: &[u8] = b"membership";

pub(crate) fn key_index(key: &[u8]) -> Result<u64, StoreError> {
    let bytes: [u8; 8] = key
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("log key of {} bytes", key.len())))?;
    Ok(u64::from_be_bytes(bytes))
}

/// Applied commands live in the state tree under `cmd/<index BE>`.
pub(crate) const CMD_PREFIX: &[u8; 4] = b"cmd/";

pub(crate) fn cmd_key(index: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(CMD_PREFIX);
    key[4..].copy_from_slice(&index.to_be_bytes());
    key
}

pub(crate) fn cmd_index(key: &[u8]) -> Result<u64, StoreError> {
    match key.strip_prefix(CMD_PREFIX.as_slice()) {
        Some(rest) => key_index(rest),
        None => Err(StoreError::Corrupt(format!("{key:?} is not a command key"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_index_and_round_trip() {
        assert!(cmd_key(255) < cmd_key(256));
        assert_eq!(key_index(&42u64.to_be_bytes()).unwrap(), 42);
        assert_eq!(cmd_index(&cmd_key(7)).unwrap(), 7);
        assert!(key_index(b"short").is_err());
        assert!(cmd_index(b"applied").is_err());
    }
}
