//! Fuzzes what the gatehouse gRPC services read off the wire besides protobuf itself
//! (`services::convert`): a resource's kind, names and `spec_json` (`resource_from`, what
//! `RegistryService.Apply` takes), and the opaque page tokens clients hand back (`page_after`).
//! Inputs are resources with odd unicode, random kinds and random JSON specs, and page tokens
//! that are random or damaged.
//!
//! Properties: a stored resource sent as the wire has it reads back as itself; a wire resource
//! of any kind, names and spec is read or refused as an invalid request without a panic, and one
//! that is read sends and reads back unchanged; a page token names the key it was made from; any
//! other token is empty (the first page), refused, or names some key, never a panic.
//!
//! Cases per property: `PROPTEST_CASES`, else the small default below (`scripts/fuzz` runs many).

use gatehouse_fronts::services::convert::{page_after, page_token, resource_from, resource_to};
use gatehouse_gateway::pipeline::ErrorCode;
use gatehouse_proto::v1 as pb;
use gatehouse_registry::registry::Stored;
use gatehouse_registry::resource::{
    API_VERSION, JwtSubject, Metadata, Object, PrincipalSpec, Role, TenantSpec,
};
use gatehouse_registry::{Kind, Resource, ResourceKey};
use gatehouse_testkit::fuzz::{self, config};
use proptest::prelude::*;
use serde_json::Value;

fn odd_string() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        "\\PC{0,12}",
        "[\\x00-\\x1f\"\\\\\u{85}\u{feff}\u{2028}\u{202e}é𝄞]{0,8}"
    ]
}

fn metadata() -> impl Strategy<Value = Metadata> {
    let labels = prop::collection::btree_map(odd_string(), odd_string(), 0..3);
    (odd_string(), labels).prop_map(|(name, labels)| Metadata {
        name,
        tenant: None,
        labels,
    })
}

/// Resources as a registry may hold them (their names and texts need not be valid: the wire
/// carries what it is given).
fn resource() -> impl Strategy<Value = Resource> {
    let tenant = (metadata(), prop::option::of(odd_string()), odd_string()).prop_map(
        |(metadata, display_name, description)| {
            Resource::Tenant(Object {
                api_version: API_VERSION.into(),
                metadata,
                spec: TenantSpec {
                    display_name,
                    description,
                },
            })
        },
    );
    let role = prop::sample::select(vec![Role::Agent, Role::Approver, Role::Admin]);
    let roles = prop::collection::btree_map(odd_string(), prop::collection::vec(role, 0..3), 0..3);
    let principal = (
        metadata(),
        odd_string(),
        roles,
        prop::option::of(odd_string()),
    )
        .prop_map(|(metadata, subject, roles, user)| {
            Resource::Principal(Object {
                api_version: API_VERSION.into(),
                metadata,
                spec: PrincipalSpec {
                    jwt: Some(JwtSubject {
                        issuer: "https://idp.example".into(),
                        subject,
                    }),
                    roles,
                    user,
                    ..PrincipalSpec::default()
                },
            })
        });
    prop_oneof![tenant, principal]
}

fn any_json() -> impl Strategy<Value = Value> {
    let keys = prop_oneof![
        Just("displayName".to_owned()),
        Just("roles".to_owned()),
        Just("jwt".to_owned()),
        odd_string()
    ];
    fuzz::json(odd_string(), keys)
}

fn key() -> impl Strategy<Value = ResourceKey> {
    let kind = prop::sample::select(Kind::ALL.to_vec());
    (kind, prop::option::of(odd_string()), odd_string())
        .prop_map(|(kind, tenant, name)| ResourceKey { kind, tenant, name })
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn a_stored_resource_reads_back_from_the_wire(resource in resource(), generation in any::<u64>()) {
        let stored = Stored { resource: resource.clone(), generation };
        let wire = resource_to(&stored);
        prop_assert_eq!(wire.generation, generation);
        let read = resource_from(wire).map_err(|e| TestCaseError::fail(e.message))?;
        prop_assert_eq!(read, resource);
    }

    #[test]
    fn any_wire_resource_is_read_or_refused(
        kind in prop_oneof![prop::sample::select(vec!["Tenant", "principals", "TOOL", "Skill", "Policy", "Webhook", "Upstream"]).prop_map(str::to_owned), odd_string()],
        name in odd_string(),
        tenant in prop::option::of(odd_string()),
        labels in prop::collection::btree_map(odd_string(), odd_string(), 0..3),
        spec in prop_oneof![3 => any_json().prop_map(|v| v.to_string()), 1 => odd_string()],
    ) {
        let wire = pb::Resource { kind, name, tenant, labels: labels.into_iter().collect(), spec_json: spec, generation: 0 };
        match resource_from(wire) {
            Err(e) => prop_assert_eq!(e.code, ErrorCode::InvalidRequest),
            Ok(read) => {
                let again = resource_from(resource_to(&Stored { resource: read.clone(), generation: 1 }));
                prop_assert_eq!(again.map_err(|e| e.message), Ok(read));
            }
        }
    }

    #[test]
    fn a_page_token_names_its_key_and_others_never_panic(
        key in key(),
        at in any::<prop::sample::Index>(),
        with in prop::sample::select("0123456789abcdefABCDEFxyz ".chars().collect::<Vec<_>>()),
        random in "\\PC{0,40}|[0-9a-f]{0,80}",
    ) {
        let token = page_token(&key);
        prop_assert_eq!(page_after(&token).map_err(|e| e.message), Ok(Some(key)));
        let mut damaged: Vec<char> = token.chars().collect();
        let i = at.index(damaged.len());
        damaged[i] = with;
        let damaged: String = damaged.into_iter().collect();
        for token in [damaged, random] {
            match page_after(&token) {
                Ok(None) => prop_assert!(token.is_empty()),
                Ok(Some(_)) => {}
                Err(e) => prop_assert_eq!(e.code, ErrorCode::InvalidRequest),
            }
        }
    }
}
