//! The blocking half of the writer: recovery on open, and one group commit.

use crate::files::{self, Head};
use crate::record::{Entry, GENESIS, LineProblem, Record};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The open log and where its chain stands.
#[derive(Debug)]
pub(crate) struct Disk {
    dir: PathBuf,
    file: File,
    node: u64,
    next_seq: u64,
    prev: String,
}

impl Disk {
    /// Opens (creating) the log in `dir`: cuts a torn last line, and refuses a log whose last
    /// record is damaged, belongs to another node, or ends before `audit.head`.
    pub fn open(dir: &Path, node: u64) -> io::Result<Disk> {
        std::fs::create_dir_all(dir)?;
        let path = files::log_path(dir);
        let head = match files::read_head(dir)? {
            Some(head) => head,
            None => {
                if std::fs::metadata(&path).is_ok_and(|m| m.len() > 0) {
                    return Err(damaged(&path, "holds records but audit.head is missing"));
                }
                // The head is made before the log, so a log without one was tampered with.
                let head = Head {
                    seq: 0,
                    hash: GENESIS.to_owned(),
                };
                files::write_head(dir, &head)?;
                head
            }
        };
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        files::sync_dir(dir)?;
        let tail = files::read_tail(&file, 1)?;
        if tail.complete_len < tail.file_len {
            tracing::warn!(
                path = %path.display(),
                bytes = tail.file_len - tail.complete_len,
                "cutting a torn last line off the audit log (a write was interrupted)"
            );
            file.set_len(tail.complete_len)?;
            file.sync_all()?;
        }
        let (next_seq, prev) = match tail.lines.last() {
            None => (1, GENESIS.to_owned()),
            Some((offset, line)) => {
                let record = Record::open(line).map_err(|problem| {
                    let line = files::line_number_at(&path, *offset).unwrap_or(0);
                    let what = match problem {
                        LineProblem::Garbage(why) => why,
                        LineProblem::Changed(seq) => {
                            format!("record seq {seq} does not match its hash")
                        }
                    };
                    damaged(&path, &format!("line {line}: {what}"))
                })?;
                if record.node != node {
                    return Err(damaged(
                        &path,
                        &format!("was written by node {}, not node {node}", record.node),
                    ));
                }
                (record.seq + 1, record.hash)
            }
        };
        let last_seq = next_seq - 1;
        if head.seq > last_seq {
            return Err(damaged(
                &path,
                &format!(
                    "ends at seq {last_seq} but audit.head says seq {} is durable: records were removed from its end",
                    head.seq
                ),
            ));
        }
        if head.seq == last_seq && head.hash != prev {
            return Err(damaged(
                &path,
                &format!("record seq {last_seq} differs from the one audit.head recorded"),
            ));
        }
        Ok(Disk {
            dir: dir.to_owned(),
            file,
            node,
            next_seq,
            prev,
        })
    }

    /// Chains, writes and syncs a batch: once it returns, the batch is on disk and may be
    /// answered for. Returns the first seq given. The head moves in [`Disk::advance_head`],
    /// after the answers: a head behind the log is allowed, so nobody waits for it. On error
    /// nothing of the chain state moves; the caller stops using this log.
    pub fn commit(&mut self, batch: Vec<(u64, Entry)>) -> io::Result<u64> {
        let first = self.next_seq;
        let mut seq = first;
        let mut prev = self.prev.clone();
        let mut bytes = Vec::with_capacity(batch.len() * 512);
        for (at_ms, entry) in batch {
            let (record, line) = Record::seal(seq, at_ms, self.node, &prev, entry);
            bytes.extend_from_slice(&line);
            prev = record.hash;
            seq += 1;
        }
        self.file.write_all(&bytes)?;
        self.file.sync_data()?;
        self.next_seq = seq;
        self.prev = prev;
        Ok(first)
    }

    /// Records the last synced record in `audit.head`.
    pub fn advance_head(&self) -> io::Result<()> {
        let head = Head {
            seq: self.next_seq - 1,
            hash: self.prev.clone(),
        };
        files::write_head(&self.dir, &head)
    }
}

fn damaged(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {what}", path.display()),
    )
}
