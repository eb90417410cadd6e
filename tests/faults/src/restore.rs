//! The campaign's last phase, a restart from a backup: once the healed cluster has settled and
//! its views are read, `gatehouse snapshot save` copies the state out of one voter, `gatehouse
//! snapshot restore` makes it the first data directory of a new cluster, which starts, leads and
//! grows to three voters. Every node of the new cluster must hold exactly the registers and calls
//! the saved node held, and the new cluster must take a write and a linearizable read.
//!
//! A restore is disaster recovery: the new cluster shares nothing with the original but the
//! backup and the API keys inside it. Its nodes get ids of their own (from 101, so their loopback
//! addresses are none of the original's) and data directories under `restored/`.

use crate::check::Anomaly;
use crate::client::Recorder;
use crate::cluster::Cluster;
use crate::history::NodeView;
use crate::procs::Procs;
use crate::{observe, setup};
use anyhow::{Context, bail, ensure};
use gatehouse_proto::v1 as pb;
use std::collections::BTreeMap;
use std::fmt::{Display, Write as _};
use std::time::{Duration, Instant};

/// The restored cluster's first node; the voters added to it take the next ids.
const FIRST: u64 = 101;
const VOTERS: usize = 3;
/// How long one `gatehouse snapshot` command may take.
const COMMAND_WITHIN: Duration = Duration::from_secs(60);
/// A register only this phase writes.
const PROBE: &str = "restore-probe";
const CHECKER: &str = "restore";

/// What the phase takes of the campaign's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Picks the voter the backup is saved from.
    pub seed: u64,
    /// The `gatehouse` binary.
    pub bin: std::path::PathBuf,
    /// The campaign's directory; the restored cluster lives in `restored/` under it.
    pub dir: std::path::PathBuf,
}

/// What the phase measured, for its section of the report.
#[derive(Debug, Default)]
struct Measured {
    source: u64,
    settled_index: u64,
    backup_index: u64,
    backup_term: u64,
    backup_bytes: u64,
    saved_in: Duration,
    /// From the restore command to the restored node leading its one-voter cluster.
    restored_in: Duration,
    grown_in: Duration,
    compared: Vec<u64>,
    registers: usize,
    calls: usize,
    differences: usize,
    probe: Option<String>,
}

/// Runs the phase against the settled `cluster`, whose views are `settled`, prints its section
/// and returns what it found wrong; a step that fails is an anomaly too.
pub async fn run(
    settings: &Settings,
    cluster: &Cluster,
    settled: &BTreeMap<u64, NodeView>,
    recorder: &Recorder,
) -> Vec<Anomaly> {
    let mut measured = Measured::default();
    let mut found = Vec::new();
    let mut out = String::from("\n== restart from a backup\n");
    if let Err(e) = phase(
        settings,
        cluster,
        settled,
        recorder,
        &mut measured,
        &mut found,
    )
    .await
    {
        let _ = writeln!(out, "failed: {e:#}");
        found.push(Anomaly::new(
            CHECKER,
            format!("the restart from a backup failed: {e:#}"),
        ));
    }
    out.push_str(&measured.to_string());
    print!("{out}");
    found
}

async fn phase(
    settings: &Settings,
    cluster: &Cluster,
    settled: &BTreeMap<u64, NodeView>,
    recorder: &Recorder,
    measured: &mut Measured,
    found: &mut Vec<Anomaly>,
) -> anyhow::Result<()> {
    let voters: Vec<u64> = cluster
        .voters()
        .await
        .into_iter()
        .filter(|id| settled.contains_key(id) && cluster.procs.live().contains(id))
        .collect();
    ensure!(!voters.is_empty(), "no live voter to save a backup from");
    let source = voters[(settings.seed % voters.len() as u64) as usize];
    measured.source = source;
    measured.settled_index = settled[&source].applied_index;

    let dir = settings.dir.join("restored");
    std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
    let backup = dir.join("backup.snapshot");
    let started = Instant::now();
    let mut save = tokio::process::Command::new(&settings.bin);
    save.args(["snapshot", "save"])
        .arg(&backup)
        .args(["--addr", &cluster.procs.nodes[&source].grpc])
        // In the environment rather than on a command line anyone may read.
        .env("GATEHOUSE_TOKEN", &cluster.admin);
    let said = output(save, "snapshot save").await?;
    measured.saved_in = started.elapsed();
    (measured.backup_index, measured.backup_term) =
        saved_at(&said).with_context(|| format!("`snapshot save` said {said:?}"))?;
    measured.backup_bytes = std::fs::metadata(&backup)
        .with_context(|| format!("the backup {}", backup.display()))?
        .len();

    let started = Instant::now();
    let mut procs = Procs::new(settings.bin.clone(), dir);
    let mut restore = tokio::process::Command::new(&settings.bin);
    restore
        .args(["snapshot", "restore"])
        .arg(&backup)
        .arg("--data-dir")
        .arg(procs.data_dir(FIRST))
        .args(["--node-id", &FIRST.to_string()])
        .env_remove("GATEHOUSE_TOKEN");
    output(restore, "snapshot restore").await?;
    tokio::task::block_in_place(|| procs.start(FIRST, &[], None))
        .context("starting the restored node")?;
    let mut restored = Cluster::adopt(procs, cluster.admin.clone())
        .await
        .context("the restored node leading its one-voter cluster")?;
    measured.restored_in = started.elapsed();

    let started = Instant::now();
    for _ in 1..VOTERS {
        restored
            .add_voter()
            .await
            .context("growing the restored cluster")?;
    }
    measured.grown_in = started.elapsed();

    let views = observe::views(&restored, recorder)
        .await
        .context("reading the restored nodes' views")?;
    let saved = &settled[&source];
    measured.compared = views.keys().copied().collect();
    measured.registers = saved.registers.len();
    measured.calls = saved.calls.len();
    let differences = differences(source, saved, &views);
    measured.differences = differences.len();
    found.extend(differences);

    if let Err(e) = probe(&restored).await {
        measured.probe = Some(format!("{e:#}"));
        found.push(Anomaly::new(
            CHECKER,
            format!("the restored cluster: {e:#}"),
        ));
    }
    for id in restored.procs.live() {
        tokio::task::block_in_place(|| restored.procs.stop(id, Duration::from_secs(10)));
    }
    Ok(())
}

/// Runs a `gatehouse` command to its end; its standard output, or why it failed.
async fn output(mut command: tokio::process::Command, what: &str) -> anyhow::Result<String> {
    command.kill_on_drop(true).env("RUST_LOG", "warn");
    let ran = tokio::time::timeout(COMMAND_WITHIN, command.output())
        .await
        .map_err(|_| anyhow::anyhow!("`gatehouse {what}` took more than {COMMAND_WITHIN:?}"))?
        .with_context(|| format!("running `gatehouse {what}`"))?;
    if !ran.status.success() {
        bail!(
            "`gatehouse {what}` failed ({}): {}",
            ran.status,
            String::from_utf8_lossy(&ran.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&ran.stdout).into_owned())
}

/// The index and term of a saved backup, from what `snapshot save` said: "saved FILE: state at
/// index N (term T) from node M, B bytes".
fn saved_at(said: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = said.split_whitespace().collect();
    let after = |word: &str| {
        let at = words.iter().position(|w| *w == word)?;
        words.get(at + 1)?.trim_end_matches([')', ',']).parse().ok()
    };
    Some((after("index")?, after("(term")?))
}

/// A write through the leader of a register the workload never wrote, and a linearizable read of
/// it on every node.
async fn probe(cluster: &Cluster) -> anyhow::Result<()> {
    let value = 1;
    let leader = cluster.wait_leader(Duration::from_secs(20)).await?;
    cluster
        .channels
        .registry(leader, &cluster.admin)
        .apply(pb::ApplyRequest {
            resources: vec![setup::register_resource(PROBE, value)],
        })
        .await
        .with_context(|| format!("writing {PROBE} on node {leader}"))?;
    for id in cluster.channels.ids() {
        let read = cluster
            .channels
            .registry(id, &cluster.admin)
            .get(pb::GetResourceRequest {
                key: Some(setup::key_of(PROBE)),
                linearizable: true,
            })
            .await
            .with_context(|| format!("a linearizable read of {PROBE} on node {id}"))?;
        let got = read
            .into_inner()
            .resource
            .as_ref()
            .and_then(setup::register_value);
        ensure!(
            got == Some(value),
            "a linearizable read of {PROBE} on node {id} gave {got:?} after {value} was written"
        );
    }
    Ok(())
}

/// How each restored node's registers and calls differ from those node `source` held when the
/// backup was saved from it. Applied indexes and audit logs are the new cluster's own and are not
/// compared.
pub fn differences(
    source: u64,
    saved: &NodeView,
    restored: &BTreeMap<u64, NodeView>,
) -> Vec<Anomaly> {
    let mut found = Vec::new();
    if restored.is_empty() {
        found.push(Anomaly::new(CHECKER, "no restored node to compare"));
    }
    for (node, view) in restored {
        let mut differ = |what: &str, name: &str, was: Option<String>, is: Option<String>| {
            let what = match (was, is) {
                (Some(was), None) => format!("{what} {name} is missing ({was} on node {source})"),
                (None, Some(is)) => format!("{what} {name} is {is}, absent on node {source}"),
                (Some(was), Some(is)) => format!("{what} {name} is {is}, {was} on node {source}"),
                (None, None) => return,
            };
            found.push(Anomaly::new(
                CHECKER,
                format!("restored node {node}: {what}"),
            ));
        };
        for (key, was, is) in unequal(&saved.registers, &view.registers) {
            differ(
                "register",
                key,
                was.map(u64::to_string),
                is.map(u64::to_string),
            );
        }
        for (id, was, is) in unequal(&saved.calls, &view.calls) {
            let (was, is) = match (was, is) {
                // The state first: it is what a restore most plainly must keep.
                (Some(was), Some(is)) if was.state != is.state => {
                    (Some(was.state.clone()), Some(is.state.clone()))
                }
                (was, is) => (was.map(|c| format!("{c:?}")), is.map(|c| format!("{c:?}"))),
            };
            differ("call", id, was, is);
        }
    }
    found
}

/// Every key whose value differs between `was` and `is` (absent on one side included).
fn unequal<'a, V: PartialEq>(
    was: &'a BTreeMap<String, V>,
    is: &'a BTreeMap<String, V>,
) -> Vec<(&'a str, Option<&'a V>, Option<&'a V>)> {
    let keys: std::collections::BTreeSet<&String> = was.keys().chain(is.keys()).collect();
    keys.into_iter()
        .map(|k| (k.as_str(), was.get(k), is.get(k)))
        .filter(|(_, was, is)| was != is)
        .collect()
}

impl Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.source == 0 {
            return Ok(());
        }
        writeln!(
            f,
            "backup: node {} at index {} (term {}; settled at {}), {} bytes, saved in {:.2} s",
            self.source,
            self.backup_index,
            self.backup_term,
            self.settled_index,
            self.backup_bytes,
            self.saved_in.as_secs_f64()
        )?;
        if self.restored_in.is_zero() {
            return Ok(());
        }
        writeln!(
            f,
            "restored as node {FIRST} and leading in {:.2} s; grown to {VOTERS} voters in {:.2} s",
            self.restored_in.as_secs_f64(),
            self.grown_in.as_secs_f64()
        )?;
        if self.compared.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "compared nodes {:?} with node {}'s settled view ({} registers, {} calls): {} differences",
            self.compared, self.source, self.registers, self.calls, self.differences
        )?;
        match &self.probe {
            None => writeln!(f, "a write and a linearizable read of a new register: ok"),
            Some(why) => writeln!(
                f,
                "a write and a linearizable read of a new register: {why}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::{call, node};

    fn saved() -> NodeView {
        let mut view = node(&[("x", 1), ("y", 2)]);
        view.calls
            .insert("c1".to_owned(), call("succeeded", Some((1, 50))));
        view.calls.insert("c2".to_owned(), call("pending", None));
        view
    }

    fn restored(view: &NodeView) -> BTreeMap<u64, NodeView> {
        (101..=103).map(|id| (id, view.clone())).collect()
    }

    #[test]
    fn equal_views_differ_in_nothing() {
        let mut same = saved();
        // The new cluster's own log: its index is not the saved one.
        same.applied_index = 7;
        assert_eq!(differences(2, &saved(), &restored(&same)), vec![]);
    }

    #[test]
    fn a_lost_register_and_a_call_in_another_state_are_reported() {
        let mut views = restored(&saved());
        if let Some(view) = views.get_mut(&102) {
            view.registers.remove("x");
            view.registers.insert("z".to_owned(), 9);
        }
        if let Some(view) = views.get_mut(&103) {
            view.calls.insert("c2".to_owned(), call("expired", None));
            view.registers.insert("y".to_owned(), 3);
        }
        let found: Vec<String> = differences(2, &saved(), &views)
            .into_iter()
            .map(|a| {
                assert_eq!(a.checker, "restore");
                a.what
            })
            .collect();
        assert_eq!(
            found,
            vec![
                "restored node 102: register x is missing (1 on node 2)",
                "restored node 102: register z is 9, absent on node 2",
                "restored node 103: register y is 3, 2 on node 2",
                "restored node 103: call c2 is expired, pending on node 2",
            ]
        );
    }

    #[test]
    fn a_missing_call_and_no_restored_node_are_reported() {
        let mut views = restored(&saved());
        views.retain(|id, _| *id == 101);
        if let Some(view) = views.get_mut(&101) {
            view.calls.remove("c1");
        }
        let found = differences(2, &saved(), &views);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .what
                .starts_with("restored node 101: call c1 is missing")
        );
        assert_eq!(
            differences(2, &saved(), &BTreeMap::new()),
            vec![Anomaly::new("restore", "no restored node to compare")]
        );
    }

    #[test]
    fn the_backup_index_is_read_from_what_save_said() {
        let said = "saved /tmp/b: state at index 1234 (term 5) from node 2, 9876 bytes\n";
        assert_eq!(saved_at(said), Some((1234, 5)));
        assert_eq!(saved_at("something else"), None);
    }
}
