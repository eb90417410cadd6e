//! The two files of a log directory, and reading a log from its end.

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub const LOG: &str = "audit.log";
pub const HEAD: &str = "audit.head";

/// The last record known durable: what `audit.head` holds. Seq 0 is the empty log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub hash: String,
}

pub fn log_path(dir: &Path) -> PathBuf {
    dir.join(LOG)
}

pub fn read_head(dir: &Path) -> io::Result<Option<Head>> {
    let path = dir.join(HEAD);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is damaged: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Temporary file, synced, renamed over the old one. The directory is not synced: a rename lost
/// in a crash leaves the older head, and a head behind the log is allowed.
pub fn write_head(dir: &Path, head: &Head) -> io::Result<()> {
    let tmp = dir.join("audit.head.tmp");
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)?;
    let mut text = serde_json::to_vec(head).expect("a head always serializes");
    text.push(b'\n');
    file.write_all(&text)?;
    file.sync_data()?;
    std::fs::rename(&tmp, dir.join(HEAD))
}

/// Makes the creation or renaming of files in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The end of a log file: its last complete lines and where the complete part ends.
#[derive(Debug)]
pub struct Tail {
    /// Byte offset and bytes (without the newline) of each line, oldest first.
    pub lines: Vec<(u64, Vec<u8>)>,
    /// Length of the file up to and including its last newline; bytes past it are a torn line.
    pub complete_len: u64,
    pub file_len: u64,
}

/// Reads backwards from the end until it holds the last `n` complete lines (or the whole file).
pub fn read_tail(file: &File, n: usize) -> io::Result<Tail> {
    const CHUNK: u64 = 64 * 1024;
    let file_len = file.metadata()?.len();
    let mut start = file_len;
    let mut buf = Vec::new();
    while start > 0 && count_newlines(&buf) <= n {
        let take = CHUNK.min(start);
        start -= take;
        let mut chunk = vec![0; take as usize];
        file.read_exact_at(&mut chunk, start)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    let complete = buf.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut lines = Vec::new();
    let mut at = 0;
    for (i, b) in buf[..complete].iter().enumerate() {
        if *b == b'\n' {
            // A read that began mid-file starts inside a line it does not hold whole.
            if at > 0 || start == 0 {
                lines.push((start + at as u64, buf[at..i].to_vec()));
            }
            at = i + 1;
        }
    }
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    Ok(Tail {
        lines,
        complete_len: start + complete as u64,
        file_len,
    })
}

/// The 1-based number of the line that starts at byte `offset`.
pub fn line_number_at(path: &Path, offset: u64) -> io::Result<u64> {
    let mut reader = BufReader::new(File::open(path)?);
    let mut seen = 0u64;
    let mut newlines = 0u64;
    while seen < offset {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let take = buf.len().min((offset - seen) as usize);
        newlines += count_newlines(&buf[..take]) as u64;
        reader.consume(take);
        seen += take as u64;
    }
    Ok(newlines + 1)
}

fn count_newlines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|b| **b == b'\n').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_holds_the_last_complete_lines_and_marks_a_torn_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("torn");
        std::fs::write(&path, &text).unwrap();
        let file = File::open(&path).unwrap();
        let tail = read_tail(&file, 3).unwrap();
        let lines: Vec<_> = tail
            .lines
            .iter()
            .map(|(_, l)| String::from_utf8(l.clone()).unwrap())
            .collect();
        assert_eq!(lines, ["line 19997", "line 19998", "line 19999"]);
        assert_eq!(tail.file_len - tail.complete_len, 4);
        let (offset, _) = tail.lines[0];
        assert_eq!(line_number_at(&path, offset).unwrap(), 19_998);

        let all = read_tail(&file, 100_000).unwrap();
        assert_eq!(all.lines.len(), 20_000);
        assert_eq!(all.lines[0], (0, b"line 0".to_vec()));
    }
}
