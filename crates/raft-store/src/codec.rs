//! How things are laid out in sled: keys that sort by log index, JSON values, and the framing of
//! a stored snapshot.

use crate::StoreError;
use serde::{Serialize, de::DeserializeOwned};

/// A log index as a key: big-endian, so sled's byte order is index order.
pub(crate) fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

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

pub(crate) fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(value).map_err(|source| StoreError::Encode { what, source })
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|source| StoreError::Decode { what, source })
}

/// Reads and decodes one JSON value; `None` when the key was never written.
pub(crate) fn get_json<T: DeserializeOwned>(
    tree: &sled::Tree,
    key: &[u8],
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    tree.get(key)?.map(|bytes| decode(what, &bytes)).transpose()
}

/// A stored snapshot is one sled value, so it is written and read atomically: the length of the
/// meta (u32 BE), the meta as JSON, then the registry's own bytes.
pub(crate) fn frame(meta: &[u8], data: &[u8]) -> Result<Vec<u8>, StoreError> {
    let len = u32::try_from(meta.len())
        .map_err(|_| StoreError::Corrupt(format!("snapshot meta of {} bytes", meta.len())))?;
    let mut out = Vec::with_capacity(4 + meta.len() + data.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(meta);
    out.extend_from_slice(data);
    Ok(out)
}

/// Splits a frame back into (meta, data).
pub(crate) fn unframe(bytes: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let corrupt = || StoreError::Corrupt(format!("snapshot frame of {} bytes", bytes.len()));
    let (len, rest) = bytes.split_first_chunk::<4>().ok_or_else(corrupt)?;
    let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| corrupt())?;
    if rest.len() < len {
        return Err(corrupt());
    }
    Ok(rest.split_at(len))
}

/// Runs sled work on a blocking thread: a synchronous flush (an fsync) must never stall the
/// async workers.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_index_and_round_trip() {
        assert!(index_key(255) < index_key(256));
        assert!(cmd_key(255) < cmd_key(256));
        assert_eq!(key_index(&index_key(42)).unwrap(), 42);
        assert_eq!(cmd_index(&cmd_key(7)).unwrap(), 7);
        assert!(key_index(b"short").is_err());
        assert!(cmd_index(b"applied").is_err());
    }

    #[test]
    fn frames_split_back() {
        let f = frame(b"{\"m\":1}", b"data").unwrap();
        assert_eq!(unframe(&f).unwrap(), (&b"{\"m\":1}"[..], &b"data"[..]));
        assert!(unframe(&f[..6]).is_err());
        assert!(unframe(b"ab").is_err());
    }
}
