//! `gatehouse snapshot save FILE`: a backup of the replicated state, streamed from a node into a
//! file written atomically. `gatehouse snapshot restore FILE`: a new cluster's first data
//! directory made from a backup, offline.

use super::client::{self, Remote, RemoteArgs, explain};
use crate::exit::Exit;
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gatehouse_cluster::backup::{self, FORMAT, Header};
use gatehouse_cluster::node_files::{NodeFiles, RestoreMarker, new_key, write_atomically};
use gatehouse_proto::v1 as pb;
use gatehouse_proto::v1::snapshot_service_client::SnapshotServiceClient;
use gatehouse_registry::Registry;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often a long save reports how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The address a restored membership names until the node's first start records its own.
const PLACEHOLDER_ADDR: &str = "0.0.0.0:0";

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent copy of the cluster's state to FILE (needs the admin role).
    Save {
        /// Where to write the backup (written whole, then renamed into place).
        file: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Make DIR the data directory of a new one-node cluster holding FILE's state (offline).
    Restore(RestoreArgs),
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A backup `snapshot save` wrote.
    pub file: PathBuf,
    /// A new data directory: it must not exist or be empty.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The new cluster's first node id, 1 or more (the old cluster's ids are forgotten).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub node_id: u64,
}

pub async fn save(remote: &Remote, file: &Path) -> anyhow::Result<Exit> {
    let (channel, bearer) = client::connect(remote).await?;
    let mut snapshots = SnapshotServiceClient::with_interceptor(channel, bearer);
    let mut stream = snapshots
        .save(pb::SaveSnapshotRequest {})
        .await
        .map_err(explain)?
        .into_inner();
    let info = stream
        .message()
        .await
        .map_err(explain)?
        .and_then(|first| first.info)
        .context("the node's answer did not start with the backup's info")?;
    let mut progress = Progress::new(info.total_bytes);
    let mut body = Vec::with_capacity(usize::try_from(info.total_bytes).unwrap_or(0));
    while let Some(chunk) = stream.message().await.map_err(explain)? {
        body.extend_from_slice(&chunk.data);
        progress.advance(body.len() as u64);
    }
    let header = Header {
        format: info.format,
        index: info.index,
        term: info.term,
        created_at_ms: info.created_at_ms,
        source_node: info.node_id,
        body_bytes: info.total_bytes,
        body_sha256: info.body_sha256,
    };
    header
        .check(&body)
        .context("the backup arrived damaged; nothing was written")?;
    let bytes = backup::encode(&header, &body);
    // Principals' key digests and call arguments are inside: readable by the owner only.
    write_atomically(file, &bytes, 0o600)?;
    println!(
        "saved {}: state at index {} (term {}) from node {}, {} bytes",
        file.display(),
        header.index,
        header.term,
        header.source_node,
        bytes.len()
    );
    Ok(Exit::Done)
}

/// Reports bytes received on stderr about once a second, and once at the end.
struct Progress {
    total: u64,
    last: Instant,
}

impl Progress {
    fn new(total: u64) -> Self {
        Progress {
            total,
            last: Instant::now(),
        }
    }

    fn advance(&mut self, received: u64) {
        if received >= self.total || self.last.elapsed() >= PROGRESS_EVERY {
            self.last = Instant::now();
            let percent = received * 100 / self.total.max(1);
            eprintln!("snapshot: {received}/{} bytes ({percent}%)", self.total);
        }
    }
}

pub fn restore(args: &RestoreArgs) -> anyhow::Result<Exit> {
    refuse_used_dir(&args.data_dir)?;
    let file =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let (header, body) = backup::decode(&file)
        .with_context(|| format!("{} cannot be restored", args.file.display()))?;
    let mut registry = Registry::from_bytes(body).with_context(|| {
        format!(
            "{} passed its checksum but its state does not decode (format {FORMAT})",
            args.file.display()
        )
    })?;
    registry.for_new_cluster(args.node_id);

    let files = NodeFiles::new(&args.data_dir)?;
    let restored = super::remote(async {
        gatehouse_raft_store::restore(
            &files.raft_dir(),
            args.node_id,
            PLACEHOLDER_ADDR,
            header.term,
            &registry,
        )
        .await
        .context("writing the restored state")?;
        Ok(Exit::Done)
    });
    restored?;
    files.write_restore_marker(&RestoreMarker {
        node_id: args.node_id,
        index: header.index,
        term: header.term,
        source_node: header.source_node,
    })?;
    // A fresh peer secret: the new cluster shares nothing with the old one but its state. Its
    // presence is also what makes `serve` resume from this directory.
    files.write_peer_secret(&new_key("peer"))?;
    println!(
        "restored the state at index {} (term {}, saved from node {}) into {} as node {}",
        header.index,
        header.term,
        header.source_node,
        args.data_dir.display(),
        args.node_id
    );
    println!(
        "start it with: gatehouse serve --data-dir {} --node-id {} --grpc ADDR --http ADDR",
        args.data_dir.display(),
        args.node_id
    );
    println!("the old cluster's API keys (its admin key too) work on the new one");
    Ok(Exit::Done)
}

/// A restore writes a whole new data directory: anything already there could be another node's.
fn refuse_used_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                bail!(
                    "{} is not empty: restore only into a new or empty data directory",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("reading {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_or_empty_directory_is_restored_into() {
        let dir = tempfile::tempdir().unwrap();
        assert!(refuse_used_dir(&dir.path().join("new")).is_ok());
        assert!(refuse_used_dir(dir.path()).is_ok());
        std::fs::write(dir.path().join("node.json"), "{}").unwrap();
        let err = refuse_used_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("is not empty"), "{err}");
    }
}
