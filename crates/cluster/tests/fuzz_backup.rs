//! Fuzzes the backup reader (`backup::decode`, what `gatehouse snapshot restore` reads first)
//! and the registry state it carries (`Registry::from_bytes`): generated headers and bodies, a
//! real registry's backup damaged byte by byte or cut, random files, random headers after the
//! magic line, and registry bodies that are damaged yet carry a matching checksum.
//!
//! Properties: a backup decodes to the header and body it was encoded from; a damaged file is
//! refused, or (a change confined to the header's own numbers) gives back the very same body;
//! a change inside the body is always a checksum error, and any cut is refused; random files
//! never panic and decode only when the body matches its header; a registry body round-trips,
//! and a damaged one is read or refused without a panic and re-reads to the same bytes.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_cluster::backup::{BackupError, FORMAT, Header, MAGIC, decode, encode};
use gatehouse_registry::call::{CallId, NodeId};
use gatehouse_registry::canonical::sha256_hex;
use gatehouse_registry::{Command, Proposal, Registry};
use gatehouse_testkit::fuzz::config;
use gatehouse_testkit::{calls, yaml};
use proptest::prelude::*;
use std::sync::OnceLock;
use uuid::Uuid;

/// A registry that holds something of everything a backup carries: resources, a node, a
/// placement and a pending call.
fn registry_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let mut registry = yaml::registry(&format!(
            "{}---\n{}",
            yaml::tenant("acme"),
            "apiVersion: gatehouse.dev/v1\nkind: Principal\nmetadata: {name: bot}\n\
             spec: {jwt: {issuer: 'https://idp', subject: 'é 𝄞'}, roles: {acme: [agent]}}\n",
        ));
        let commands = [
            Command::AdmitNode {
                node: 1,
                addr: "127.0.0.1:7000".into(),
            },
            Command::Place {
                tenant: "acme".into(),
                home: 1,
                epoch: 3,
            },
            Command::Propose {
                call: Box::new(calls::destructive(
                    "call_1",
                    "acme",
                    "demo.x",
                    "bot",
                    "{\"a\":1}",
                    1,
                    u64::MAX,
                )),
            },
        ];
        for (i, command) in commands.into_iter().enumerate() {
            let proposal = Proposal {
                request_id: Uuid::from_u128(i as u128 + 2),
                at: 1_000,
                command,
            };
            // A command the state refuses is fine: the backup carries whatever was applied.
            let _ = registry.apply(i as u64 + 2, &proposal);
        }
        registry.to_bytes()
    })
}

fn header_for(body: &[u8], (index, term, node, at): (u64, u64, u64, u64)) -> Header {
    Header::for_body(body, index, term, node, at)
}

/// Where the body's unsigned integers stand: each run of digits.
fn number_runs(body: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut start = None;
    for (i, b) in body.iter().enumerate() {
        match (b.is_ascii_digit(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                runs.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    runs
}

/// A body read back from a backup, as `snapshot restore` takes it into a new cluster.
fn restore(body: &[u8], node: NodeId) -> Option<Vec<u8>> {
    let mut registry = Registry::from_bytes(body).ok()?;
    registry.for_new_cluster(node);
    Some(registry.to_bytes())
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn a_backup_decodes_to_what_was_encoded(
        body in prop::collection::vec(any::<u8>(), 0..2_000),
        numbers in any::<(u64, u64, u64, u64)>(),
    ) {
        let header = header_for(&body, numbers);
        let file = encode(&header, &body);
        let (read, read_body) = decode(&file).expect("an encoded backup decodes");
        prop_assert_eq!(read, header);
        prop_assert_eq!(read_body, body.as_slice());
    }

    #[test]
    fn a_damaged_backup_is_refused_or_keeps_its_body(
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        numbers in any::<(u64, u64, u64, u64)>(),
    ) {
        let body = registry_bytes();
        let file = encode(&header_for(body, numbers), body);
        let mut damaged = file.clone();
        let i = at.index(file.len());
        damaged[i] ^= flip;
        let body_starts = file.len() - body.len();
        match decode(&damaged) {
            Ok((header, read)) => {
                prop_assert!(i < body_starts, "a change in the body at {} passed", i);
                prop_assert_eq!(read, body);
                prop_assert_eq!(header.body_sha256, sha256_hex(body));
            }
            Err(BackupError::NotABackup) => prop_assert!(i <= MAGIC.len()),
            Err(e) if i >= body_starts => {
                prop_assert!(matches!(e, BackupError::Checksum { .. }), "{}", e);
            }
            Err(_) => {}
        }
    }

    #[test]
    fn a_cut_backup_is_refused(at in any::<prop::sample::Index>()) {
        let body = registry_bytes();
        let file = encode(&header_for(body, (9, 2, 1, 5)), body);
        let cut = at.index(file.len());
        prop_assert!(decode(&file[..cut]).is_err());
    }

    #[test]
    fn random_files_are_refused_without_a_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        magic in any::<bool>(),
        header in prop::option::of((any::<u32>(), any::<u64>(), "[0-9a-f]{0,64}|\\PC{0,8}")),
    ) {
        let mut file = Vec::new();
        if magic {
            file.extend_from_slice(MAGIC.as_bytes());
            file.push(b'\n');
        }
        if let Some((format, len, sha)) = &header {
            let format = if format % 2 == 0 { FORMAT } else { *format };
            let line = serde_json::json!({"format": format, "index": 1, "term": 1,
                "created_at_ms": 0, "source_node": 1, "body_bytes": len % 500, "body_sha256": sha});
            file.extend_from_slice(line.to_string().as_bytes());
            file.push(b'\n');
        }
        file.extend_from_slice(&bytes);
        if let Ok((header, body)) = decode(&file) {
            prop_assert_eq!(header.body_bytes, body.len() as u64);
            prop_assert_eq!(header.body_sha256, sha256_hex(body));
            prop_assert_eq!(header.format, FORMAT);
        }
    }

    #[test]
    fn a_registry_body_round_trips_through_a_backup(node in 1u64..1_000) {
        let body = registry_bytes();
        let file = encode(&header_for(body, (4, 1, 1, 0)), body);
        let (_, read) = decode(&file).expect("decodes");
        let registry = Registry::from_bytes(read).expect("the state reads back");
        prop_assert!(registry.call(&CallId("call_1".into())).is_some());
        prop_assert_eq!(registry.admitted_nodes().collect::<Vec<_>>(), vec![1]);
        prop_assert_eq!(registry.to_bytes(), body);
        let restored = restore(read, node).expect("restores");
        prop_assert_eq!(restore(&restored, node).map(|r| r.len()), Some(restored.len()));
    }

    #[test]
    fn a_damaged_registry_body_is_read_or_refused(
        at in any::<prop::sample::Index>(),
        how in 0u8..5,
        with in prop::sample::select(b"0123456789{}[]\",:-.eE \\nutfalsr\xff".to_vec()),
        depth in 0usize..100_000,
        extreme in prop::sample::select(vec![
            "18446744073709551615", "18446744073709551616", "-9223372036854775808", "-1", "0",
            "1.5", "1e400", "-0",
        ]),
    ) {
        let mut body = registry_bytes().to_vec();
        let i = at.index(body.len());
        match how {
            0 => body[i] = with,
            1 => body.truncate(i),
            2 => body.insert(i, with),
            // A number of the state replaced by one at or past the edge of its type.
            3 => {
                let runs = number_runs(&body);
                let (start, end) = runs[at.index(runs.len())];
                body.splice(start..end, extreme.bytes()).for_each(drop);
            }
            _ => body.splice(i..i, std::iter::repeat_n(b'[', depth)).for_each(drop),
        }
        // The checksum is made right, as by someone who edits a backup on purpose.
        let file = encode(&header_for(&body, (4, 1, 1, 0)), &body);
        let (_, read) = decode(&file).expect("a matching checksum decodes");
        if let Ok(registry) = Registry::from_bytes(read) {
            let again = registry.to_bytes();
            let reread = Registry::from_bytes(&again).expect("its own bytes read back");
            prop_assert_eq!(reread.to_bytes(), again);
            prop_assert!(restore(read, 1).is_some());
        }
    }
}

/// What the fuzzer found: a backup whose placement epoch is the largest u64 (its checksum made
/// right) overflowed `for_new_cluster` (a panic in debug builds, a wrap to epoch 0 in release).
#[test]
fn an_epoch_at_the_end_of_its_type_is_restored_without_overflow() {
    let body = String::from_utf8(registry_bytes().to_vec()).expect("JSON");
    let edited = body.replace("\"epoch\":3", &format!("\"epoch\":{}", u64::MAX));
    assert_ne!(edited, body, "the registry holds a placement");
    let file = encode(
        &header_for(edited.as_bytes(), (4, 1, 1, 0)),
        edited.as_bytes(),
    );
    let (_, read) = decode(&file).expect("decodes");
    let restored = restore(read, 1).expect("restores");
    let restored = String::from_utf8(restored).expect("JSON");
    assert!(
        restored.contains(&format!("\"epoch\":{}", u64::MAX)),
        "{restored}"
    );
}
