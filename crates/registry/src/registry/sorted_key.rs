//! The key of the resources map: a resource's key behind the first sixteen bytes of its sort
//! order, kept beside it in the map's node.
//!
//! A key's own comparison reads the tenant and the name from the heap, a cache miss per key a
//! look-up passes; with tens of thousands of tenants a put's one look-up was about a twentieth
//! of the cluster benchmark's CPU (mostly `memcmp` on cold names). The prefix decides almost
//! every comparison from the node alone, and the keys' own order breaks its ties, so the map
//! keeps exactly `ResourceKey`'s order: listings, snapshots and look-ups by `&ResourceKey`
//! (through `Borrow`, comparing the slow way) see no difference.

use crate::resource::ResourceKey;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Borrow;
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SortedKey {
    prefix: u128,
    key: ResourceKey,
}

impl SortedKey {
    pub fn new(key: ResourceKey) -> Self {
        SortedKey {
            prefix: prefix(&key),
            key,
        }
    }

    pub fn key(&self) -> &ResourceKey {
        &self.key
    }
}

/// The first sixteen bytes of an encoding whose byte order is the keys' order: the kind, 0 or 1
/// for no tenant or a tenant, the tenant with each 0 byte written as `0 FF` and a 0 after it
/// (so a tenant sorts before every longer one it begins), then the name; zeros after a short
/// key. A shorter encoding that begins a longer one pads to no more than it, so `a < b` gives
/// `prefix(a) <= prefix(b)`: a prefix that differs decides, an equal one leaves it to the keys.
fn prefix(key: &ResourceKey) -> u128 {
    let mut bytes = [0u8; 16];
    let mut at = 0;
    let mut put = |b: u8| {
        if let Some(slot) = bytes.get_mut(at) {
            *slot = b;
            at += 1;
        }
    };
    put(key.kind as u8);
    match &key.tenant {
        None => put(0),
        Some(tenant) => {
            put(1);
            for &b in tenant.as_bytes() {
                put(b);
                if b == 0 {
                    put(0xFF);
                }
            }
            put(0);
        }
    }
    // UTF-8 never holds 0xFF, so a name's first byte sorts below an escaped 0 of a tenant.
    for &b in key.name.as_bytes() {
        put(b);
    }
    u128::from_be_bytes(bytes)
}

impl Ord for SortedKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.key.cmp(&other.key))
    }
}

impl PartialOrd for SortedKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Sound because the two orders are one (the property test below holds them to it).
impl Borrow<ResourceKey> for SortedKey {
    fn borrow(&self) -> &ResourceKey {
        &self.key
    }
}

/// Written and read as the key alone: snapshots keep their bytes.
impl Serialize for SortedKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.key.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SortedKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ResourceKey::deserialize(d).map(SortedKey::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Kind;
    use proptest::prelude::*;

    fn key(kind: Kind, tenant: Option<&str>, name: &str) -> ResourceKey {
        ResourceKey {
            kind,
            tenant: tenant.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    #[test]
    fn the_kind_byte_follows_the_kinds_order() {
        for pair in Kind::ALL.windows(2) {
            assert!(pair[0] < pair[1]);
            assert!((pair[0] as u8) < (pair[1] as u8), "{pair:?}");
        }
    }

    #[test]
    fn keys_that_share_their_first_sixteen_bytes_are_ordered_by_the_rest() {
        let a = key(Kind::Tool, Some("tenant-abcdefgh"), "read-1");
        let b = key(Kind::Tool, Some("tenant-abcdefgh"), "read-2");
        assert_eq!(prefix(&a), prefix(&b), "the tenant fills the prefix");
        assert_eq!(
            SortedKey::new(a.clone()).cmp(&SortedKey::new(b.clone())),
            a.cmp(&b)
        );
        assert_eq!(a.cmp(&b), Ordering::Less);
    }

    #[test]
    fn a_tenant_sorts_before_a_longer_one_it_begins_whatever_the_names() {
        let short = key(Kind::Skill, Some("ab"), "zzz");
        let long = key(Kind::Skill, Some("abc"), "a");
        let with_nul = key(Kind::Skill, Some("ab\0"), "");
        assert!(short < long && short < with_nul);
        assert!(SortedKey::new(short.clone()) < SortedKey::new(long));
        assert!(SortedKey::new(short) < SortedKey::new(with_nul));
    }

    fn any_text() -> impl Strategy<Value = String> {
        // Few symbols, so keys share long beginnings; a 0 byte and a character of several bytes.
        proptest::collection::vec(
            prop_oneof![Just('a'), Just('b'), Just('\0'), Just('é')],
            0..20,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    fn any_key() -> impl Strategy<Value = ResourceKey> {
        (
            proptest::sample::select(Kind::ALL.to_vec()),
            proptest::option::of(any_text()),
            any_text(),
        )
            .prop_map(|(kind, tenant, name)| ResourceKey { kind, tenant, name })
    }

    proptest! {
        #[test]
        fn the_sorted_key_orders_as_the_resource_key_does(a in any_key(), b in any_key()) {
            let order = SortedKey::new(a.clone()).cmp(&SortedKey::new(b.clone()));
            prop_assert_eq!(order, a.cmp(&b));
            if prefix(&a) != prefix(&b) {
                prop_assert_eq!(prefix(&a).cmp(&prefix(&b)), a.cmp(&b), "a prefix that differs decides");
            }
        }
    }
}
