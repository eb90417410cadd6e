//! The handle callers hold, and the writer task that group-commits what they queue.

use crate::disk::Disk;
use crate::record::Entry;
use futures::FutureExt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::Instrument;

/// At most this many entries go into one write.
const MAX_BATCH: usize = 8192;
/// A warning each time this many more entries wait for the writer.
const QUEUE_WARN_EVERY: u64 = 65_536;

/// A node's audit log. Cheap to clone; every clone feeds the same writer task.
#[derive(Debug, Clone)]
pub struct AuditLog {
    writer: Arc<WriterState>,
}

/// Counters since the log was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Batches written and synced.
    pub batches: u64,
    /// Records in them.
    pub records: u64,
    /// Entries queued and not yet taken by the writer.
    pub queued: u64,
}

/// The writer task as every handle and the task itself see it: its queue, whether it is closed
/// or has failed, and its counters.
#[derive(Debug)]
struct WriterState {
    // Unbounded on purpose: `record` sits on the response path and must neither wait nor drop,
    // and a bounded channel with a spawned send as overflow would let a later `flush` overtake
    // the entries before it. The writer drains everything per batch, so the queue only grows
    // while the disk is slower than the calls; `queued` counts it and a warning says so.
    tx: mpsc::UnboundedSender<Msg>,
    /// Ends a batch's linger early: signalled by whoever queues a message someone waits on, or
    /// a full batch. A fire-and-forget record does not wake the writer while it lingers.
    hurry: Notify,
    closed: AtomicBool,
    /// Set when a write failed (or one was made to fail): from then on every entry is refused,
    /// at once, so callers that must not act without a record find out before they act.
    failure: Mutex<Option<(io::ErrorKind, String)>>,
    queued: AtomicU64,
    batches: AtomicU64,
    records: AtomicU64,
}

// Nearly every message is a record: boxing it would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Msg {
    Record {
        at_ms: u64,
        entry: Entry,
        done: Option<oneshot::Sender<io::Result<u64>>>,
    },
    Flush(oneshot::Sender<io::Result<()>>),
    Close(oneshot::Sender<()>),
}

impl AuditLog {
    /// Opens (creating) the log in `dir` and spawns its writer task on the current tokio runtime.
    /// Recovers seq and previous hash from the last record; a torn final line (crash mid-write)
    /// is cut off with a warning; any other damage is an error naming the line.
    pub fn open(dir: &Path, node: u64) -> io::Result<AuditLog> {
        Self::open_with(dir, node, HEAD_EVERY)
    }

    /// [`AuditLog::open`] with the head moved at most every `head_every` while batches come.
    pub(crate) fn open_with(dir: &Path, node: u64, head_every: Duration) -> io::Result<AuditLog> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let disk = Disk::open(dir, node)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = Arc::new(WriterState {
            tx,
            hurry: Notify::new(),
            closed: AtomicBool::new(false),
            failure: Mutex::new(None),
            queued: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            records: AtomicU64::new(0),
        });
        let span = tracing::info_span!("audit", node, dir = %dir.display());
        runtime.spawn(write_loop(disk, rx, writer.clone(), head_every).instrument(span));
        Ok(AuditLog { writer })
    }

    /// Queues the entry for the next group commit and returns at once (never waits for disk).
    /// Refused, with nothing queued, when the log is closed or its writer has failed, so a
    /// caller that must not act without its record learns it before it acts. An entry taken
    /// here is still lost if the writer fails before its batch is synced, or the process dies.
    pub fn record(&self, entry: Entry) -> io::Result<()> {
        self.writable()?;
        if self.send(entry, None) {
            Ok(())
        } else {
            Err(closed())
        }
    }

    /// Resolves with the record's sequence number once its batch is fsync'd; refused at once
    /// when the log is closed or its writer has failed.
    pub async fn record_durable(&self, entry: Entry) -> io::Result<u64> {
        self.writable()?;
        let (done, answer) = oneshot::channel();
        if !self.send(entry, Some(done)) {
            return Err(closed());
        }
        answer.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Whether the log takes entries: it is open and its writer has not failed.
    pub fn writable(&self) -> io::Result<()> {
        if self.writer.closed.load(Ordering::SeqCst) {
            return Err(closed());
        }
        match &*lock(&self.writer.failure) {
            Some((kind, message)) => Err(io::Error::new(*kind, message.clone())),
            None => Ok(()),
        }
    }

    /// Fault injection, for tests of what must not happen without a record: the writer fails
    /// from now on exactly as after a write the disk refused. Entries queued and not yet
    /// written are refused with it; a restart (a new `open`) recovers from what is on disk.
    pub fn inject_write_failure(&self, reason: &str) {
        fail(&self.writer, io::ErrorKind::Other, reason.to_owned());
    }

    /// Waits until everything queued before it is durable.
    pub async fn flush(&self) -> io::Result<()> {
        let (done, answer) = oneshot::channel();
        if self.writer.tx.send(Msg::Flush(done)).is_err() {
            return Err(closed());
        }
        self.writer.hurry.notify_one();
        answer.await.unwrap_or_else(|_| Err(closed()))
    }

    /// Flushes and stops the writer; later records are refused.
    pub async fn close(&self) {
        self.writer.closed.store(true, Ordering::SeqCst);
        let (done, answer) = oneshot::channel();
        if self.writer.tx.send(Msg::Close(done)).is_ok() {
            self.writer.hurry.notify_one();
            let _ = answer.await;
        }
    }

    pub fn stats(&self) -> Stats {
        Stats {
            batches: self.writer.batches.load(Ordering::Relaxed),
            records: self.writer.records.load(Ordering::Relaxed),
            queued: self.writer.queued.load(Ordering::Relaxed),
        }
    }

    fn send(&self, entry: Entry, done: Option<oneshot::Sender<io::Result<u64>>>) -> bool {
        if self.writer.closed.load(Ordering::SeqCst) {
            return false;
        }
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let queued = self.writer.queued.fetch_add(1, Ordering::Relaxed) + 1;
        if queued.is_multiple_of(QUEUE_WARN_EVERY) {
            tracing::warn!(
                queued,
                "audit entries are queueing: the disk is slower than the calls"
            );
        }
        let urgent = done.is_some() || queued.is_multiple_of(MAX_BATCH as u64);
        if self
            .writer
            .tx
            .send(Msg::Record { at_ms, entry, done })
            .is_err()
        {
            self.writer.queued.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        if urgent {
            self.writer.hurry.notify_one();
        }
        true
    }
}

/// How long a batch of fire-and-forget records may wait for company before it is written: the
/// most a crash can lose of records nobody waited for, beyond those still queued.
pub const LINGER: Duration = Duration::from_millis(10);

/// How far behind the synced records `audit.head` may fall while batches keep coming. The head
/// only narrows what a truncated log can hide (a head behind the log is allowed, and is what a
/// crash leaves), so it need not cost a file write and a sync per batch.
pub const HEAD_EVERY: Duration = Duration::from_millis(200);

impl Msg {
    /// Someone waits on it: a durable record, a flush, a close.
    fn urgent(&self) -> bool {
        match self {
            Msg::Record { done, .. } => done.is_some(),
            Msg::Flush(_) | Msg::Close(_) => true,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Puts the log into its failed state (once: the first failure is the one reported).
fn fail(writer: &WriterState, kind: io::ErrorKind, message: String) {
    let mut failure = lock(&writer.failure);
    if failure.is_none() {
        tracing::error!(error = %message, "audit log write failed; refusing further entries");
        *failure = Some((kind, message));
    }
}

/// When `audit.head` moves: after a batch, at once when it last moved `every` ago or more, else
/// once that much time has passed (or at close).
struct HeadPace {
    every: Duration,
    moved: Option<tokio::time::Instant>,
    /// A synced batch is past the head.
    behind: bool,
}

impl HeadPace {
    /// When a head left behind is to move (`None`: it is not behind).
    fn due_at(&self) -> Option<tokio::time::Instant> {
        let moved = self.moved.filter(|_| self.behind)?;
        Some(moved + self.every)
    }

    fn due_now(&self) -> bool {
        self.behind && self.moved.is_none_or(|moved| moved.elapsed() >= self.every)
    }
}

/// Moves `audit.head` to the batch just answered for, off the answer's path. A failure here is
/// a failed log like any other: later entries are refused.
async fn advance_head(
    disk: Option<Disk>,
    writer: &WriterState,
    pace: &mut HeadPace,
) -> Option<Disk> {
    pace.moved = Some(tokio::time::Instant::now());
    pace.behind = false;
    let d = disk?;
    let moved = tokio::task::spawn_blocking(move || {
        let result = d.advance_head();
        (d, result)
    })
    .await;
    match moved {
        Ok((d, Ok(()))) => Some(d),
        Ok((_, Err(e))) => {
            fail(writer, e.kind(), format!("moving audit.head: {e}"));
            None
        }
        Err(e) => {
            fail(
                writer,
                io::ErrorKind::Other,
                format!("moving audit.head: {e}"),
            );
            None
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "audit log closed")
}

/// Takes everything queued (up to a batch), commits it with one write and one sync, answers,
/// then moves the head at the pace of `head_every` ([`HEAD_EVERY`], [`HeadPace`]), so a steady
/// stream of batches moves it a few times a second instead of once per batch.
/// Ends on `close` or when every handle is gone. After a failed write the log is not trusted to
/// continue: every later entry is refused, and a restart recovers from what is on disk.
async fn write_loop(
    disk: Disk,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    writer: Arc<WriterState>,
    head_every: Duration,
) {
    let mut disk = Some(disk);
    let mut closing = None;
    let mut head = HeadPace {
        every: head_every,
        moved: None,
        behind: false,
    };
    while closing.is_none() {
        let next = match head.due_at() {
            Some(at) => match tokio::time::timeout_at(at, rx.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    disk = advance_head(disk, &writer, &mut head).await;
                    continue;
                }
            },
            None => rx.recv().await,
        };
        let Some(first) = next else { break };
        // A permit left by a message already queued would cut a later linger short: spent
        // before the queue is drained, so one signalled after the drain still counts.
        let _ = writer.hurry.notified().now_or_never();
        let mut msgs = vec![first];
        while msgs.len() < MAX_BATCH && !matches!(msgs.last(), Some(Msg::Close(_))) {
            match rx.try_recv() {
                Ok(msg) => msgs.push(msg),
                Err(_) => break,
            }
        }
        // Nobody waits on this batch: let it gather for a moment, so a steady trickle of
        // fire-and-forget records costs one sync per LINGER rather than one per record. The
        // writer sleeps meanwhile instead of taking each record as it comes (a wake-up of
        // another thread per record); a durable record, a flush, a close or a full batch ends
        // the wait at once.
        if !msgs.iter().any(Msg::urgent) {
            let _ = tokio::time::timeout(LINGER, writer.hurry.notified()).await;
            while msgs.len() < MAX_BATCH && !matches!(msgs.last(), Some(Msg::Close(_))) {
                match rx.try_recv() {
                    Ok(msg) => msgs.push(msg),
                    Err(_) => break,
                }
            }
        }
        let mut entries = Vec::new();
        let mut waiters = Vec::new();
        let mut flushes = Vec::new();
        for msg in msgs {
            match msg {
                Msg::Record { at_ms, entry, done } => {
                    entries.push((at_ms, entry));
                    waiters.push(done);
                }
                Msg::Flush(done) => flushes.push(done),
                Msg::Close(done) => closing = Some(done),
            }
        }
        writer
            .queued
            .fetch_sub(entries.len() as u64, Ordering::Relaxed);
        let count = entries.len() as u64;
        let failure = lock(&writer.failure).clone();
        let result = match (disk.take(), failure) {
            (_, Some((kind, message))) => Err(io::Error::new(kind, message)),
            (Some(d), None) if entries.is_empty() => {
                disk = Some(d);
                Ok(0)
            }
            (Some(mut d), None) => {
                match tokio::task::spawn_blocking(move || {
                    let result = d.commit(entries);
                    (d, result)
                })
                .await
                {
                    Ok((d, result)) => {
                        disk = Some(d);
                        result
                    }
                    Err(e) => Err(io::Error::other(e)),
                }
            }
            (None, None) => Err(io::Error::other("audit writer lost its file")),
        };
        match result {
            Ok(first) => {
                writer
                    .batches
                    .fetch_add(u64::from(count > 0), Ordering::Relaxed);
                writer.records.fetch_add(count, Ordering::Relaxed);
                for (i, done) in waiters.into_iter().enumerate() {
                    if let Some(done) = done {
                        let _ = done.send(Ok(first + i as u64));
                    }
                }
                for done in flushes {
                    let _ = done.send(Ok(()));
                }
                head.behind |= count > 0;
                if head.due_now() || (head.behind && closing.is_some()) {
                    disk = advance_head(disk, &writer, &mut head).await;
                }
            }
            Err(e) => {
                fail(&writer, e.kind(), e.to_string());
                disk = None;
                if count > 0 {
                    tracing::error!(lost = count, error = %e, "audit entries not written");
                }
                for done in waiters.into_iter().flatten() {
                    let _ = done.send(Err(io::Error::new(e.kind(), e.to_string())));
                }
                for done in flushes {
                    let _ = done.send(Err(io::Error::new(e.kind(), e.to_string())));
                }
            }
        }
    }
    if head.behind {
        disk = advance_head(disk, &writer, &mut head).await;
    }
    drop(disk);
    rx.close();
    let mut dropped = 0u64;
    while let Ok(msg) = rx.try_recv() {
        dropped += u64::from(matches!(msg, Msg::Record { .. }));
    }
    if dropped > 0 {
        writer.queued.fetch_sub(dropped, Ordering::Relaxed);
        tracing::warn!(
            dropped,
            "audit log closed: entries queued after close were dropped"
        );
    }
    if let Some(done) = closing {
        let _ = done.send(());
    }
}
