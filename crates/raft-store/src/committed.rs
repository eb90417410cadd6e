//! The committed log id, in a file of its own beside the segments: one `pwrite` of
//! `[length u32 LE][crc32 u32 LE][JSON]` at offset 0 each time openraft saves it, never synced.
//! It only tells a restarting node how far it may re-apply its own log before it hears from a
//! leader; one that comes back older (or unreadable, after a power cut) means the node learns
//! the rest from the leader. sled is not involved, so saving it wakes no sled thread.

use crate::codec::{decode, encode};
use crate::{NodeId, StoreError};
use openraft::LogId;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

const FILE: &str = "committed";
const HEADER: usize = 8;
const MAX_PAYLOAD: usize = 4096;

#[derive(Debug)]
pub(crate) struct CommittedFile {
    file: File,
}

impl CommittedFile {
    /// Opens (or creates) the file in the log's directory.
    pub(crate) fn open(log_dir: &Path) -> Result<Self, StoreError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(log_dir.join(FILE))?;
        Ok(Self { file })
    }

    pub(crate) fn save(&self, committed: Option<LogId<NodeId>>) -> Result<(), StoreError> {
        let payload = encode("committed log id", &committed)?;
        let mut record = Vec::with_capacity(HEADER + payload.len());
        let len = u32::try_from(payload.len()).expect("a log id is a few dozen bytes");
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        self.file.write_all_at(&record, 0)?;
        Ok(())
    }

    /// The saved id; `None` when nothing was saved or the record does not check out.
    pub(crate) fn read(&self) -> Result<Option<LogId<NodeId>>, StoreError> {
        let mut header = [0u8; HEADER];
        if self.file.read_exact_at(&mut header, 0).is_err() {
            return Ok(None);
        }
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let sum = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        // A log id is a few dozen bytes; a longer length is damage, not something to allocate.
        if len > MAX_PAYLOAD {
            return Ok(damaged());
        }
        let mut payload = vec![0u8; len];
        if self
            .file
            .read_exact_at(&mut payload, HEADER as u64)
            .is_err()
            || crc32fast::hash(&payload) != sum
        {
            return Ok(damaged());
        }
        decode::<Option<LogId<NodeId>>>("committed log id", &payload)
    }
}

/// What a record that does not check out reads as: nothing saved.
fn damaged() -> Option<LogId<NodeId>> {
    tracing::warn!("the saved committed log id does not check out; the leader will say");
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    #[test]
    fn the_last_saved_id_is_read_back_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let file = CommittedFile::open(dir.path()).unwrap();
        assert_eq!(file.read().unwrap(), None);
        file.save(id(2, 1_000)).unwrap();
        file.save(id(3, 7)).unwrap();
        drop(file);
        assert_eq!(
            CommittedFile::open(dir.path()).unwrap().read().unwrap(),
            id(3, 7)
        );
    }

    #[test]
    fn a_damaged_record_reads_as_nothing_saved() {
        let dir = tempfile::tempdir().unwrap();
        let file = CommittedFile::open(dir.path()).unwrap();
        file.save(id(2, 1_000)).unwrap();
        file.file.write_all_at(b"X", HEADER as u64 + 3).unwrap();
        assert_eq!(file.read().unwrap(), None);
    }
}
