//! Cascade resolution figures: 10,000 skills over 1,000 tenants, resolved cold (the cascade
//! evaluated from the registry) and cached (a current entry of the resolved-cascade cache), and
//! the memory each stored skill costs.
//!
//!     cargo bench -p gatehouse-registry --bench cascade [-- --skills N --tenants N --queries N]

use gatehouse_registry::cache::CascadeCache;
use gatehouse_registry::cascade::Query;
use gatehouse_registry::documents;
use gatehouse_registry::{Command, Proposal, Registry, Resource};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

struct Settings {
    skills: usize,
    tenants: usize,
    queries: usize,
}

fn settings() -> Settings {
    let mut s = Settings {
        skills: 10_000,
        tenants: 1_000,
        queries: 20_000,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        let value = || pair[1].parse::<usize>().expect("a whole number");
        match pair[0].as_str() {
            "--skills" => s.skills = value(),
            "--tenants" => s.tenants = value(),
            "--queries" => s.queries = value(),
            _ => {}
        }
    }
    s
}

/// A small deterministic generator, so every run measures the same workload.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % below
    }
}

fn doc(kind: &str, name: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: gatehouse.dev/v1\nkind: {kind}\nmetadata: {{name: {name}}}\nspec: {spec}\n"
    )
}

/// Tenants first, then skills: 0.2% global, the rest spread over the tenants at the tenant, tool
/// and user levels, with some conflict keys.
fn workload(s: &Settings) -> (Vec<Resource>, Vec<Resource>) {
    let mut rng = Lcg(7);
    let mut tenants = String::new();
    for t in 0..s.tenants {
        tenants.push_str(&doc("Tenant", &format!("t{t}"), "{}"));
    }
    let mut skills = String::new();
    for i in 0..s.skills {
        let tenant = format!("t{}", rng.next(s.tenants));
        let priority = rng.next(100);
        let key = if rng.next(4) == 0 {
            format!(", key: k{}", rng.next(5))
        } else {
            String::new()
        };
        let text = format!(
            "Skill {i}: follow the house rules for this kind of call, and say which rule applied."
        );
        let scope = match (i % 500, rng.next(3)) {
            (0, _) => "{type: global}".to_owned(),
            (_, 0) => format!("{{type: tenant, tenant: {tenant}}}"),
            (_, 1) => format!(
                "{{type: tool, tenant: {tenant}, toolPattern: \"up{}.*\"}}",
                rng.next(10)
            ),
            _ => format!("{{type: user, tenant: {tenant}, user: u{}}}", rng.next(20)),
        };
        let spec =
            format!("{{scope: {scope}, priority: {priority}, instructions: \"{text}\"{key}}}");
        skills.push_str(&doc("Skill", &format!("s{i}"), &spec));
    }
    let parse = |name: &str, text: &str| {
        let parsed = documents::parse(name, text);
        assert!(parsed.problems.is_empty(), "{:?}", &parsed.problems[..1]);
        parsed.into_resources()
    };
    (parse("tenants", &tenants), parse("skills", &skills))
}

fn queries(s: &Settings) -> Vec<Query> {
    let mut rng = Lcg(11);
    (0..s.queries)
        .map(|_| Query {
            tenant: format!("t{}", rng.next(s.tenants)),
            tool: format!("up{}.tool{}", rng.next(10), rng.next(5)),
            user: Some(format!("u{}", rng.next(20))),
        })
        .collect()
}

fn apply_all(registry: &mut Registry, index: &mut u64, resources: &[Resource]) {
    for batch in resources.chunks(1_000) {
        *index += 1;
        let proposal = Proposal {
            request_id: uuid::Uuid::from_u128(u128::from(*index)),
            at: 1,
            command: Command::Put {
                resources: batch.to_vec(),
            },
        };
        registry
            .apply(*index, &proposal)
            .expect("the workload applies");
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let total: Duration = samples.iter().sum();
    println!(
        "{label:<28} n={:<7} mean {:>9.2?}  p50 {:>9.2?}  p99 {:>9.2?}",
        samples.len(),
        total / samples.len() as u32,
        percentile(&samples, 0.50),
        percentile(&samples, 0.99),
    );
}

fn main() {
    let s = settings();
    println!(
        "cascade: {} skills over {} tenants, {} queries",
        s.skills, s.tenants, s.queries
    );
    let (tenants, skills) = workload(&s);
    let mut registry = Registry::new();
    let mut index = 0;
    apply_all(&mut registry, &mut index, &tenants);

    let skill_count = skills.len();
    let region = Region::new(GLOBAL);
    let started = Instant::now();
    apply_all(&mut registry, &mut index, &skills);
    let took = started.elapsed();
    let stats = region.change();
    // The parsed input is still alive here: only what the registry allocated is counted.
    drop(skills);
    let net = stats.bytes_allocated as i64 - stats.bytes_deallocated as i64;
    println!(
        "apply skills                 {skill_count} in {took:.2?} ({:.0} skills/s)",
        skill_count as f64 / took.as_secs_f64()
    );
    println!(
        "memory per skill             {:.0} bytes held in the registry (net heap growth / skills)",
        net as f64 / skill_count as f64
    );

    let queries = queries(&s);
    let mut applied_lines = 0usize;
    let cold: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            let r = black_box(registry.resolve_skills(q));
            let d = t.elapsed();
            applied_lines += r.applied().count();
            d
        })
        .collect();
    report("resolve cold", cold);
    println!(
        "  (on average {:.1} skills applied per resolution)",
        applied_lines as f64 / queries.len() as f64
    );

    let cache = CascadeCache::new(100_000);
    for q in &queries {
        cache.get_or_resolve(
            q,
            registry.cascade_changed_at(&q.tenant),
            registry.applied_index(),
            || registry.resolve_skills(q),
        );
    }
    let cached: Vec<Duration> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            let changed = registry.cascade_changed_at(&q.tenant);
            black_box(
                cache.get_or_resolve(q, changed, registry.applied_index(), || {
                    panic!("a warmed cache must hit")
                }),
            );
            t.elapsed()
        })
        .collect();
    report("resolve cached", cached);
}
