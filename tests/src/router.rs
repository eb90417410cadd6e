//! The network between the harness's nodes: every Raft message and forwarded write asks the
//! router first.

use gatehouse_cluster::net::{PeerFilter, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Default)]
pub struct Router {
    links: Mutex<Links>,
}

#[derive(Debug, Default)]
struct Links {
    cut: BTreeSet<(u64, u64)>,
    delays: BTreeMap<(u64, u64), Duration>,
}

impl Router {
    /// Cuts every link between the two groups, both ways.
    pub fn partition(&self, a: &[u64], b: &[u64]) {
        let mut links = self.links.lock().expect("router lock");
        for &x in a {
            for &y in b {
                links.cut.insert((x, y));
                links.cut.insert((y, x));
            }
        }
    }

    /// Drops messages from `from` to `to` only.
    pub fn cut_one_way(&self, from: u64, to: u64) {
        self.links
            .lock()
            .expect("router lock")
            .cut
            .insert((from, to));
    }

    pub fn set_delay(&self, from: u64, to: u64, delay: Duration) {
        self.links
            .lock()
            .expect("router lock")
            .delays
            .insert((from, to), delay);
    }

    /// Every link whole again, no delays.
    pub fn heal(&self) {
        let mut links = self.links.lock().expect("router lock");
        links.cut.clear();
        links.delays.clear();
    }
}

impl PeerFilter for Router {
    fn verdict(&self, from: u64, to: u64) -> Verdict {
        let links = self.links.lock().expect("router lock");
        if links.cut.contains(&(from, to)) {
            Verdict::Drop
        } else if let Some(d) = links.delays.get(&(from, to)) {
            Verdict::Delay(*d)
        } else {
            Verdict::Pass
        }
    }
}
