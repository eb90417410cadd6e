//! Partitions between nodes on one host: an iptables chain of the campaign's own, jumped to from
//! INPUT, that drops packets from one node's loopback address to another's. Nodes connect to
//! their peers from their own listen address, so a rule cuts exactly one direction between one
//! pair; clients (from 127.0.0.1) and the upstream are never cut. The chain is removed when the
//! campaign ends, however it ends.

use crate::procs::ip_of;
use std::collections::BTreeSet;
use std::process::Command;

#[derive(Debug)]
pub struct Firewall {
    chain: String,
    /// The (from, to) pairs cut now.
    cut: BTreeSet<(u64, u64)>,
}

impl Firewall {
    /// Creates the campaign's chain; `Err` says why partitions cannot be made here (not root,
    /// no iptables), and the campaign goes on without them.
    pub fn new() -> Result<Firewall, String> {
        let chain = format!("GHFAULTS{}", std::process::id());
        iptables(&["-N", &chain])?;
        if let Err(e) = iptables(&["-I", "INPUT", "-j", &chain]) {
            let _ = iptables(&["-X", &chain]);
            return Err(e);
        }
        Ok(Firewall {
            chain,
            cut: BTreeSet::new(),
        })
    }

    /// Drops every packet from `from` to `to`.
    pub fn cut(&mut self, from: u64, to: u64) -> Result<(), String> {
        if self.cut.insert((from, to)) {
            iptables(&[
                "-A",
                &self.chain,
                "-s",
                &ip_of(from),
                "-d",
                &ip_of(to),
                "-j",
                "DROP",
            ])?;
        }
        Ok(())
    }

    /// Cuts both directions between every node of `a` and every node of `b`.
    pub fn partition(&mut self, a: &[u64], b: &[u64]) -> Result<(), String> {
        for &x in a {
            for &y in b {
                self.cut(x, y)?;
                self.cut(y, x)?;
            }
        }
        Ok(())
    }

    /// Removes every cut.
    pub fn heal(&mut self) -> Result<(), String> {
        self.cut.clear();
        iptables(&["-F", &self.chain])
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = iptables(&["-F", &self.chain]);
        let _ = iptables(&["-D", "INPUT", "-j", &self.chain]);
        let _ = iptables(&["-X", &self.chain]);
    }
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .args(["-w"])
        .args(args)
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
