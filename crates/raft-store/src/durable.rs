//! Making sled's writes durable (the vote, a purge mark, snapshots), many at a time. sled's
//! `flush` writes its buffers out with `sync_file_range`, which neither reaches the device's
//! cache nor the file's metadata; so after it we `fdatasync` sled's data file ourselves. One thread does this for everyone: whatever
//! waits when a sync starts is covered by it (group commit), and completions fire in the order
//! they were asked for.

use crate::StoreError;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, mpsc};
use tokio::sync::oneshot;

/// Told once the writes made before the request are on disk.
type Waiter = oneshot::Sender<Result<(), String>>;

/// Cheap to clone. Dropping the last clone stops the sync thread and waits for it, so that the
/// database is closed (and may be opened again) once the stores are gone.
#[derive(Clone)]
pub(crate) struct Durable(Arc<Inner>);

struct Inner {
    requests: Option<mpsc::Sender<Waiter>>,
    thread: Option<std::thread::JoinHandle<()>>,
    db: sled::Db,
    file: Arc<File>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").finish_non_exhaustive()
    }
}

impl Durable {
    /// Starts the sync thread for the sled database at `dir`.
    pub(crate) fn start(db: sled::Db, dir: &Path) -> Result<Self, StoreError> {
        // sled 0.34 keeps its log and pages in `dir/db`.
        let file = Arc::new(File::open(dir.join("db"))?);
        let (requests, waiting) = mpsc::channel::<Waiter>();
        let (thread_db, thread_file) = (db.clone(), file.clone());
        let thread = std::thread::Builder::new()
            .name("raft-store-sync".into())
            .spawn(move || {
                while let Ok(first) = waiting.recv() {
                    let mut batch = vec![first];
                    batch.extend(waiting.try_iter());
                    let synced = sync(&thread_db, &thread_file).map_err(|e| e.to_string());
                    for done in batch {
                        let _ = done.send(synced.clone());
                    }
                }
            })?;
        Ok(Durable(Arc::new(Inner {
            requests: Some(requests),
            thread: Some(thread),
            db,
            file,
        })))
    }

    fn send(&self, waiter: Waiter) -> Result<(), StoreError> {
        self.0
            .requests
            .as_ref()
            .ok_or_else(|| StoreError::Sync("the sync thread has stopped".into()))?
            .send(waiter)
            .map_err(|_| StoreError::Sync("the sync thread has stopped".into()))
    }

    /// Waits until every write made so far is on disk.
    pub(crate) async fn sync(&self) -> Result<(), StoreError> {
        let (done, synced) = oneshot::channel();
        self.send(done)?;
        synced
            .await
            .map_err(|_| StoreError::Sync("the sync thread has stopped".into()))?
            .map_err(StoreError::Sync)
    }
}

impl Durable {
    /// Syncs on the calling thread: for rare, already-blocking writers such as snapshots.
    pub(crate) fn sync_here(&self) -> Result<(), StoreError> {
        sync(&self.0.db, &self.0.file).map_err(|e| StoreError::Sync(e.to_string()))
    }
}

fn sync(db: &sled::Db, file: &File) -> std::io::Result<()> {
    db.flush().map_err(std::io::Error::other)?;
    file.sync_data()
}
