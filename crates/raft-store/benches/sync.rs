//! What an `fdatasync` after an append costs, by where the append lands: past the end of the
//! file (growing it), inside space `fallocate` reserved (unwritten extents on ext4), or inside
//! zeros written ahead (what the Raft log's segments do). One file, then several syncing at once
//! as a node's log, its audit log and, on one machine, other nodes' logs do. Prints p50 and p90
//! of the `fdatasync` alone and the syncs per second across the files.
//!
//!     cargo bench -p gatehouse-raft-store --bench sync [-- --writes N --bytes N --files 1,4]
//!
//! The files go in a temporary directory under the target directory, on the disk the nodes'
//! data would use in a checkout; `TMPDIR` moves them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

struct Settings {
    writes: usize,
    bytes: usize,
    files: Vec<usize>,
}

fn settings() -> Settings {
    let mut s = Settings {
        writes: 1500,
        bytes: 2000,
        files: vec![1, 4],
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        let value = || pair[1].parse::<usize>().expect("a whole number");
        match pair[0].as_str() {
            "--writes" => s.writes = value().max(1),
            "--bytes" => s.bytes = value().max(1),
            "--files" => {
                s.files = pair[1]
                    .split(',')
                    .map(|n| n.parse().expect("a list of whole numbers"))
                    .collect()
            }
            _ => {}
        }
    }
    s
}

#[derive(Debug, Clone, Copy)]
enum Ahead {
    /// Nothing: every append grows the file.
    Nothing,
    /// `fallocate`d: blocks reserved, marked unwritten until written.
    Reserved,
    /// Zeros written and synced before the appends.
    Zeros,
}

impl Ahead {
    fn name(self) -> &'static str {
        match self {
            Ahead::Nothing => "growing the file",
            Ahead::Reserved => "into fallocate'd space",
            Ahead::Zeros => "into written zeros",
        }
    }

    fn prepare(self, file: &File, len: u64) {
        match self {
            Ahead::Nothing => {}
            Ahead::Reserved => {
                rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len)
                    .expect("fallocate");
                file.sync_all().unwrap();
            }
            Ahead::Zeros => {
                file.write_all_at(&vec![0; len as usize], 0).unwrap();
                file.sync_all().unwrap();
            }
        }
    }
}

/// Appends `writes` records of `bytes` to a new file, each followed by an `fdatasync`; the
/// time of each sync.
fn appends(dir: &std::path::Path, n: usize, ahead: Ahead, s: &Settings) -> Vec<Duration> {
    let path = dir.join(format!("file-{n}"));
    let _ = std::fs::remove_file(&path);
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    ahead.prepare(&file, (s.writes * s.bytes) as u64);
    let record = vec![b'x'; s.bytes];
    let mut took = Vec::with_capacity(s.writes);
    for i in 0..s.writes {
        file.write_all_at(&record, (i * s.bytes) as u64).unwrap();
        let start = Instant::now();
        file.sync_data().unwrap();
        took.push(start.elapsed());
    }
    drop(file);
    std::fs::remove_file(&path).unwrap();
    took
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let s = settings();
    let dir = tempfile::tempdir_in(std::env::var_os("TMPDIR").map_or_else(
        || std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        std::path::PathBuf::from,
    ))
    .unwrap();
    println!(
        "sync bench: {} appends of {} bytes per file, each followed by an fdatasync, in {}",
        s.writes,
        s.bytes,
        dir.path().display()
    );
    let (settings, dir) = (&s, dir.path());
    // Twice through, alternating, so a slow stretch of the disk does not fall on one kind.
    for files in &s.files {
        for round in 1..=2 {
            for ahead in [Ahead::Nothing, Ahead::Reserved, Ahead::Zeros] {
                let start = Instant::now();
                let mut took: Vec<Duration> = std::thread::scope(|scope| {
                    let threads: Vec<_> = (0..*files)
                        .map(|n| scope.spawn(move || appends(dir, n, ahead, settings)))
                        .collect();
                    threads
                        .into_iter()
                        .flat_map(|t| t.join().unwrap())
                        .collect()
                });
                let elapsed = start.elapsed();
                took.sort_unstable();
                println!(
                    "  {files} file(s), round {round}, {:<24} fdatasync p50 {:6.0} us  p90 {:6.0} us  {:6.0} syncs/s",
                    ahead.name(),
                    us(took[took.len() / 2]),
                    us(took[took.len() * 9 / 10]),
                    took.len() as f64 / elapsed.as_secs_f64(),
                );
            }
        }
    }
}
