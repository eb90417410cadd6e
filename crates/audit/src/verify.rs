//! Reading a log back: `verify` walks the whole chain, `tail` reads the last records.

use crate::files::{self, Head};
use crate::record::{GENESIS, LineProblem, Record};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// An intact log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub records: u64,
    /// 0 for an empty log.
    pub last_seq: u64,
    /// The hash of the last record, [`GENESIS`] for an empty log.
    pub head_hash: String,
    /// Bytes of an unfinished last line (a write the node never acknowledged); not checked.
    pub torn_bytes: u64,
}

/// The first problem found. Lines are counted from 1.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("reading the audit log: {0}")]
    Io(#[from] io::Error),
    #[error("line {line}: not an audit record: {reason}")]
    Garbage { line: u64, reason: String },
    #[error("line {line}: record seq {seq} was changed: its hash does not match its contents")]
    Changed { line: u64, seq: u64 },
    #[error(
        "line {line}: expected seq {expected}, found seq {found}: record seq {expected} was removed"
    )]
    Removed {
        line: u64,
        expected: u64,
        found: u64,
    },
    #[error("line {line}: expected seq {expected}, found seq {found}: records were reordered")]
    Reordered {
        line: u64,
        expected: u64,
        found: u64,
    },
    #[error(
        "line {line}: record seq {seq} does not follow the record before it (prev hash differs): \
         a record was replaced"
    )]
    BrokenLink { line: u64, seq: u64 },
    #[error("line {line}: record seq {seq} was written by node {node}, the log by node {expected}")]
    ForeignNode {
        line: u64,
        seq: u64,
        node: u64,
        expected: u64,
    },
    #[error(
        "the log ends at seq {last_seq} but audit.head says seq {head_seq} was durable: \
         records were removed from its end"
    )]
    Truncated { last_seq: u64, head_seq: u64 },
    #[error("record seq {seq} is not the one audit.head recorded")]
    HeadMismatch { seq: u64 },
    #[error("the log holds records but audit.head is missing")]
    NoHead,
}

/// Checks every record's hash and link, then the log's end against `audit.head`.
pub fn verify(dir: &Path) -> Result<Verified, VerifyError> {
    // The head first: it only moves after the log is synced, so a log read after it reaches it
    // even while a node is writing.
    let head = files::read_head(dir)?;
    let path = files::log_path(dir);
    let file = match File::open(&path) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let mut records = 0u64;
    let mut last_seq = 0u64;
    let mut prev = GENESIS.to_owned();
    let mut node = None;
    let mut at_head_seq = None;
    let mut torn_bytes = 0;
    if let Some(file) = file {
        let mut lines = Lines::new(file);
        while let Some(line) = lines.next_line()? {
            let Line::Complete(bytes) = line else {
                torn_bytes = lines.last_len;
                break;
            };
            let n = lines.number;
            let record = Record::open(&bytes).map_err(|problem| match problem {
                LineProblem::Garbage(reason) => VerifyError::Garbage { line: n, reason },
                LineProblem::Changed(seq) => VerifyError::Changed { line: n, seq },
            })?;
            let expected = last_seq + 1;
            if record.seq != expected {
                let found = record.seq;
                return Err(if found < expected || lines.find_seq(expected)? {
                    VerifyError::Reordered {
                        line: n,
                        expected,
                        found,
                    }
                } else {
                    VerifyError::Removed {
                        line: n,
                        expected,
                        found,
                    }
                });
            }
            if record.prev != prev {
                return Err(VerifyError::BrokenLink {
                    line: n,
                    seq: record.seq,
                });
            }
            let expected_node = *node.get_or_insert(record.node);
            if record.node != expected_node {
                return Err(VerifyError::ForeignNode {
                    line: n,
                    seq: record.seq,
                    node: record.node,
                    expected: expected_node,
                });
            }
            if head.as_ref().is_some_and(|h| h.seq == record.seq) {
                at_head_seq = Some(record.hash.clone());
            }
            records += 1;
            last_seq = record.seq;
            prev = record.hash;
        }
    }
    match head {
        None if records > 0 => return Err(VerifyError::NoHead),
        None => {}
        Some(Head { seq, .. }) if seq > last_seq => {
            return Err(VerifyError::Truncated {
                last_seq,
                head_seq: seq,
            });
        }
        Some(Head { seq, hash }) if seq > 0 && at_head_seq.as_deref() != Some(hash.as_str()) => {
            return Err(VerifyError::HeadMismatch { seq });
        }
        Some(_) => {}
    }
    Ok(Verified {
        records,
        last_seq,
        head_hash: prev,
        torn_bytes,
    })
}

/// The last `n` complete records, oldest first. Reads from the end; checks only that each line
/// is a record (hashes are `verify`'s job).
pub fn tail(dir: &Path, n: usize) -> io::Result<Vec<Record>> {
    let path = files::log_path(dir);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let tail = files::read_tail(&file, n)?;
    tail.lines
        .into_iter()
        .map(|(offset, line)| {
            serde_json::from_slice(&line).map_err(|e| {
                let number = files::line_number_at(&path, offset).unwrap_or(0);
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} line {number}: not an audit record: {e}", path.display()),
                )
            })
        })
        .collect()
}

/// The records from the end of the log back to `at_ms`, oldest first, and whether that is every
/// record written at or after `at_ms`: true when the read went back past a record older than
/// `at_ms`, or to the log's first record ever (the one after [`GENESIS`](crate::GENESIS)); false
/// when the file begins later (its start was cut away). Reads from the end in growing steps,
/// so a recent `at_ms` costs little however long the log is.
pub fn since(dir: &Path, at_ms: u64) -> io::Result<(Vec<Record>, bool)> {
    let mut n = 256;
    loop {
        let records = tail(dir, n)?;
        let whole_file = records.len() < n;
        let reached = records.first().is_some_and(|r| r.at_ms < at_ms);
        if reached || whole_file {
            let complete = reached || records.first().is_none_or(|r| r.prev == crate::GENESIS);
            return Ok((records, complete));
        }
        n *= 4;
    }
}

enum Line {
    Complete(Vec<u8>),
    /// The last bytes of the file, with no newline after them.
    Torn,
}

struct Lines {
    reader: BufReader<File>,
    number: u64,
    last_len: u64,
}

impl Lines {
    fn new(file: File) -> Lines {
        Lines {
            reader: BufReader::with_capacity(256 * 1024, file),
            number: 0,
            last_len: 0,
        }
    }

    fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut buf = Vec::new();
        let read = self.reader.read_until(b'\n', &mut buf)?;
        self.last_len = read as u64;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        if buf.pop() == Some(b'\n') {
            Ok(Some(Line::Complete(buf)))
        } else {
            Ok(Some(Line::Torn))
        }
    }

    /// Whether a later line claims `seq` (to tell a reordering from a removal).
    fn find_seq(&mut self, seq: u64) -> io::Result<bool> {
        #[derive(serde::Deserialize)]
        struct Seq {
            seq: u64,
        }
        while let Some(line) = self.next_line()? {
            if let Line::Complete(bytes) = line
                && serde_json::from_slice::<Seq>(&bytes).is_ok_and(|s| s.seq == seq)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
