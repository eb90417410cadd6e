//! Opening the store: the Raft log's segment files, and one sled database holding the vote,
//! the state machine and the snapshot.

use crate::durable::Durable;
use crate::{LogStore, StateMachineStore, StoreError};
use std::path::Path;
use std::time::{Duration, Instant};

/// sled's page cache. sled holds only the vote, the purge mark and the snapshot now; the
/// registry lives in memory and the log in its own files.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// sled's own background flush. Nothing waits for it: the vote, the purge mark and snapshots
/// are synced through `Durable`, and the log and the committed id are not in sled.
const FLUSH_EVERY_MS: u64 = 500;

/// How long `open` waits for another holder of the store's lock to let go.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens (or creates) the store in `dir`. Only one process may have it open: sled locks it.
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .flush_every_ms(Some(FLUSH_EVERY_MS));
    // A store just dropped in this process (a node restarted in place) releases sled's file
    // lock only once sled's own threads have wound down: give it a moment before giving up.
    let deadline = Instant::now() + LOCK_WAIT;
    let db = loop {
        match config.open() {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            opened => break opened?,
        }
    };
    let durable = Durable::start(db.clone(), dir)?;
    let log = LogStore::open(&db, dir, durable.clone())?;
    let state_machine = StateMachineStore::open(&db, durable, log.synced())?;
    Ok((log, state_machine))
}
