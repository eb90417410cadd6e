//! Reading a [`Command`] without buffering it. serde reads an internally tagged enum by first
//! collecting the whole map into its own tree of values, because the tag might come last, and
//! then reading the variant from that tree; a batch of commands is collected twice over, and the
//! resources inside it three times. Every follower decodes every entry it receives, and a
//! learner catching up or a node replaying its log does so for the whole log.
//!
//! Commands are written with their `type` first (serde writes the tag first), so the common case
//! is read as it streams: the tag names the variant, and the rest of the map is that variant's
//! fields, read straight into [`ByTag`], a twin of [`Command`] whose derived reader is
//! externally tagged. A command whose `type` is not its first key (written by hand, or by
//! another serialiser) is collected into a JSON map first and then read into the same twin, so
//! both readings accept the same documents.

use super::{Command, Proposal};
use crate::call::{CallId, NewCall, NodeId, Outcome, Timestamp};
use crate::resource::{NotifyEvent, Resource, ResourceKey};
use crate::tag_first::{FirstKey, WithoutTag, collect};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, VariantAccess, Visitor,
};
use serde::{Deserialize, forward_to_deserialize_any};
use std::fmt;

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Command, D::Error> {
        deserializer.deserialize_map(CommandVisitor)
    }
}

struct CommandVisitor;

impl<'de> Visitor<'de> for CommandVisitor {
    type Value = Command;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a command: a map with its `type`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Command, A::Error> {
        match map.next_key_seed(FirstKey("type"))? {
            Some(None) => {
                let tag: String = map.next_value()?;
                let map = WithoutTag { map, tag: "type" };
                ByTag::deserialize(Fields { tag, map }).map(Command::from)
            }
            Some(Some(first)) => buffered(collect(first, map)?).map_err(de::Error::custom),
            None => buffered(serde_json::Map::new()).map_err(de::Error::custom),
        }
    }
}

/// A command whose `type` was not its first key, read from its collected entries.
fn buffered(
    mut document: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Result<Command> {
    let tag = match document.remove("type") {
        Some(serde_json::Value::String(tag)) => tag,
        Some(other) => {
            return Err(de::Error::invalid_type(
                de::Unexpected::Other(&other.to_string()),
                &"a command's type",
            ));
        }
        None => return Err(de::Error::missing_field("type")),
    };
    let map = de::value::MapDeserializer::new(document.into_iter());
    ByTag::deserialize(Fields { tag, map }).map(Command::from)
}

/// The rest of a command's map once its tag was read, as an externally tagged enum: the tag is
/// the variant, the remaining entries its fields.
struct Fields<A> {
    tag: String,
    map: A,
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for Fields<A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for Fields<A> {
    type Error = A::Error;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), A::Error> {
        let variant = seed.deserialize(de::value::StrDeserializer::new(&self.tag))?;
        Ok((variant, self))
    }
}

impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Fields<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        Err(de::Error::invalid_type(
            de::Unexpected::UnitVariant,
            &"a command's fields",
        ))
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, A::Error> {
        Err(de::Error::invalid_type(
            de::Unexpected::NewtypeVariant,
            &"a command's fields",
        ))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, A::Error> {
        Err(de::Error::invalid_type(
            de::Unexpected::TupleVariant,
            &"a command's fields",
        ))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self.map)
    }
}

/// [`Command`]'s variants and fields, read externally tagged. Each variant carries the same
/// fields with the same serde attributes as its namesake; the tests read every variant both
/// ways.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum ByTag {
    Put {
        resources: Vec<Resource>,
    },
    Delete {
        keys: Vec<ResourceKey>,
    },
    Propose {
        call: Box<NewCall>,
    },
    Approve {
        call_id: CallId,
        approver: String,
        #[serde(default)]
        user: Option<String>,
        args_sha256: String,
        note: String,
    },
    Reject {
        call_id: CallId,
        approver: String,
        #[serde(default)]
        user: Option<String>,
        reason: String,
    },
    Cancel {
        call_id: CallId,
        principal: String,
        #[serde(default)]
        user: Option<String>,
        reason: String,
    },
    Expire {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
    },
    Claim {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
        claim_id: String,
        #[serde(default)]
        replaces_unsent: Option<String>,
    },
    Complete {
        call_id: CallId,
        claim_id: String,
        outcome: Outcome,
    },
    MarkUnknown {
        call_id: CallId,
        node: NodeId,
        epoch: u64,
    },
    Resolve {
        call_id: CallId,
        approver: String,
        #[serde(default)]
        user: Option<String>,
        outcome: Outcome,
        note: String,
    },
    Place {
        tenant: String,
        home: NodeId,
        epoch: u64,
    },
    #[serde(rename = "handover")]
    StartMove {
        tenant: String,
        epoch: u64,
        to: NodeId,
    },
    Purge {
        before: Timestamp,
    },
    AdmitNode {
        node: NodeId,
        addr: String,
    },
    LoadToolset {
        tenant: String,
        principal: String,
        #[serde(default)]
        user: Option<String>,
        toolset: String,
        include_write_tools: bool,
    },
    Notified {
        tenant: String,
        webhook: String,
        notices: Vec<(CallId, NotifyEvent)>,
    },
    Batch {
        proposals: Vec<Proposal>,
    },
}

impl From<ByTag> for Command {
    fn from(read: ByTag) -> Command {
        match read {
            ByTag::Put { resources } => Command::Put { resources },
            ByTag::Delete { keys } => Command::Delete { keys },
            ByTag::Propose { call } => Command::Propose { call },
            ByTag::Approve {
                call_id,
                approver,
                user,
                args_sha256,
                note,
            } => Command::Approve {
                call_id,
                approver,
                user,
                args_sha256,
                note,
            },
            ByTag::Reject {
                call_id,
                approver,
                user,
                reason,
            } => Command::Reject {
                call_id,
                approver,
                user,
                reason,
            },
            ByTag::Cancel {
                call_id,
                principal,
                user,
                reason,
            } => Command::Cancel {
                call_id,
                principal,
                user,
                reason,
            },
            ByTag::Expire {
                call_id,
                node,
                epoch,
            } => Command::Expire {
                call_id,
                node,
                epoch,
            },
            ByTag::Claim {
                call_id,
                node,
                epoch,
                claim_id,
                replaces_unsent,
            } => Command::Claim {
                call_id,
                node,
                epoch,
                claim_id,
                replaces_unsent,
            },
            ByTag::Complete {
                call_id,
                claim_id,
                outcome,
            } => Command::Complete {
                call_id,
                claim_id,
                outcome,
            },
            ByTag::MarkUnknown {
                call_id,
                node,
                epoch,
            } => Command::MarkUnknown {
                call_id,
                node,
                epoch,
            },
            ByTag::Resolve {
                call_id,
                approver,
                user,
                outcome,
                note,
            } => Command::Resolve {
                call_id,
                approver,
                user,
                outcome,
                note,
            },
            ByTag::Place {
                tenant,
                home,
                epoch,
            } => Command::Place {
                tenant,
                home,
                epoch,
            },
            ByTag::StartMove { tenant, epoch, to } => Command::StartMove { tenant, epoch, to },
            ByTag::Purge { before } => Command::Purge { before },
            ByTag::AdmitNode { node, addr } => Command::AdmitNode { node, addr },
            ByTag::LoadToolset {
                tenant,
                principal,
                user,
                toolset,
                include_write_tools,
            } => Command::LoadToolset {
                tenant,
                principal,
                user,
                toolset,
                include_write_tools,
            },
            ByTag::Notified {
                tenant,
                webhook,
                notices,
            } => Command::Notified {
                tenant,
                webhook,
                notices,
            },
            ByTag::Batch { proposals } => Command::Batch { proposals },
        }
    }
}

#[cfg(test)]
mod tests;
