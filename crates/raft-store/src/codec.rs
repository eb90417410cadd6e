//! How values are laid out in sled: JSON, and the framing of a stored snapshot (the keys are in
//! `keys`).

use crate::StoreError;
use serde::{Serialize, de::DeserializeOwned};

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
    fn frames_split_back() {
        let f = frame(b"{\"m\":1}", b"data").unwrap();
        assert_eq!(unframe(&f).unwrap(), (&b"{\"m\":1}"[..], &b"data"[..]));
        assert!(unframe(&f[..6]).is_err());
        assert!(unframe(b"ab").is_err());
    }
}
