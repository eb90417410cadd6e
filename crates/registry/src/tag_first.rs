//! What reading an internally tagged enum tag-first needs (`command::by_tag`, `resource::by_kind`):
//! whether a map's first key is the tag, the rest of the map with the tag refused if it comes
//! again, and, when the tag is not first, the map collected so it can be read the slow way. A
//! repeated tag or key is refused on both ways, as serde's derived reader refuses it.

use serde::de::value::CowStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
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

/// The rest of a map whose tag was read first: its entries, with the tag refused if it comes
/// again (a reader that takes the last of two tags must not see another variant than this one).
pub(crate) struct WithoutTag<A> {
    pub map: A,
    pub tag: &'static str,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for WithoutTag<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key_seed(KeyText)? else {
            return Ok(None);
        };
        if key == self.tag {
            return Err(de::Error::duplicate_field(self.tag));
        }
        seed.deserialize(CowStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// A key as text, borrowed from the input where it can be.
struct KeyText;

impl<'de> DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }

    fn visit_string<E: de::Error>(self, key: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key))
    }
}

/// The map whose first key, `first`, was read already, collected with the rest of its entries;
/// a key that comes twice is refused.
pub(crate) fn collect<'de, A: MapAccess<'de>>(
    first: String,
    mut map: A,
) -> Result<serde_json::Map<String, serde_json::Value>, A::Error> {
    let mut document = serde_json::Map::new();
    document.insert(first, map.next_value()?);
    while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
        if document.contains_key(&key) {
            return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
        }
        document.insert(key, value);
    }
    Ok(document)
}
