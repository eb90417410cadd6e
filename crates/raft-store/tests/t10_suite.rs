//! openraft's storage conformance suite against the sled store, each case in a fresh directory.

use gatehouse_raft_store::{LogStore, NodeId, StateMachineStore, TypeConfig, open};
use openraft::StorageError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

/// The store as a node opens it, leading as `me` when given ([`LogStore::leading_as`]).
struct SledBuilder {
    me: Option<NodeId>,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (log, state_machine) = open(dir.path()).expect("open store");
        let log = match self.me {
            Some(me) => log.leading_as(me),
            None => log,
        };
        Ok((dir, log, state_machine))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(SledBuilder { me: None }).expect("storage suite");
}

/// The suite's votes and entries are mostly node 0's and 1's: as either, its own appends
/// take the leader's path.
#[test]
fn openraft_storage_suite_passes_with_the_leaders_own_appends_acknowledged_once_written() {
    for me in [0, 1] {
        Suite::test_all(SledBuilder { me: Some(me) }).expect("storage suite");
    }
}
