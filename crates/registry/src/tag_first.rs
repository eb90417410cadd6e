//! What reading an internally tagged enum tag-first needs (`command::by_tag`, `resource::by_kind`):
//! whether a map's first key is the tag, and, when it is not, the map collected so it can be
//! read the slow way.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::fmt;

/// Reads a map's first key: `None` when it is the tag (the field name given), the key itself
/// otherwise.
pub(crate) struct FirstKey(pub &'static str);

impl<'de> DeserializeSeed<'de> for FirstKey {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for FirstKey {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok((key != self.0).then(|| key.to_owned()))
    }
}

/// The map whose first key, `first`, was read already, collected with the rest of its entries.
pub(crate) fn collect<'de, A: MapAccess<'de>>(
    first: Option<String>,
    mut map: A,
) -> Result<serde_json::Map<String, serde_json::Value>, A::Error> {
    let mut document = serde_json::Map::new();
    if let Some(key) = first {
        document.insert(key, map.next_value()?);
    }
    while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
        document.insert(key, value);
    }
    Ok(document)
}
