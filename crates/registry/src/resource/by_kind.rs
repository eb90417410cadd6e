//! Reading a [`Resource`] without buffering it, as `command::by_tag` reads a command: serde
//! reads an internally tagged enum by collecting the whole map first, in case the tag comes
//! last, and that collecting also drops the field path of any error inside (a field of the spec
//! reported at `.`). Resources are written with `kind` first, so the common case streams: the
//! kind names the spec's type, and the rest of the map is read as its [`Object`]. A resource
//! whose `kind` comes later is collected into a JSON map and read from it.

use super::{
    Kind, Object, PolicySpec, PrincipalSpec, Resource, SkillSpec, TenantSpec, ToolSpec,
    UpstreamSpec, WebhookSpec,
};
use crate::tag_first::{FirstKey, WithoutTag, collect};
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::fmt;

impl<'de> Deserialize<'de> for Resource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Resource, D::Error> {
        deserializer.deserialize_map(ResourceVisitor)
    }
}

struct ResourceVisitor;

impl<'de> Visitor<'de> for ResourceVisitor {
    type Value = Resource;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a resource: a map with its `kind`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Resource, A::Error> {
        match map.next_key_seed(FirstKey("kind"))? {
            Some(None) => {
                let kind: Kind = map.next_value()?;
                read(
                    kind,
                    MapAccessDeserializer::new(WithoutTag { map, tag: "kind" }),
                )
            }
            Some(Some(first)) => buffered(collect(first, map)?).map_err(de::Error::custom),
            None => buffered(serde_json::Map::new()).map_err(de::Error::custom),
        }
    }
}

/// A resource whose `kind` was not its first key, read from its collected entries.
fn buffered(
    mut document: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Result<Resource> {
    let kind = match document.remove("kind") {
        Some(kind) => Kind::deserialize(kind)?,
        None => return Err(de::Error::missing_field("kind")),
    };
    read(kind, serde_json::Value::Object(document))
}

/// The rest of a resource, its kind known.
fn read<'de, D: Deserializer<'de>>(kind: Kind, rest: D) -> Result<Resource, D::Error> {
    Ok(match kind {
        Kind::Tenant => Resource::Tenant(Object::<TenantSpec>::deserialize(rest)?),
        Kind::Principal => Resource::Principal(Object::<PrincipalSpec>::deserialize(rest)?),
        Kind::Upstream => Resource::Upstream(Object::<UpstreamSpec>::deserialize(rest)?),
        Kind::Tool => Resource::Tool(Object::<ToolSpec>::deserialize(rest)?),
        Kind::Skill => Resource::Skill(Object::<SkillSpec>::deserialize(rest)?),
        Kind::Policy => Resource::Policy(Object::<PolicySpec>::deserialize(rest)?),
        Kind::Webhook => Resource::Webhook(Object::<WebhookSpec>::deserialize(rest)?),
    })
}

#[cfg(test)]
mod tests;
