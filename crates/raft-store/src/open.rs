//! Opening the store: one sled database holding the log, the state machine and the snapshot.

use crate::durable::Durable;
use crate::{LogStore, StateMachineStore, StoreError};
use std::path::Path;

/// sled's page cache. The registry lives in memory anyway; the cache mostly serves recent log
/// entries to replication and the boot-time replay.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// sled's own background flush, which bounds how much unsynced state-machine work a crash can
/// lose. Log and vote writes never wait for it: they go through `Durable`.
const FLUSH_EVERY_MS: u64 = 500;

/// Opens (or creates) the store in `dir`. Only one process may have it open: sled locks it.
pub fn open(dir: &Path) -> Result<(LogStore, StateMachineStore), StoreError> {
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(CACHE_BYTES)
        .flush_every_ms(Some(FLUSH_EVERY_MS))
        .open()?;
    let durable = Durable::start(db.clone(), dir)?;
    let log = LogStore::open(&db, durable.clone())?;
    let state_machine = StateMachineStore::open(&db, durable)?;
    Ok((log, state_machine))
}
