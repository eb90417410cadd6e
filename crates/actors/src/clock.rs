//! The node's wall clock in milliseconds, the unit of the registry's timestamps. The decisions
//! never read it: the actors pass them the time.

use gatehouse_registry::call::Timestamp;
use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> Timestamp {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
