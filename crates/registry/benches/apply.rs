//! What applying a committed write costs a node: the cluster benchmark's workload (every write
//! creates a tenant; the leader's review then places it) applied to one registry, as the nodes
//! apply it: proposals grouped in batches the way concurrent clients share a log entry, and one
//! batch of placements per batch of tenants. Prints the time per write as the registry grows.
//!
//! Also prints what decoding those batches from the log's JSON costs, as a follower does for
//! every entry it receives.
//!
//!     cargo bench -p gatehouse-registry --bench apply [-- --writes N --batch N]

use gatehouse_registry::documents;
use gatehouse_registry::{Command, Proposal, Registry, Resource};
use std::time::Instant;

struct Settings {
    writes: usize,
    batch: usize,
}

fn settings() -> Settings {
    let mut s = Settings {
        writes: 100_000,
        batch: 16,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        let value = || pair[1].parse::<usize>().expect("a whole number");
        match pair[0].as_str() {
            "--writes" => s.writes = value(),
            "--batch" => s.batch = value().max(1),
            _ => {}
        }
    }
    s
}

/// A tenant as the cluster benchmark writes it: a name like `w16-3-1207`, a 100-byte spec.
fn tenant(i: usize) -> Resource {
    let doc = format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: Tenant\nmetadata: {{name: w16-{}-{i}}}\n\
         spec: {{displayName: bench, description: {}}}\n",
        i % 16,
        "x".repeat(60)
    );
    let parsed = documents::parse("tenant", &doc);
    assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
    parsed.into_resources().remove(0)
}

/// Decodes every batch of puts from its JSON, as a follower reads a log entry, twice over (the
/// first pass warms the allocator); prints the second pass's time per write.
fn decode(tenants: &[Resource], batch: usize) {
    let entries: Vec<Vec<u8>> = tenants
        .chunks(batch)
        .map(|chunk| {
            let proposals = chunk
                .iter()
                .map(|t| {
                    proposal(Command::Put {
                        resources: vec![t.clone()],
                    })
                })
                .collect();
            serde_json::to_vec(&proposal(Command::Batch { proposals })).expect("a batch encodes")
        })
        .collect();
    let bytes: usize = entries.iter().map(Vec::len).sum();
    let mut elapsed = std::time::Duration::ZERO;
    for _ in 0..2 {
        let started = Instant::now();
        for entry in &entries {
            let decoded: Proposal = serde_json::from_slice(entry).expect("a batch decodes");
            std::hint::black_box(decoded);
        }
        elapsed = started.elapsed();
    }
    println!(
        "  decode: {:.2} us per write ({} bytes of JSON per write)",
        elapsed.as_secs_f64() * 1e6 / tenants.len() as f64,
        bytes / tenants.len().max(1)
    );
}

/// A proposal with a request id of its own, as every node gets it from the log: random, as
/// `Cluster::propose` makes them, so each lands at a random place among those applied before.
fn proposal(command: Command) -> Proposal {
    Proposal {
        request_id: uuid::Uuid::new_v4(),
        at: 1,
        command,
    }
}

fn main() {
    let s = settings();
    println!(
        "apply: {} tenant writes in batches of {}, each batch then placed",
        s.writes, s.batch
    );
    let tenants: Vec<Resource> = (0..s.writes).map(tenant).collect();
    decode(&tenants, s.batch);
    let mut registry = Registry::new();
    let mut index = 0u64;
    let quarter = (s.writes / 4).max(1);
    let (mut started, mut reported) = (Instant::now(), 0);
    for (n, chunk) in tenants.chunks(s.batch).enumerate() {
        let puts = chunk
            .iter()
            .map(|t| {
                let resources = vec![t.clone()];
                proposal(Command::Put { resources })
            })
            .collect();
        let places = chunk
            .iter()
            .map(|t| {
                let command = Command::Place {
                    tenant: t.key().name,
                    home: 1,
                    epoch: 1,
                };
                proposal(command)
            })
            .collect();
        for proposals in [puts, places] {
            index += 1;
            let batch = proposal(Command::Batch { proposals });
            registry.apply(index, &batch).expect("the workload applies");
        }
        let done = ((n + 1) * s.batch).min(s.writes);
        if done - reported >= quarter || done == s.writes {
            println!(
                "  tenants {:>7} to {:>7}: {:>6.2} us per write (put and place)",
                reported,
                done,
                started.elapsed().as_secs_f64() * 1e6 / (done - reported) as f64
            );
            (started, reported) = (Instant::now(), done);
        }
    }
    assert!(
        registry.unsettled_tenants().next().is_none(),
        "every tenant was placed"
    );
    // A snapshot starts from a copy taken between two applies: no write applies meanwhile.
    let started = Instant::now();
    let copy = registry.clone();
    let copied = started.elapsed();
    let started = Instant::now();
    let bytes = copy.to_bytes();
    println!(
        "snapshot of {} tenants: copy {copied:.2?} (applies wait), serialise {:.2?} ({} bytes)",
        s.writes,
        started.elapsed(),
        bytes.len()
    );
}
