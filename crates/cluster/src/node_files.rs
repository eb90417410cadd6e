//! What a node keeps in its data directory beside the Raft store: who it is and where it
//! listens (so a restart binds the same addresses Raft membership remembers), the cluster's
//! peer secret, and the bootstrap admin key.

use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The audit log's directory inside a data directory.
pub const AUDIT_DIR: &str = "audit";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub node_id: u64,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
}

/// Left by `gatehouse snapshot restore` until the restored node's first start has finished it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreMarker {
    /// The node id the directory was restored for.
    pub node_id: u64,
    /// The backup's index and term.
    pub index: u64,
    pub term: u64,
    /// The node of the old cluster that served the backup.
    pub source_node: u64,
}

const RESTORE_MARKER: &str = "restored.json";

#[derive(Debug, Clone)]
pub struct NodeFiles {
    dir: PathBuf,
}

impl NodeFiles {
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(NodeFiles {
            dir: dir.to_owned(),
        })
    }

    pub fn raft_dir(&self) -> PathBuf {
        self.dir.join("raft")
    }

    /// The node's audit log (see `gatehouse-audit`).
    pub fn audit_dir(&self) -> PathBuf {
        self.dir.join(AUDIT_DIR)
    }

    pub fn admin_key_path(&self) -> PathBuf {
        self.dir.join("admin.key")
    }

    pub fn identity(&self) -> anyhow::Result<Option<Identity>> {
        read_optional(&self.dir.join("node.json"))?
            .map(|text| serde_json::from_str(&text).context("node.json is damaged"))
            .transpose()
    }

    pub fn write_identity(&self, identity: &Identity) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(identity)?;
        write_atomically(&self.dir.join("node.json"), text.as_bytes(), 0o644)
    }

    pub fn peer_secret(&self) -> anyhow::Result<Option<String>> {
        Ok(read_optional(&self.dir.join("cluster.key"))?.map(|s| s.trim().to_owned()))
    }

    pub fn write_peer_secret(&self, secret: &str) -> anyhow::Result<()> {
        write_atomically(&self.dir.join("cluster.key"), secret.as_bytes(), 0o600)
    }

    /// The marker of a restore not yet finished by a first start.
    pub fn restore_marker(&self) -> anyhow::Result<Option<RestoreMarker>> {
        read_optional(&self.dir.join(RESTORE_MARKER))?
            .map(|text| serde_json::from_str(&text).context("restored.json is damaged"))
            .transpose()
    }

    pub fn write_restore_marker(&self, marker: &RestoreMarker) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(marker)?;
        write_atomically(&self.dir.join(RESTORE_MARKER), text.as_bytes(), 0o644)
    }

    pub fn remove_restore_marker(&self) -> anyhow::Result<()> {
        let path = self.dir.join(RESTORE_MARKER);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
    }

    pub fn write_admin_key(&self, key: &str) -> anyhow::Result<()> {
        write_atomically(&self.admin_key_path(), format!("{key}\n").as_bytes(), 0o600)
    }
}

fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Written to a temporary file, synced, then renamed: a crash leaves the old file or the new.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// A fresh 256-bit secret as hex, with a prefix saying what it is.
pub fn new_key(prefix: &str) -> String {
    let bytes: [u8; 32] = rand::random();
    format!("{prefix}_{}", hex::encode(bytes))
}
