//! Items: nodes and edges, their validation, and their compact binary key encoding.
//!
//! The key encoding (`ItemKey::encode`) is part of the log's record format and is the key of
//! the log's version table, so it never changes:
//!
//! ```text
//! node: kind=0 u8 | id_len u16 LE | id bytes
//! edge: kind=1 u8 | from_len u16 LE | from | label_len u16 LE | label | to_len u16 LE | to
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::InputError;
use crate::partition::partition_hash;

/// Longest node id (and edge endpoint) in bytes.
pub const ITEM_ID_BYTES_MAX: usize = 1024;
/// Longest edge label in bytes.
pub const LABEL_BYTES_MAX: usize = 256;

/// Nodes sort before edges wherever items are ordered by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemKind {
    Node = 0,
    Edge = 1,
}

/// The identity of an item: a node, or a labelled edge between two nodes. As JSON,
/// `{"kind": "node", "id": ..}` or `{"kind": "edge", "from": .., "label": .., "to": ..}`;
/// any other field is refused.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "lowercase", try_from = "ItemJson")]
pub enum ItemKey {
    Node {
        id: String,
    },
    Edge {
        from: String,
        label: String,
        to: String,
    },
}

/// An item object as JSON, every field it may have (serde's internally tagged enums let
/// unknown fields through, so the fields are checked here).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemJson {
    kind: ItemKind,
    id: Option<String>,
    from: Option<String>,
    label: Option<String>,
    to: Option<String>,
}

impl TryFrom<ItemJson> for ItemKey {
    type Error = String;

    fn try_from(j: ItemJson) -> Result<Self, String> {
        match (j.kind, j.id, j.from, j.label, j.to) {
            (ItemKind::Node, Some(id), None, None, None) => Ok(ItemKey::Node { id }),
            (ItemKind::Node, ..) => Err("a node item has exactly the fields kind and id".into()),
            (ItemKind::Edge, None, Some(from), Some(label), Some(to)) => {
                Ok(ItemKey::Edge { from, label, to })
            }
            (ItemKind::Edge, ..) => {
                Err("an edge item has exactly the fields kind, from, label and to".into())
            }
        }
    }
}

fn check_field(field: &'static str, s: &str, max: usize) -> Result<(), InputError> {
    if s.is_empty() {
        return Err(InputError::EmptyField { field });
    }
    if s.len() > max {
        return Err(InputError::FieldTooLong {
            field,
            len: s.len(),
            max,
        });
    }
    Ok(())
}

/// Validate raw bytes as a UTF-8 field (for callers that receive bytes, not `str`).
pub fn field_from_bytes(field: &'static str, bytes: &[u8]) -> Result<String, InputError> {
    let s = std::str::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
        field,
        offset: e.valid_up_to(),
    })?;
    Ok(s.to_owned())
}

impl ItemKey {
    /// A node key, validated.
    pub fn node(id: impl Into<String>) -> Result<Self, InputError> {
        let key = ItemKey::Node { id: id.into() };
        key.validate()?;
        Ok(key)
    }

    /// An edge key, validated.
    pub fn edge(
        from: impl Into<String>,
        label: impl Into<String>,
        to: impl Into<String>,
    ) -> Result<Self, InputError> {
        let key = ItemKey::Edge {
            from: from.into(),
            label: label.into(),
            to: to.into(),
        };
        key.validate()?;
        Ok(key)
    }

    /// Check lengths (UTF-8 is guaranteed by `String`; see `field_from_bytes` for bytes).
    pub fn validate(&self) -> Result<(), InputError> {
        match self {
            ItemKey::Node { id } => check_field("node id", id, ITEM_ID_BYTES_MAX),
            ItemKey::Edge { from, label, to } => {
                check_field("edge from", from, ITEM_ID_BYTES_MAX)?;
                check_field("edge label", label, LABEL_BYTES_MAX)?;
                check_field("edge to", to, ITEM_ID_BYTES_MAX)
            }
        }
    }

    pub fn kind(&self) -> ItemKind {
        match self {
            ItemKey::Node { .. } => ItemKind::Node,
            ItemKey::Edge { .. } => ItemKind::Edge,
        }
    }

    /// The partition key: the node id, or an edge's `from`, so out-edges live with the node.
    pub fn partition_key(&self) -> &str {
        match self {
            ItemKey::Node { id } => id,
            ItemKey::Edge { from, .. } => from,
        }
    }

    /// The 32-bit partition hash of this item (see `partition_hash`).
    pub fn hash(&self) -> u32 {
        partition_hash(self.partition_key().as_bytes())
    }

    /// The partition hash of the item whose encoding (`encode`) is `encoded`, without
    /// decoding it: its first field is the partition key (a node's id, an edge's `from`).
    /// `None` if the bytes are too short to hold that field; the rest is not checked.
    pub fn hash_of_encoded(encoded: &[u8]) -> Option<u32> {
        let len = u16::from_le_bytes(encoded.get(1..3)?.try_into().ok()?) as usize;
        Some(partition_hash(encoded.get(3..3 + len)?))
    }

    /// Bytes `encode` will append.
    pub fn encoded_len(&self) -> usize {
        match self {
            ItemKey::Node { id } => 1 + 2 + id.len(),
            ItemKey::Edge { from, label, to } => 1 + 6 + from.len() + label.len() + to.len(),
        }
    }

    /// Append the binary key encoding (see the module doc). The key must be validated.
    pub fn encode(&self, out: &mut Vec<u8>) {
        fn field(out: &mut Vec<u8>, s: &str) {
            let len = u16::try_from(s.len()).expect("validated field fits u16");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        match self {
            ItemKey::Node { id } => {
                out.push(ItemKind::Node as u8);
                field(out, id);
            }
            ItemKey::Edge { from, label, to } => {
                out.push(ItemKind::Edge as u8);
                field(out, from);
                field(out, label);
                field(out, to);
            }
        }
    }

    /// The encoding as an owned buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }

    /// Decode a key from the front of `buf`; returns the key and the bytes consumed.
    /// `None` means the bytes are not a valid key.
    pub fn decode(buf: &[u8]) -> Option<(ItemKey, usize)> {
        fn field(buf: &[u8], pos: &mut usize) -> Option<String> {
            let len = u16::from_le_bytes(buf.get(*pos..*pos + 2)?.try_into().ok()?) as usize;
            *pos += 2;
            let bytes = buf.get(*pos..*pos + len)?;
            *pos += len;
            String::from_utf8(bytes.to_vec()).ok()
        }
        let mut pos = 1;
        let key = match *buf.first()? {
            0 => ItemKey::Node {
                id: field(buf, &mut pos)?,
            },
            1 => {
                let from = field(buf, &mut pos)?;
                let label = field(buf, &mut pos)?;
                let to = field(buf, &mut pos)?;
                ItemKey::Edge { from, label, to }
            }
            _ => return None,
        };
        key.validate().ok()?;
        Some((key, pos))
    }
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemKey::Node { id } => write!(f, "node {id:?}"),
            ItemKey::Edge { from, label, to } => write!(f, "edge {from:?} -{label:?}-> {to:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        for key in [
            ItemKey::node("users/1").unwrap(),
            ItemKey::edge("a", "knows", "b").unwrap(),
            ItemKey::node("ünïcødé").unwrap(),
            ItemKey::node("a\0b").unwrap(),
        ] {
            let bytes = key.to_bytes();
            assert_eq!(bytes.len(), key.encoded_len());
            let (back, used) = ItemKey::decode(&bytes).unwrap();
            assert_eq!(back, key);
            assert_eq!(used, bytes.len());
            assert_eq!(ItemKey::hash_of_encoded(&bytes), Some(key.hash()));
        }
        // Too short to hold the partition key: no hash.
        let bytes = ItemKey::node("users/1").unwrap().to_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(
                ItemKey::hash_of_encoded(&bytes[..cut]),
                None,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn bad_keys_are_refused() {
        assert_eq!(
            ItemKey::node(""),
            Err(InputError::EmptyField { field: "node id" })
        );
        let long = "x".repeat(ITEM_ID_BYTES_MAX + 1);
        assert!(matches!(
            ItemKey::node(long),
            Err(InputError::FieldTooLong { .. })
        ));
        let long_label = "l".repeat(LABEL_BYTES_MAX + 1);
        assert!(matches!(
            ItemKey::edge("a", long_label, "b"),
            Err(InputError::FieldTooLong {
                field: "edge label",
                ..
            })
        ));
        assert!(matches!(
            field_from_bytes("node id", b"ab\xffcd"),
            Err(InputError::NotUtf8 { offset: 2, .. })
        ));
    }

    #[test]
    fn truncated_or_unknown_encodings_do_not_decode() {
        let bytes = ItemKey::edge("a", "b", "c").unwrap().to_bytes();
        for cut in 0..bytes.len() {
            assert!(ItemKey::decode(&bytes[..cut]).is_none(), "cut at {cut}");
        }
        assert!(ItemKey::decode(&[7, 0, 0]).is_none());
    }

    #[test]
    fn item_json_has_exactly_its_fields() {
        let node: ItemKey = serde_json::from_str(r#"{"kind":"node","id":"a"}"#).unwrap();
        assert_eq!(node, ItemKey::node("a").unwrap());
        let edge: ItemKey =
            serde_json::from_str(r#"{"to":"b","kind":"edge","from":"a","label":"l"}"#).unwrap();
        assert_eq!(edge, ItemKey::edge("a", "l", "b").unwrap());
        for bad in [
            r#"{"kind":"node","id":"a","x":1}"#,
            r#"{"kind":"node","id":"a","to":"b"}"#,
            r#"{"kind":"node"}"#,
            r#"{"kind":"edge","from":"a","label":"l"}"#,
            r#"{"kind":"edge","from":"a","label":"l","to":"b","id":"c"}"#,
            r#"{"kind":"vertex","id":"a"}"#,
            r#"{"id":"a"}"#,
        ] {
            assert!(
                serde_json::from_str::<ItemKey>(bad).is_err(),
                "{bad} was accepted"
            );
        }
        let text = serde_json::to_string(&edge).unwrap();
        assert_eq!(serde_json::from_str::<ItemKey>(&text).unwrap(), edge);
    }

    #[test]
    fn edges_partition_with_their_source() {
        let node = ItemKey::node("n1").unwrap();
        let edge = ItemKey::edge("n1", "likes", "n2").unwrap();
        assert_eq!(node.hash(), edge.hash());
    }
}
