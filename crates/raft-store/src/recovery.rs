//! Boot: the registry is the stored snapshot's, plus, for a store written before applying
//! stopped writing to sled, the commands it kept after it (openraft re-applies the rest of the
//! log).
//! `apply` is deterministic, so replaying them in order gives back the state exactly; refused
//! commands replay as refusals and leave the state as they did the first time.

use crate::codec::{decode, get_json};
use crate::keys::{APPLIED, MEMBERSHIP, cmd_index, cmd_key};
use crate::snapshot::{Meta, remove_commands};
use crate::{NodeId, StoreError};
use gatehouse_registry::{Proposal, Registry};
use openraft::{BasicNode, LogId, StoredMembership};

pub(crate) struct Recovered {
    pub registry: Registry,
    pub applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
    pub replayed: usize,
}

pub(crate) fn recover(
    state: &sled::Tree,
    snapshot: Option<(Meta, Vec<u8>)>,
) -> Result<Recovered, StoreError> {
    let (mut registry, snapshot_applied, snapshot_membership) = match snapshot {
        Some((meta, data)) => (
            Registry::from_bytes(&data).map_err(|source| StoreError::Decode {
                what: "snapshot registry",
                source,
            })?,
            meta.last_log_id,
            meta.last_membership,
        ),
        None => (Registry::new(), None, StoredMembership::default()),
    };

    // The applied id and membership are written in the same batch as the commands; they win
    // over the snapshot's when newer (a crash can leave either one ahead of the other).
    let stored_applied =
        get_json::<Option<LogId<NodeId>>>(state, APPLIED, "applied log id")?.flatten();
    let (applied, membership) = if stored_applied > snapshot_applied {
        let membership = get_json(state, MEMBERSHIP, "membership")?.ok_or_else(|| {
            StoreError::Corrupt("an applied log id is stored without its membership".into())
        })?;
        (stored_applied, membership)
    } else {
        (snapshot_applied, snapshot_membership)
    };

    // Commands the snapshot covers may be left over from a crash before they were dropped.
    let from = match snapshot_applied {
        Some(last) => {
            remove_commands(state, ..=cmd_key(last.index))?;
            last.index + 1
        }
        None => 0,
    };

    let mut replayed = 0;
    for item in state.range(cmd_key(from)..=cmd_key(u64::MAX)) {
        let (key, value) = item?;
        let index = cmd_index(&key)?;
        if applied.is_none_or(|applied| index > applied.index) {
            return Err(StoreError::Corrupt(format!(
                "command {index} is stored beyond the applied log id {applied:?}"
            )));
        }
        let proposal: Proposal = decode("applied command", &value)?;
        // The result went to the client the first time; a refusal replays as a refusal.
        let _ = registry.apply(index, &proposal);
        replayed += 1;
    }
    Ok(Recovered {
        registry,
        applied,
        membership,
        replayed,
    })
}
