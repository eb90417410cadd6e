//! openraft's storage conformance suite against the sled store, each case in a fresh directory.

use gatehouse_raft_store::{LogStore, NodeId, StateMachineStore, TypeConfig, open};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, state_machine) = open(dir.path()).expect("open store");
        Ok((dir, log, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(SledBuilder).expect("storage suite");
}
