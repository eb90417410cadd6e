//! What one audit line holds, and the byte rule that chains lines together.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `,"hash":"` + 64 hex digits + `"}`: what follows the hashed bytes on a line.
const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;

/// What happened, as the caller tells it. Bodies never come here: only their digests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub kind: Kind,
    pub tenant: Option<String>,
    /// The principal chain, outermost first, e.g. ["user:dana", "agent:demo-agent"] or with "peer:x".
    pub chain: Vec<String>,
    /// Tool (`upstream.tool`), prompt or resource name, or the resource key of an admin change.
    pub target: Option<String>,
    /// Effective approval mode, snake_case.
    pub mode: Option<String>,
    /// Policy decision id, or approve/reject/cancel/resolve/expire/mark_unknown, or execute,
    /// or load_toolset, or put/delete.
    pub decision: Option<String>,
    pub call_id: Option<String>,
    /// The claim an execution runs under. Absent from records written before it existed.
    #[serde(default)]
    pub claim_id: Option<String>,
    pub args_sha256: Option<String>,
    pub output_sha256: Option<String>,
    pub output_len: Option<u64>,
    /// e.g. `succeeded`, `failed`, `pending`, `refused:<code>`; `requested` for an action
    /// recorded before it is taken, `started` for an upstream request about to be made.
    pub outcome: String,
    pub trace_id: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    #[default]
    ToolCall,
    PromptGet,
    ResourceRead,
    Approval,
    AdminChange,
    /// A principal widened its own tool list (`gatehouse.load_toolset`).
    ToolsetLoad,
    /// A webhook was sent a notice of a call (`target` is the webhook, `decision` the event).
    Notification,
}

/// One line of the log. Serialized, its fields come in this order, `None` as `null`, and
/// `hash` last; `hash` is the hex SHA-256 of the line's bytes with `,"hash":"…"` cut out (see the
/// crate documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    /// Milliseconds since the Unix epoch, from the system clock when the entry was recorded.
    pub at_ms: u64,
    pub node: u64,
    /// `hash` of the record before, [`GENESIS`] for the first.
    pub prev: String,
    #[serde(flatten)]
    pub entry: Entry,
    pub hash: String,
}

/// The hashed part of a record as serde_json writes it: everything but `hash`, in the same
/// order. [`write_body`] writes the same bytes; this is what its test holds it to.
#[cfg(test)]
#[derive(Serialize)]
struct Body<'a> {
    seq: u64,
    at_ms: u64,
    node: u64,
    prev: &'a str,
    #[serde(flatten)]
    entry: &'a Entry,
}

/// Writes the hashed part of a record (everything but `hash`) as serde_json writes a `Record`'s
/// fields: the same order, `None` as `null`, strings escaped as serde_json escapes them. Through
/// serde (the entry is flattened into a map, and serde_json checks every byte of every string
/// for one to escape, where hex digests, ids and names rarely hold one), a read-only call's two
/// records cost about 5 thousand instructions more.
fn write_body(line: &mut Vec<u8>, seq: u64, at_ms: u64, node: u64, prev: &str, entry: &Entry) {
    let Entry {
        kind,
        tenant,
        chain,
        target,
        mode,
        decision,
        call_id,
        claim_id,
        args_sha256,
        output_sha256,
        output_len,
        outcome,
        trace_id,
    } = entry;
    line.extend_from_slice(b"{\"seq\":");
    number(line, seq);
    line.extend_from_slice(b",\"at_ms\":");
    number(line, at_ms);
    line.extend_from_slice(b",\"node\":");
    number(line, node);
    line.extend_from_slice(b",\"prev\":");
    string(line, prev);
    line.extend_from_slice(b",\"kind\":");
    // Serde's own name for the variant, so the renaming rule is written once.
    serde_json::to_writer(&mut *line, kind).expect("a kind always serializes");
    line.extend_from_slice(b",\"tenant\":");
    optional(line, tenant);
    line.extend_from_slice(b",\"chain\":[");
    for (i, principal) in chain.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        string(line, principal);
    }
    line.extend_from_slice(b"],\"target\":");
    optional(line, target);
    line.extend_from_slice(b",\"mode\":");
    optional(line, mode);
    line.extend_from_slice(b",\"decision\":");
    optional(line, decision);
    line.extend_from_slice(b",\"call_id\":");
    optional(line, call_id);
    line.extend_from_slice(b",\"claim_id\":");
    optional(line, claim_id);
    line.extend_from_slice(b",\"args_sha256\":");
    optional(line, args_sha256);
    line.extend_from_slice(b",\"output_sha256\":");
    optional(line, output_sha256);
    line.extend_from_slice(b",\"output_len\":");
    match output_len {
        Some(n) => number(line, *n),
        None => line.extend_from_slice(b"null"),
    }
    line.extend_from_slice(b",\"outcome\":");
    string(line, outcome);
    line.extend_from_slice(b",\"trace_id\":");
    optional(line, trace_id);
    line.push(b'}');
}

fn number(line: &mut Vec<u8>, n: u64) {
    serde_json::to_writer(line, &n).expect("a number always serializes");
}

fn optional(line: &mut Vec<u8>, value: &Option<String>) {
    match value {
        Some(text) => string(line, text),
        None => line.extend_from_slice(b"null"),
    }
}

/// `text` as a JSON string: as it is between quotes when no byte of it needs escaping (a quote,
/// a backslash, a control character), else as serde_json escapes it.
fn string(line: &mut Vec<u8>, text: &str) {
    if !needs_escape(text.as_bytes()) {
        line.push(b'"');
        line.extend_from_slice(text.as_bytes());
        line.push(b'"');
    } else {
        serde_json::to_writer(line, text).expect("a string always serializes");
    }
}

/// Whether a byte of `bytes` is one JSON escapes: a quote, a backslash or a control character.
/// Eight bytes at a time (a call's two records hold about a kilobyte of strings, and a byte at a
/// time was a tenth of the audit writer's time); bytes from 0x80 up, UTF-8's, never match.
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `x` below `n` (n <= 0x80) sets its high bit here, and no other byte does.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let equal = |x: u64, b: u8| below(x ^ (ONES * u64::from(b)), 1);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let x = u64::from_ne_bytes(word.try_into().expect("eight bytes"));
        if below(x, 0x20) | equal(x, b'"') | equal(x, b'\\') != 0 {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// What a record's line starts with room for: a call's records take 500 to 800 bytes.
const LINE_CAPACITY: usize = 1024;

impl Record {
    /// Chains `entry` after `prev` and returns the record with the line that stores it
    /// (newline included).
    pub(crate) fn seal(
        seq: u64,
        at_ms: u64,
        node: u64,
        prev: &str,
        entry: Entry,
    ) -> (Record, Vec<u8>) {
        // Room for most records at once: growing from serde_json's 128 bytes took three
        // reallocations a record.
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        write_body(&mut line, seq, at_ms, node, prev, &entry);
        // A byte at a time: `hex::encode` builds its string a `char` at a time.
        let mut digits = [0; 64];
        hex::encode_to_slice(Sha256::digest(&line), &mut digits).expect("64 hex digits");
        let hash = std::str::from_utf8(&digits)
            .expect("hex digits are ASCII")
            .to_owned();
        line.pop(); // the closing brace
        line.extend_from_slice(b",\"hash\":\"");
        line.extend_from_slice(&digits);
        line.extend_from_slice(b"\"}\n");
        let record = Record {
            seq,
            at_ms,
            node,
            prev: prev.to_owned(),
            entry,
            hash,
        };
        (record, line)
    }

    /// Parses one line (without its newline) and checks that its hash covers its bytes.
    pub(crate) fn open(line: &[u8]) -> Result<Record, LineProblem> {
        let record: Record = serde_json::from_slice(line)
            .map_err(|e| LineProblem::Garbage(format!("not a record: {e}")))?;
        let Some(hashed_len) = line.len().checked_sub(HASH_SUFFIX_LEN) else {
            return Err(LineProblem::Garbage("too short".to_owned()));
        };
        let suffix = &line[hashed_len..];
        if !suffix.starts_with(b",\"hash\":\"") || !suffix.ends_with(b"\"}") {
            return Err(LineProblem::Garbage(
                "`hash` is not the last field".to_owned(),
            ));
        }
        let mut hasher = Sha256::new();
        hasher.update(&line[..hashed_len]);
        hasher.update(b"}");
        if hex::encode(hasher.finalize()) != record.hash {
            return Err(LineProblem::Changed(record.seq));
        }
        Ok(record)
    }
}

/// Why one line is not a good record.
#[derive(Debug)]
pub(crate) enum LineProblem {
    /// Not a record in this format at all.
    Garbage(String),
    /// A record whose bytes no longer match its hash; carries the seq it claims.
    Changed(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> Entry {
        Entry {
            kind: Kind::Approval,
            tenant: Some("acme".into()),
            chain: vec!["user:dana".into(), "agent:demo-agent".into()],
            target: Some("github.create_issue".into()),
            decision: Some("approve".into()),
            outcome: "succeeded".into(),
            ..Entry::default()
        }
    }

    #[test]
    fn a_sealed_line_is_the_records_serialization_and_opens_again() {
        let (record, line) = Record::seal(7, 1_700_000_000_000, 3, GENESIS, entry());
        let text = std::str::from_utf8(&line).unwrap();
        assert_eq!(
            format!("{}\n", serde_json::to_string(&record).unwrap()),
            text
        );
        assert!(text.starts_with("{\"seq\":7,\"at_ms\":1700000000000,\"node\":3,\"prev\":\"000"));
        assert!(text.contains("\"kind\":\"approval\""));
        assert_eq!(Record::open(&line[..line.len() - 1]).unwrap(), record);
    }

    proptest! {
        #[test]
        fn a_byte_to_escape_is_found_wherever_it_is(
            plain in proptest::collection::vec(0x20u8..=0xff, 0..40),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![0u8..0x20, Just(b'"'), Just(b'\\'), any::<u8>()],
        ) {
            let a_byte_at_a_time = |bytes: &[u8]| {
                bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
            };
            prop_assert_eq!(needs_escape(&plain), a_byte_at_a_time(&plain));
            let mut with = plain.clone();
            with.insert(at.index(plain.len() + 1), byte);
            prop_assert_eq!(needs_escape(&with), a_byte_at_a_time(&with));
        }
    }

    fn text() -> impl Strategy<Value = String> {
        // Mostly plain, sometimes with what must be escaped: quotes, backslashes, every
        // control character, DEL, non-ASCII.
        prop_oneof![
            "[a-z0-9:._/-]{0,24}",
            "[ -~]{0,12}",
            proptest::collection::vec(
                prop_oneof![
                    (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
                    Just('"'),
                    Just('\\'),
                    Just('\u{7f}'),
                    Just('é'),
                    Just('\u{2028}'),
                    Just('😀'),
                    proptest::char::any(),
                ],
                0..8
            )
            .prop_map(|chars| chars.into_iter().collect()),
        ]
    }

    fn entries() -> impl Strategy<Value = Entry> {
        let kind = prop_oneof![
            Just(Kind::ToolCall),
            Just(Kind::PromptGet),
            Just(Kind::ResourceRead),
            Just(Kind::Approval),
            Just(Kind::AdminChange),
            Just(Kind::ToolsetLoad),
            Just(Kind::Notification),
        ];
        let optional = || proptest::option::of(text());
        (
            (
                kind,
                optional(),
                proptest::collection::vec(text(), 0..4),
                optional(),
            ),
            (optional(), optional(), optional(), optional()),
            (optional(), optional(), proptest::option::of(any::<u64>())),
            (text(), optional()),
        )
            .prop_map(
                |(
                    (kind, tenant, chain, target),
                    (mode, decision, call_id, claim_id),
                    (args_sha256, output_sha256, output_len),
                    (outcome, trace_id),
                )| Entry {
                    kind,
                    tenant,
                    chain,
                    target,
                    mode,
                    decision,
                    call_id,
                    claim_id,
                    args_sha256,
                    output_sha256,
                    output_len,
                    outcome,
                    trace_id,
                },
            )
    }

    proptest! {
        #[test]
        fn a_line_is_written_byte_for_byte_as_serde_json_writes_the_record(
            seq in any::<u64>(),
            at_ms in any::<u64>(),
            node in any::<u64>(),
            prev in text(),
            entry in entries(),
        ) {
            let body = Body { seq, at_ms, node, prev: &prev, entry: &entry };
            let mut written = Vec::new();
            write_body(&mut written, seq, at_ms, node, &prev, &entry);
            prop_assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string(&body).unwrap()
            );
        }
    }

    #[test]
    fn the_hash_is_over_the_line_without_the_hash_field() {
        let (record, line) = Record::seal(1, 5, 1, GENESIS, entry());
        let text = std::str::from_utf8(&line).unwrap().trim_end();
        let hashed = text.replace(&format!(",\"hash\":\"{}\"", record.hash), "");
        assert_eq!(hex::encode(Sha256::digest(hashed.as_bytes())), record.hash);
    }
}
