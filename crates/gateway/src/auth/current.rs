//! Authentication that does not mistake a node that is behind for a credential that is unknown:
//! a node that just joined or restarted, or was cut off a moment ago, may not hold a principal
//! the cluster declared.

use super::{AuthError, AuthErrorKind, Caller};
use crate::error::GatewayError;
use gatehouse_cluster::cluster::{CATCH_UP, Cluster};
use gatehouse_registry::Registry;

/// Why a request is not authenticated.
#[derive(Debug, Clone)]
pub enum NotAuthenticated {
    /// The credential is missing, malformed, or names no principal even on a node that has
    /// caught up with the cluster: UNAUTHENTICATED (401).
    Refused(AuthError),
    /// The credential names no principal here and the node could not catch up to check again:
    /// it may well be good, so UNAVAILABLE (503), to be retried here or at another node.
    Unsure(String),
}

impl From<NotAuthenticated> for GatewayError {
    fn from(e: NotAuthenticated) -> Self {
        match e {
            NotAuthenticated::Refused(e) => e.into(),
            NotAuthenticated::Unsure(message) => GatewayError::unavailable(message),
        }
    }
}

/// Authenticates with `attempt` against this node's registry. A well-formed credential that
/// names no principal here is tried once more after the node caught up with the leader's commit
/// index ([`Cluster::catch_up_shared`]: one catch-up at a time however many unknown keys come).
pub async fn authenticate_current(
    cluster: &Cluster,
    attempt: impl Fn(&Registry) -> Result<Caller, AuthError>,
) -> Result<Caller, NotAuthenticated> {
    let first = attempt(&cluster.registry.read());
    match first {
        Err(e) if e.kind == AuthErrorKind::UnknownPrincipal => {
            if let Err(why) = cluster.catch_up_shared(CATCH_UP).await {
                return Err(NotAuthenticated::Unsure(format!(
                    "{}, and this node could not catch up with the cluster to check again \
                     ({why}); retry, here or at another node",
                    e.message
                )));
            }
            attempt(&cluster.registry.read()).map_err(NotAuthenticated::Refused)
        }
        other => other.map_err(NotAuthenticated::Refused),
    }
}
