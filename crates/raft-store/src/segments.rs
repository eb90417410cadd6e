//! The Raft log's own files: append-only segments in `raft-log/`, each named by the index of its
//! first entry. A record is `[payload length u32 LE][crc32 u32 LE][index u64 LE][payload]`, the
//! checksum covering the index and the payload, the payload an entry as JSON. An append is one
//! `pwrite` of all its records to the last segment; a sync thread then `fdatasync`s the segment
//! once for every append waiting at that moment (group commit) and only then tells openraft.
//!
//! Why not sled: a sled `flush` writes its buffers one `sync_file_range` at a time before our
//! `fdatasync`, and measured at about 1.5 ms per write on the benchmark machine against about
//! 0.2 ms for the `fdatasync` alone (ARCHITECTURE.md, "The Raft log").
//!
//! The segment appended to is filled with zeros ahead of its records, [`AHEAD_BYTES`] at a time:
//! an append then overwrites blocks that are already written, so its `fdatasync` writes the
//! records and nothing of the file's metadata. Growing the file, or writing into space that
//! `fallocate` reserved (ext4 marks it unwritten, and the first write into it changes the file's
//! extents), makes every sync write the inode as well (measured in ARCHITECTURE.md, "The Raft
//! log"). An all-zero header ends the records.
//!
//! Opening reads every segment: a torn or checksum-failing record at the end of the last segment
//! (a crash mid-append, never acknowledged) is cut off; anything wrong anywhere else refuses to
//! open. Entries at or below the last purged index are skipped; a segment is deleted once every
//! entry in it is purged.

use crate::codec::{decode, encode};
use crate::{NodeId, StoreError, TypeConfig};
use openraft::LogId;
use openraft::storage::LogFlushed;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::ops::RangeBounds;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use tokio::sync::watch;

type Entry = openraft::Entry<TypeConfig>;

/// A segment is closed and a new one started once it holds this many bytes.
const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// The segment appended to is filled with zeros this far ahead at a time. The append that fills
/// writes them under the log's lock and its sync carries them, so a step is a pause that larger
/// steps lengthen and smaller ones repeat: on the benchmark machine a step of 1 MiB took about
/// 0.3 ms to write and added about 1 ms to that one sync.
const AHEAD_BYTES: u64 = 1024 * 1024;
/// The most record bytes the recent entries kept in memory may hold ([`Recent`]).
const RECENT_BYTES: u64 = 8 * 1024 * 1024;
/// Bytes before a record's payload: length, checksum, index.
const HEADER: usize = 16;
/// The directory of the segments, inside the store's directory.
pub(crate) const DIR: &str = "raft-log";

/// An append waiting for its segment's sync: the file, its last entry, the truncation epoch it
/// was written in, and openraft's callback unless that fired when the append was written.
struct SyncWaiter {
    file: Arc<File>,
    last: LogId<NodeId>,
    epoch: u64,
    callback: Option<LogFlushed<TypeConfig>>,
}

/// How far the log is on disk: every entry up to `through` (as the log holds it now) has been
/// synced, unless a sync `failed`, after which nothing more ever is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Synced {
    pub through: Option<LogId<NodeId>>,
    pub failed: bool,
    /// The last entry written, synced or not.
    pub written: Option<LogId<NodeId>>,
    /// Grows with each truncation: a sync of an append written before one says nothing about
    /// the entries at its indexes now.
    epoch: u64,
}

/// A view of [`Synced`] that follows the log's sync thread: what waits for an entry to be on
/// disk (the state machine before it applies, the Raft network before it tells followers
/// what is committed) waits here.
#[derive(Debug, Clone)]
pub struct LogSynced {
    rx: watch::Receiver<Synced>,
}

impl LogSynced {
    /// Where the synced part of the log ends now.
    pub fn now(&self) -> Synced {
        *self.rx.borrow()
    }

    /// Waits until every entry up to `index` that the log holds is on disk (an index past the
    /// last entry written waits for nothing). `Err` once a sync failed: the entry may never be.
    pub async fn wait_for(&self, index: u64) -> Result<(), StoreError> {
        let mut rx = self.rx.clone();
        let synced = rx
            .wait_for(|s| {
                s.failed
                    || s.through.is_some_and(|t| t.index >= index)
                    || s.written.is_none_or(|w| w.index < index)
            })
            .await
            .map_err(|_| StoreError::Sync("the log's sync thread has stopped".into()))?;
        if synced.failed {
            return Err(StoreError::Sync(
                "a sync of the Raft log failed: entries past it may not be on disk".into(),
            ));
        }
        Ok(())
    }

    /// Waits until every entry written so far is on disk.
    pub async fn wait_for_written(&self) -> Result<(), StoreError> {
        let written = self.rx.borrow().written;
        match written {
            Some(last) => self.wait_for(last.index).await,
            None => Ok(()),
        }
    }

    /// Changes as the synced part grows (or a sync fails).
    pub fn changes(&self) -> watch::Receiver<Synced> {
        self.rx.clone()
    }
}

/// Where one entry is.
#[derive(Debug, Clone, Copy)]
struct Location {
    log_id: LogId<NodeId>,
    /// The first index of the segment holding it.
    segment: u64,
    /// Where its record starts.
    offset: u64,
    len: u32,
}

#[derive(Debug)]
struct State {
    /// Open segments by their first index; the last is the one appended to.
    files: BTreeMap<u64, Arc<File>>,
    /// The bytes in the last segment.
    tail_len: u64,
    /// How long the last segment's file is, zeros past `tail_len` included.
    allocated: u64,
    /// Every entry not yet purged.
    entries: BTreeMap<u64, Location>,
}

/// The entries appended last, as appended: replication to each follower and the state machine
/// read an entry right after it was written, and reading it back from the file cost a `pread`,
/// a checksum and a JSON parse per reader (7% of the nodes' CPU under the 64-client cluster
/// benchmark). Changed under the state's lock, in step with `State::entries`.
#[derive(Debug, Default)]
struct Recent {
    /// Each entry with its record's bytes.
    entries: BTreeMap<u64, (Entry, u64)>,
    /// Record bytes of the entries held: the oldest go past [`RECENT_BYTES`].
    bytes: u64,
}

impl Recent {
    fn keep(&mut self, entry: Entry, len: u64) {
        if let Some((_, old)) = self.entries.insert(entry.log_id.index, (entry, len)) {
            self.bytes -= old;
        }
        self.bytes += len;
        while self.bytes > RECENT_BYTES {
            let Some((_, (_, len))) = self.entries.pop_first() else {
                break;
            };
            self.bytes -= len;
        }
    }

    /// The entry at `log_id`, if held.
    fn get(&self, log_id: LogId<NodeId>) -> Option<Entry> {
        self.entries
            .get(&log_id.index)
            .filter(|(entry, _)| entry.log_id == log_id)
            .map(|(entry, _)| entry.clone())
    }

    /// Forgets every entry from `index` on (a truncation).
    fn forget_from(&mut self, index: u64) {
        let gone = self.entries.split_off(&index);
        self.bytes -= gone.values().map(|(_, len)| len).sum::<u64>();
    }

    /// Forgets every entry up to `index` (a purge).
    fn forget_through(&mut self, index: u64) {
        let kept = self.entries.split_off(&(index + 1));
        let gone = std::mem::replace(&mut self.entries, kept);
        self.bytes -= gone.values().map(|(_, len)| len).sum::<u64>();
    }
}

/// The segments, shared by the log store and its readers.
#[derive(Debug)]
pub(crate) struct Segments {
    dir: PathBuf,
    state: Mutex<State>,
    syncs: Mutex<Option<mpsc::Sender<SyncWaiter>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    synced: watch::Sender<Synced>,
    held: Arc<Held>,
    recent: Mutex<Recent>,
}

/// Whether syncs wait ([`Segments::hold_syncs`]).
#[derive(Debug, Default)]
struct Held {
    held: Mutex<bool>,
    released: std::sync::Condvar,
}

/// While this lives, the log's sync thread syncs nothing: for tests that must see what happens
/// between an append and its sync.
#[derive(Debug)]
pub struct SyncsHeld(Arc<Held>);

impl Drop for SyncsHeld {
    fn drop(&mut self) {
        *lock(&self.0.held) = false;
        self.0.released.notify_all();
    }
}

impl Drop for Segments {
    fn drop(&mut self) {
        lock(&self.syncs).take();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

fn checksum(index: u64, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&index.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

/// Moves the synced mark past a batch the sync thread finished. Appends written before the
/// last truncation move nothing: their indexes may hold other entries now.
fn mark_synced(marks: &watch::Sender<Synced>, batch: &[SyncWaiter], ok: bool) {
    marks.send_if_modified(|synced| {
        if !ok {
            let changed = !synced.failed;
            synced.failed = true;
            return changed;
        }
        let last = batch
            .iter()
            .filter(|w| w.epoch == synced.epoch)
            .map(|w| w.last)
            .max_by_key(|id| id.index);
        match last {
            Some(last) if synced.through.is_none_or(|t| t.index < last.index) => {
                synced.through = Some(last);
                true
            }
            _ => false,
        }
    });
}

/// One entry's record.
fn record(entry: &Entry, into: &mut Vec<u8>) -> Result<u32, StoreError> {
    let payload = encode("log entry", entry)?;
    let len = u32::try_from(payload.len())
        .map_err(|_| StoreError::Corrupt(format!("a log entry of {} bytes", payload.len())))?;
    let index = entry.log_id.index;
    into.extend_from_slice(&len.to_le_bytes());
    into.extend_from_slice(&checksum(index, &payload).to_le_bytes());
    into.extend_from_slice(&index.to_le_bytes());
    into.extend_from_slice(&payload);
    Ok(len + HEADER as u32)
}

/// What reading one segment from the start found: where each entry is (each decoded once, to
/// check it, and dropped).
struct Scanned {
    entries: Vec<Location>,
    /// Where the last whole, valid record ends.
    valid_len: u64,
    file_len: u64,
    /// Whether everything past `valid_len` is zeros: space allocated ahead, not a torn append.
    zeros_after: bool,
}

impl Scanned {
    fn torn(&self) -> bool {
        self.valid_len < self.file_len && !self.zeros_after
    }
}

fn scan(path: &Path, first: u64) -> Result<Scanned, StoreError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut entries = Vec::new();
    let mut offset = 0u64;
    // Set where an all-zero header ended the records, their rest already read as zeros.
    let mut ends_in_zeros = false;
    loop {
        let mut header = [0u8; HEADER];
        if reader.read_exact(&mut header).is_err() {
            break;
        }
        if header == [0u8; HEADER] {
            // Where the records end in a file allocated ahead; zeros with data after them are
            // damage, as a record that fails its checksum with data after it is.
            if !zeros_from(path, offset)? {
                return Err(StoreError::Corrupt(format!(
                    "{}: an empty record header at byte {offset} with data after it",
                    path.display()
                )));
            }
            ends_in_zeros = true;
            break;
        }
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let sum = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let index = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        if offset + HEADER as u64 + u64::from(len) > file_len {
            break;
        }
        let mut payload = vec![0u8; len as usize];
        if reader.read_exact(&mut payload).is_err() || checksum(index, &payload) != sum {
            // A crash mid-append leaves a short or garbled last record and nothing after it but
            // what the file system padded with zeros; a bad record with data behind it is damage.
            let end = offset + HEADER as u64 + u64::from(len);
            if end < file_len && !zeros_from(path, end)? {
                return Err(StoreError::Corrupt(format!(
                    "{}: the record at byte {offset} fails its checksum and data follows it",
                    path.display()
                )));
            }
            break;
        }
        let entry: Entry = decode("log entry", &payload)?;
        if entry.log_id.index != index {
            return Err(StoreError::Corrupt(format!(
                "{} holds entry {} under index {index}",
                path.display(),
                entry.log_id
            )));
        }
        let location = Location {
            log_id: entry.log_id,
            segment: first,
            offset,
            len: len + HEADER as u32,
        };
        offset += u64::from(location.len);
        entries.push(location);
    }
    Ok(Scanned {
        entries,
        valid_len: offset,
        file_len,
        zeros_after: ends_in_zeros || offset == file_len || zeros_from(path, offset)?,
    })
}

/// Whether everything in the file at `path` from `from` on is zero.
fn zeros_from(path: &Path, from: u64) -> Result<bool, StoreError> {
    let mut rest = Vec::new();
    let mut file = File::open(path)?;
    std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(from))?;
    file.read_to_end(&mut rest)?;
    Ok(rest.iter().all(|&b| b == 0))
}

impl Segments {
    /// Opens the segments in `store_dir/raft-log`, cutting a torn end off the last one and
    /// skipping entries at or below `purged`. `seed` gives the entries to start a new log with
    /// when there is none yet (an older store's log, moved here once).
    pub(crate) fn open(
        store_dir: &Path,
        purged: Option<u64>,
        seed: impl FnOnce() -> Result<Vec<Entry>, StoreError>,
    ) -> Result<Arc<Self>, StoreError> {
        let dir = store_dir.join(DIR);
        if !dir.exists() {
            create(store_dir, &dir, seed()?)?;
        }
        let mut firsts = Vec::new();
        for item in std::fs::read_dir(&dir)? {
            let name = item?.file_name();
            let name = name.to_string_lossy();
            if let Some(first) = name
                .strip_suffix(".seg")
                .and_then(|n| n.parse::<u64>().ok())
            {
                firsts.push(first);
            }
        }
        firsts.sort_unstable();
        let mut state = State {
            files: BTreeMap::new(),
            tail_len: 0,
            allocated: 0,
            entries: BTreeMap::new(),
        };
        let mut last: Option<u64> = None;
        for (i, &first) in firsts.iter().enumerate() {
            let path = segment_path(&dir, first);
            let scanned = scan(&path, first)?;
            let is_last = i + 1 == firsts.len();
            let torn = scanned.torn();
            if torn {
                if !is_last {
                    return Err(StoreError::Corrupt(format!(
                        "{} is damaged at byte {} and is not the last segment",
                        path.display(),
                        scanned.valid_len
                    )));
                }
                tracing::warn!(
                    path = %path.display(),
                    bytes = scanned.file_len - scanned.valid_len,
                    "cutting a torn end off the Raft log (an append was interrupted)"
                );
            }
            for location in scanned.entries {
                let index = location.log_id.index;
                if let Some(last) = last
                    && index <= last
                {
                    return Err(StoreError::Corrupt(format!(
                        "the Raft log goes back from index {last} to {index} in {}",
                        path.display()
                    )));
                }
                last = Some(index);
                if purged.is_none_or(|p| index > p) {
                    state.entries.insert(index, location);
                }
            }
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            if is_last {
                state.allocated = scanned.file_len;
                if torn {
                    file.set_len(scanned.valid_len)?;
                    state.allocated = scanned.valid_len;
                }
                state.tail_len = scanned.valid_len;
            }
            // A process killed before its sync leaves its appends in the page cache, where
            // this open reads them: they count as synced from here on, so sync them now.
            file.sync_data()?;
            state.files.insert(first, Arc::new(file));
        }
        if state.files.is_empty() {
            let first = purged.map_or(0, |p| p + 1);
            state
                .files
                .insert(first, Arc::new(new_segment(&dir, first)?));
        }
        Ok(Self::start(dir, state)?)
    }

    fn start(dir: PathBuf, state: State) -> std::io::Result<Arc<Self>> {
        let (syncs, waiting) = mpsc::channel::<SyncWaiter>();
        let last = state.entries.last_key_value().map(|(_, l)| l.log_id);
        let (synced, _) = watch::channel(Synced {
            through: last,
            written: last,
            ..Synced::default()
        });
        let marks = synced.clone();
        let held = Arc::<Held>::default();
        let hold = held.clone();
        let thread = std::thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || {
                while let Ok(first) = waiting.recv() {
                    drop(
                        hold.released
                            .wait_while(lock(&hold.held), |held| *held)
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                    let mut batch = vec![first];
                    batch.extend(waiting.try_iter());
                    // Each file once, in the order the appends came; a failure fails every
                    // append of the batch from the first failing file on.
                    let mut result: Result<(), String> = Ok(());
                    let mut done: Vec<*const File> = Vec::new();
                    for waiter in &batch {
                        let key = Arc::as_ptr(&waiter.file);
                        if result.is_ok() && !done.contains(&key) {
                            result = waiter.file.sync_data().map_err(|e| e.to_string());
                            done.push(key);
                        }
                    }
                    mark_synced(&marks, &batch, result.is_ok());
                    for waiter in batch {
                        if let Some(callback) = waiter.callback {
                            callback
                                .log_io_completed(result.clone().map_err(std::io::Error::other));
                        } else if let Err(e) = &result {
                            tracing::error!(
                                error = %e,
                                "a sync of the Raft log failed after the leader's append was \
                                 acknowledged; nothing past it is applied"
                            );
                        }
                    }
                }
            })?;
        Ok(Arc::new(Segments {
            dir,
            state: Mutex::new(state),
            syncs: Mutex::new(Some(syncs)),
            thread: Mutex::new(Some(thread)),
            synced,
            held,
            recent: Mutex::default(),
        }))
    }

    /// Stops the sync thread before its next sync until the guard is dropped.
    pub(crate) fn hold_syncs(&self) -> SyncsHeld {
        *lock(&self.held.held) = true;
        SyncsHeld(self.held.clone())
    }

    /// The synced mark, for whoever must wait for an entry to be on disk.
    pub(crate) fn synced(&self) -> LogSynced {
        LogSynced {
            rx: self.synced.subscribe(),
        }
    }

    /// The last entry's log id, if any entry is kept.
    pub(crate) fn last(&self) -> Option<LogId<NodeId>> {
        lock(&self.state)
            .entries
            .last_key_value()
            .map(|(_, l)| l.log_id)
    }

    /// Writes `entries` after the last one and has them synced. `callback` fires once they are
    /// on disk, or, with `ack_written`, as soon as they are written: the leader's own append,
    /// which the state machine and the followers' commit index wait for instead.
    pub(crate) fn append(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        callback: LogFlushed<TypeConfig>,
        ack_written: bool,
    ) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        let mut written = Vec::new();
        for entry in entries {
            let len = record(&entry, &mut bytes)?;
            written.push((entry, len));
        }
        let mut state = lock(&self.state);
        let Some(first_index) = written.first().map(|(entry, _)| entry.log_id.index) else {
            drop(state);
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        // openraft truncates before it overwrites; should an append still land on kept entries,
        // they are replaced, as a keyed store would.
        if state.entries.contains_key(&first_index) {
            self.truncate_locked(&mut state, first_index)?;
        }
        if state.tail_len >= SEGMENT_BYTES {
            let file = new_segment(&self.dir, first_index)?;
            state.files.insert(first_index, Arc::new(file));
            state.tail_len = 0;
            state.allocated = 0;
        }
        let (&segment, file) = state
            .files
            .last_key_value()
            .expect("a segment is always open");
        let file = file.clone();
        let end = state.tail_len + bytes.len() as u64;
        if end > state.allocated {
            // Zeros after the records only: the records themselves write the blocks up to `end`.
            let to = end.next_multiple_of(AHEAD_BYTES);
            fill_zeros(&file, end, to)?;
            state.allocated = to;
        }
        file.write_all_at(&bytes, state.tail_len)?;
        let mut offset = state.tail_len;
        let last = written
            .last()
            .map(|(entry, _)| entry.log_id)
            .expect("written is not empty");
        let mut recent = lock(&self.recent);
        for (entry, len) in written {
            let log_id = entry.log_id;
            recent.keep(entry, u64::from(len));
            state.entries.insert(
                log_id.index,
                Location {
                    log_id,
                    segment,
                    offset,
                    len,
                },
            );
            offset += u64::from(len);
        }
        drop(recent);
        state.tail_len = offset;
        // Under the state's lock, which every truncation holds. Nobody waits for `written` to
        // grow: no wake-up.
        let mut epoch = 0;
        self.synced.send_if_modified(|synced| {
            synced.written = Some(last);
            epoch = synced.epoch;
            false
        });
        drop(state);
        let callback = if ack_written {
            callback.log_io_completed(Ok(()));
            None
        } else {
            Some(callback)
        };
        lock(&self.syncs)
            .as_ref()
            .ok_or_else(|| StoreError::Sync("the log's sync thread has stopped".into()))?
            .send(SyncWaiter {
                file,
                last,
                epoch,
                callback,
            })
            .map_err(|_| StoreError::Sync("the log's sync thread has stopped".into()))
    }

    /// The kept entries in `range`, in index order.
    pub(crate) fn read<RB: RangeBounds<u64>>(&self, range: RB) -> Result<Vec<Entry>, StoreError> {
        let wanted: Vec<(Location, Arc<File>)> = {
            let state = lock(&self.state);
            state
                .entries
                .range(range)
                .map(|(_, l)| (*l, state.files[&l.segment].clone()))
                .collect()
        };
        // The entries as appended, where still held and the log has not moved on since the
        // lookup above; the rest from the files, without the lock (a learner catching up reads
        // many, and appends take it).
        let held: Vec<Option<Entry>> = {
            let recent = lock(&self.recent);
            wanted
                .iter()
                .map(|(location, _)| recent.get(location.log_id))
                .collect()
        };
        let mut entries = Vec::with_capacity(wanted.len());
        let mut buf = Vec::new();
        for ((location, file), held) in wanted.into_iter().zip(held) {
            if let Some(entry) = held {
                entries.push(entry);
                continue;
            }
            buf.resize(location.len as usize, 0);
            file.read_exact_at(&mut buf, location.offset)?;
            let payload = &buf[HEADER..];
            let sum = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
            if checksum(location.log_id.index, payload) != sum {
                return Err(StoreError::Corrupt(format!(
                    "log entry {} fails its checksum",
                    location.log_id
                )));
            }
            entries.push(decode("log entry", payload)?);
        }
        Ok(entries)
    }

    /// Removes every entry from `index` on, durably.
    pub(crate) fn truncate(&self, index: u64) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        self.truncate_locked(&mut state, index)
    }

    fn truncate_locked(&self, state: &mut State, index: u64) -> Result<(), StoreError> {
        let Some(&at) = state.entries.get(&index) else {
            return Ok(());
        };
        let later: Vec<u64> = state
            .files
            .range(at.segment + 1..)
            .map(|(&first, _)| first)
            .collect();
        for first in &later {
            state.files.remove(first);
            std::fs::remove_file(segment_path(&self.dir, *first))?;
        }
        let file = state.files[&at.segment].clone();
        file.set_len(at.offset)?;
        // Every segment, not only the cut one: appends still waiting for their sync may be in
        // an earlier one, and from here on everything before `index` counts as on disk.
        for file in state.files.values() {
            file.sync_data()?;
        }
        if !later.is_empty() {
            sync_dir(&self.dir)?;
        }
        state.tail_len = at.offset;
        state.allocated = at.offset;
        state.entries.split_off(&index);
        lock(&self.recent).forget_from(index);
        let kept = state.entries.last_key_value().map(|(_, l)| l.log_id);
        self.synced.send_modify(|synced| {
            synced.epoch += 1;
            synced.through = kept;
            synced.written = kept;
        });
        Ok(())
    }

    /// Forgets every entry up to `index` and deletes the segments holding nothing else.
    pub(crate) fn purge(&self, index: u64) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        state.entries = state.entries.split_off(&(index + 1));
        lock(&self.recent).forget_through(index);
        // A segment goes when the next one starts at or below the first entry kept.
        let firsts: Vec<u64> = state.files.keys().copied().collect();
        let mut removed = false;
        for pair in firsts.windows(2) {
            if pair[1] <= index + 1 {
                state.files.remove(&pair[0]);
                std::fs::remove_file(segment_path(&self.dir, pair[0]))?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// Writes zeros into `file` from `from` to `to`: blocks written, not only reserved, so that the
/// appends which overwrite them change nothing but data.
fn fill_zeros(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
    let mut at = from;
    while at < to {
        let step = (to - at).min(ZEROS.len() as u64);
        file.write_all_at(&ZEROS[..step as usize], at)?;
        at += step;
    }
    Ok(())
}

fn new_segment(dir: &Path, first: u64) -> Result<File, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(segment_path(dir, first))?;
    sync_dir(dir)?;
    Ok(file)
}

/// Makes `dir` holding `entries` whole or not at all: written beside it, synced, renamed.
fn create(store_dir: &Path, dir: &Path, entries: Vec<Entry>) -> Result<(), StoreError> {
    let building = store_dir.join(format!("{DIR}.new"));
    if building.exists() {
        std::fs::remove_dir_all(&building)?;
    }
    std::fs::create_dir_all(&building)?;
    let first = entries.first().map_or(0, |e| e.log_id.index);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(segment_path(&building, first))?;
    let mut bytes = Vec::new();
    for entry in &entries {
        record(entry, &mut bytes)?;
    }
    file.write_all_at(&bytes, 0)?;
    file.sync_data()?;
    sync_dir(&building)?;
    std::fs::rename(&building, dir)?;
    sync_dir(store_dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::blank_ent;

    fn blank(index: u64) -> Entry {
        blank_ent::<TypeConfig>(1, 1, index)
    }

    #[test]
    fn the_recent_entries_stay_within_their_bytes_and_follow_truncations_and_purges() {
        let mut recent = Recent::default();
        let quarter = RECENT_BYTES / 4;
        for index in 1..=6 {
            recent.keep(blank(index), quarter);
        }
        // The oldest went as the newest came: never more than the bound.
        assert_eq!(recent.bytes, RECENT_BYTES);
        assert_eq!(
            recent.entries.keys().copied().collect::<Vec<_>>(),
            [3, 4, 5, 6]
        );
        // Kept again at the same index: counted once.
        recent.keep(blank(6), quarter);
        assert_eq!(recent.bytes, RECENT_BYTES);

        recent.forget_from(5);
        assert_eq!(recent.entries.keys().copied().collect::<Vec<_>>(), [3, 4]);
        assert_eq!(recent.bytes, 2 * quarter);
        recent.forget_through(3);
        assert_eq!(recent.entries.keys().copied().collect::<Vec<_>>(), [4]);
        assert_eq!(recent.bytes, quarter);
    }
}
