//! One module per command, and what they share: how data is printed (`Output`) and how a time
//! reads.
//!
//! `-o` is one convention everywhere: `text` is for people; `json` prints exactly one JSON
//! document on one line (an object for one thing, an array for a list); `jsonl` prints one
//! object per line (each item of a list, each event of a stream; a single thing is one line).
//! A stream (`approvals watch`) cannot be one document, so it prints lines under both.

pub mod approvals;
pub mod audit;
pub mod call;
pub mod client;
pub mod cluster;
pub mod dev;
pub mod import;
pub mod keygen;
pub mod resources;
pub mod serve;
pub mod skills;
pub mod snapshot;
pub mod validate;

use crate::exit::Exit;
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::future::Future;

/// How a command that prints data prints it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    #[default]
    Text,
    /// One JSON document on one line: an object, or an array for a list.
    Json,
    /// JSON Lines: one object per line.
    Jsonl,
}

impl Output {
    pub fn is_text(self) -> bool {
        self == Output::Text
    }

    /// Prints one thing as JSON (under `json` and `jsonl` alike).
    pub fn print_one(self, value: &Value) {
        println!("{value}");
    }

    /// Prints a list as JSON: an array under `json`, a line per item under `jsonl`.
    pub fn print_list(self, items: Vec<Value>) {
        match self {
            Output::Jsonl => items.iter().for_each(|item| println!("{item}")),
            Output::Json | Output::Text => println!("{}", Value::Array(items)),
        }
    }
}

/// The `-o` flag of a command that prints data.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct OutputArgs {
    /// How to print: text for people, json (one document), jsonl (one object per line).
    /// [default: text]
    #[arg(short = 'o', long, global = true, value_enum, value_name = "FORMAT")]
    pub output: Option<Output>,
}

/// Runs a command that talks to the cluster on a small runtime of its own.
pub fn remote(work: impl Future<Output = anyhow::Result<Exit>>) -> anyhow::Result<Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(work)
}

/// An instant as text output shows it: RFC 3339 in UTC, and how far it is from now.
pub fn when(unix_ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    when_from(unix_ms, now)
}

fn when_from(unix_ms: u64, now_ms: u64) -> String {
    let at = gatehouse_fronts::time::rfc3339(unix_ms);
    // Whole seconds are what a person reads.
    let at = match at.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => at,
    };
    let relative = if unix_ms >= now_ms {
        format!("in {}", span(unix_ms - now_ms))
    } else {
        format!("{} ago", span(now_ms - unix_ms))
    };
    format!("{at} ({relative})")
}

/// A duration in its two largest units: `45s`, `14m 3s`, `2h 5m`, `3d 4h`.
fn span(ms: u64) -> String {
    let s = ms / 1_000;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m {}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h {}m", s / 3_600, s % 3_600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_instants_and_distances() {
        let at = 1_795_014_245_123; // 2026-11-18T15:04:05.123Z
        assert_eq!(
            when_from(at, at - 843_000),
            "2026-11-18T15:04:05Z (in 14m 3s)"
        );
        assert_eq!(when_from(at, at + 45_500), "2026-11-18T15:04:05Z (45s ago)");
        assert_eq!(span(2 * 3_600_000 + 5 * 60_000), "2h 5m");
        assert_eq!(span(3 * 86_400_000 + 4 * 3_600_000), "3d 4h");
    }
}
