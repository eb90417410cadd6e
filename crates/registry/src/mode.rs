//! The approval-mode taxonomy and capability classes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// How much a call may change the world, least to most. The order is the taxonomy: a mode is
/// "lower" when it is less dangerous, and policy may only ever move a call downwards from its
/// tool's declared maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    ReadOnly,
    LocalWrite,
    Network,
    Delegated,
    Destructive,
}

impl ApprovalMode {
    pub const ALL: [ApprovalMode; 5] = [
        ApprovalMode::ReadOnly,
        ApprovalMode::LocalWrite,
        ApprovalMode::Network,
        ApprovalMode::Delegated,
        ApprovalMode::Destructive,
    ];

    /// `network` and above go through propose, approve, execute unless policy lowers them.
    pub fn needs_approval(self) -> bool {
        self >= ApprovalMode::Network
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::ReadOnly => "read_only",
            ApprovalMode::LocalWrite => "local_write",
            ApprovalMode::Network => "network",
            ApprovalMode::Delegated => "delegated",
            ApprovalMode::Destructive => "destructive",
        }
    }
}

impl fmt::Display for ApprovalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a tool is for, as an agent's loop sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapabilityClass {
    Observe,
    Recall,
    ThinkSupport,
    Act,
    Verify,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taxonomy_is_ordered_and_approval_starts_at_network() {
        assert!(ApprovalMode::ALL.windows(2).all(|w| w[0] < w[1]));
        let needing: Vec<_> = ApprovalMode::ALL
            .into_iter()
            .filter(|m| m.needs_approval())
            .collect();
        assert_eq!(
            needing,
            [
                ApprovalMode::Network,
                ApprovalMode::Delegated,
                ApprovalMode::Destructive
            ]
        );
    }

    #[test]
    fn modes_round_trip_as_snake_case() {
        for mode in ApprovalMode::ALL {
            let text = serde_json::to_string(&mode).unwrap();
            assert_eq!(text, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<ApprovalMode>(&text).unwrap(), mode);
        }
    }
}
