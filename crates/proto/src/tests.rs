//! Checks that the compiled contract is the one the rest of the workspace is written against.

use crate::FILE_DESCRIPTOR_SET;
use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorSet, ServiceDescriptorProto};
use std::collections::{BTreeMap, BTreeSet};

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("FILE_DESCRIPTOR_SET decodes")
}

fn services(fds: &FileDescriptorSet) -> BTreeMap<String, &ServiceDescriptorProto> {
    fds.file
        .iter()
        .filter(|file| file.package() == "gatehouse.v1")
        .flat_map(|file| &file.service)
        .map(|service| (service.name().to_owned(), service))
        .collect()
}

fn messages(fds: &FileDescriptorSet) -> BTreeMap<String, &DescriptorProto> {
    fds.file
        .iter()
        .filter(|file| file.package() == "gatehouse.v1")
        .flat_map(|file| &file.message_type)
        .map(|message| (format!(".gatehouse.v1.{}", message.name()), message))
        .collect()
}

fn field_names(message: &DescriptorProto) -> BTreeSet<&str> {
    message.field.iter().map(|field| field.name()).collect()
}

#[test]
fn every_service_has_exactly_its_rpcs() {
    let expected: BTreeMap<&str, BTreeSet<&str>> = [
        (
            "RegistryService",
            &[
                "Apply",
                "Get",
                "List",
                "Delete",
                "ResolveSkills",
                "ResolveSkillTools",
            ][..],
        ),
        (
            "ApprovalService",
            &[
                "ListPending",
                "WatchPending",
                "Get",
                "Approve",
                "Reject",
                "Cancel",
                "Resolve",
            ][..],
        ),
        (
            "ClusterService",
            &["Status", "AddLearner", "Promote", "Remove", "Join"][..],
        ),
        ("GatewayService", &["CallTool", "GetCall"][..]),
        ("SnapshotService", &["Save"][..]),
        (
            "RaftService",
            &[
                "AppendEntries",
                "AppendEntriesStream",
                "Vote",
                "InstallSnapshot",
                "Forward",
                "TimeoutNow",
                "PreVote",
            ][..],
        ),
    ]
    .into_iter()
    .map(|(service, rpcs)| (service, rpcs.iter().copied().collect()))
    .collect();

    let fds = descriptor_set();
    let actual: BTreeMap<&str, BTreeSet<&str>> = services(&fds)
        .values()
        .map(|service| {
            let rpcs = service.method.iter().map(|method| method.name()).collect();
            (service.name(), rpcs)
        })
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn only_approval_watch_snapshot_save_and_raft_appends_stream() {
    let fds = descriptor_set();
    let streaming: Vec<String> = services(&fds)
        .values()
        .flat_map(|service| {
            service
                .method
                .iter()
                .filter(|method| method.client_streaming() || method.server_streaming())
                .map(|method| format!("{}.{}", service.name(), method.name()))
        })
        .collect();
    assert_eq!(
        streaming,
        [
            "ApprovalService.WatchPending",
            "RaftService.AppendEntriesStream",
            "SnapshotService.Save"
        ]
    );

    let watch = services(&fds)["ApprovalService"]
        .method
        .iter()
        .find(|method| method.name() == "WatchPending")
        .map(|method| (method.server_streaming(), method.client_streaming()));
    assert_eq!(watch, Some((true, false)));
    let save = services(&fds)["SnapshotService"]
        .method
        .iter()
        .find(|method| method.name() == "Save")
        .map(|method| (method.server_streaming(), method.client_streaming()));
    assert_eq!(save, Some((true, false)));
    let appends = services(&fds)["RaftService"]
        .method
        .iter()
        .find(|method| method.name() == "AppendEntriesStream")
        .map(|method| (method.server_streaming(), method.client_streaming()));
    assert_eq!(appends, Some((true, true)));
}

/// A request that takes a page size must take a page token, and its response must hand one back.
#[test]
fn paged_rpcs_are_paged_both_ways() {
    let fds = descriptor_set();
    let messages = messages(&fds);
    let mut paged = Vec::new();
    for service in services(&fds).values() {
        for method in &service.method {
            let request = field_names(messages[method.input_type()]);
            let response = field_names(messages[method.output_type()]);
            let rpc = format!("{}.{}", service.name(), method.name());
            if request.contains("page_size") || response.contains("next_page_token") {
                assert!(request.contains("page_size"), "{rpc}: no page_size");
                assert!(request.contains("page_token"), "{rpc}: no page_token");
                assert!(
                    response.contains("next_page_token"),
                    "{rpc}: no next_page_token"
                );
                paged.push(rpc);
            }
        }
    }
    paged.sort();
    assert_eq!(
        paged,
        [
            "ApprovalService.ListPending",
            "RegistryService.List",
            "RegistryService.ResolveSkillTools",
        ]
    );
}

#[test]
fn descriptor_keeps_comments_for_reflection() {
    let fds = descriptor_set();
    let commented = fds
        .file
        .iter()
        .filter_map(|file| file.source_code_info.as_ref())
        .flat_map(|info| &info.location)
        .any(|location| {
            location
                .leading_comments()
                .contains("One declarative resource")
        });
    assert!(
        commented,
        "source comments are missing from FILE_DESCRIPTOR_SET"
    );
}

#[test]
fn call_record_round_trips() {
    use crate::v1::{
        ApprovalEvent, ApprovalMode, CallChange, CallRecord, CallState, ChangeKind, approval_event,
    };

    let event = ApprovalEvent {
        index: 42,
        event: Some(approval_event::Event::Change(Box::new(CallChange {
            kind: ChangeKind::Added.into(),
            call: Some(CallRecord {
                call_id: "c-1".into(),
                tenant: "acme".into(),
                tool: "github.create_issue".into(),
                effective_mode: ApprovalMode::Network.into(),
                state: CallState::Pending.into(),
                idempotency_key: Some("k".into()),
                ..Default::default()
            }),
        }))),
    };
    let decoded = ApprovalEvent::decode(event.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(decoded, event);
}
