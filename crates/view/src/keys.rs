//! The Disk View key and value layout (docs/disk-view-format.md).
//!
//! ```text
//! key   = hash u32 BE | kind u8 | item key (order-preserving) | index u64 BE
//! node  : kind 0 | esc(id)
//! edge  : kind 1 | esc(from) | esc(label) | esc(to)
//! esc(s): every byte of s, with 0x00 written as 0x00 0xFF, then the terminator 0x00 0x01
//! value = tag u8 (0 object, 1 tombstone) | JSON object bytes (object only)
//! ```
//!
//! Byte order of keys is therefore (hash, kind, fields, index): a partition range is one
//! contiguous key range, a node's out-edges are contiguous, and one item's versions sit
//! together in index order. `esc` is prefix-free, so an item's key prefix (everything but the
//! index) never prefixes another item's.

use spindle_core::{Index, ItemKey, ItemKind, Value};

/// Bytes of the trailing index.
pub const INDEX_BYTES: usize = 8;
/// Bytes of the leading hash.
pub const HASH_BYTES: usize = 4;

const ESCAPE: u8 = 0x00;
const ESCAPED_ZERO: u8 = 0xFF;
const TERMINATOR: u8 = 0x01;

/// Value tag of a JSON object version.
pub const VALUE_OBJECT: u8 = 0;
/// Value tag of a tombstone version.
pub const VALUE_TOMBSTONE: u8 = 1;

fn escape_into(s: &str, out: &mut Vec<u8>) {
    for &b in s.as_bytes() {
        out.push(b);
        if b == ESCAPE {
            out.push(ESCAPED_ZERO);
        }
    }
    out.push(ESCAPE);
    out.push(TERMINATOR);
}

/// Append the item prefix (hash | kind | escaped fields) of `key`.
pub fn item_prefix_into(key: &ItemKey, out: &mut Vec<u8>) {
    out.extend_from_slice(&key.hash().to_be_bytes());
    match key {
        ItemKey::Node { id } => {
            out.push(ItemKind::Node as u8);
            escape_into(id, out);
        }
        ItemKey::Edge { from, label, to } => {
            out.push(ItemKind::Edge as u8);
            escape_into(from, out);
            escape_into(label, out);
            escape_into(to, out);
        }
    }
}

/// The item prefix of `key` as an owned buffer.
pub fn item_prefix(key: &ItemKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(HASH_BYTES + 1 + key.encoded_len() + 8);
    item_prefix_into(key, &mut out);
    out
}

/// The full key of one version of `key`.
pub fn version_key(key: &ItemKey, index: Index) -> Vec<u8> {
    let mut out = item_prefix(key);
    out.extend_from_slice(&index.get().to_be_bytes());
    out
}

/// The prefix shared by every out-edge of node `from` (hash | edge kind | esc(from)).
pub fn out_edges_prefix(from: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(HASH_BYTES + 1 + from.len() + 4);
    out.extend_from_slice(&spindle_core::partition_hash(from.as_bytes()).to_be_bytes());
    out.push(ItemKind::Edge as u8);
    escape_into(from, &mut out);
    out
}

/// The out-edges of node `from` with one label: `out_edges_prefix(from) | esc(label)`.
pub fn out_edges_label_prefix(from: &str, label: &str) -> Vec<u8> {
    let mut out = out_edges_prefix(from);
    escape_into(label, &mut out);
    out
}

/// The item prefix of edge `from -label-> to`, built without validating the fields (a
/// paging cursor from a client need not name an edge that can exist).
pub fn edge_prefix(from: &str, label: &str, to: &str) -> Vec<u8> {
    let mut out = out_edges_label_prefix(from, label);
    escape_into(to, &mut out);
    out
}

/// The first key at or above hash `lo` (`lo` < 2^32).
pub fn hash_floor(lo: u64) -> Vec<u8> {
    let lo = u32::try_from(lo).expect("a hash range starts below 2^32");
    lo.to_be_bytes().to_vec()
}

/// The exclusive upper bound for keys below hash `hi`; `None` for 2^32 (no bound).
pub fn hash_ceiling(hi: u64) -> Option<Vec<u8>> {
    u32::try_from(hi).ok().map(|h| h.to_be_bytes().to_vec())
}

/// A Disk View key split into its parts, borrowing the key bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyParts<'a> {
    pub hash: u32,
    pub kind: ItemKind,
    /// Everything but the index: equal prefixes mean the same item.
    pub prefix: &'a [u8],
    pub index: Index,
}

/// Split a Disk View key. `None` if the bytes are not a well-formed key.
pub fn split_key(key: &[u8]) -> Option<KeyParts<'_>> {
    if key.len() < HASH_BYTES + 1 + 2 + INDEX_BYTES {
        return None;
    }
    let (prefix, index) = key.split_at(key.len() - INDEX_BYTES);
    let (hash, kind) = prefix_hash_kind(prefix)?;
    Some(KeyParts {
        hash,
        kind,
        prefix,
        index: Index::new(u64::from_be_bytes(index.try_into().ok()?)),
    })
}

/// The partition hash and kind an item prefix (a key without its index) starts with.
pub fn prefix_hash_kind(prefix: &[u8]) -> Option<(u32, ItemKind)> {
    let hash = u32::from_be_bytes(prefix.get(..HASH_BYTES)?.try_into().ok()?);
    let kind = match prefix.get(HASH_BYTES)? {
        0 => ItemKind::Node,
        1 => ItemKind::Edge,
        _ => return None,
    };
    Some((hash, kind))
}

fn unescape(buf: &[u8], pos: &mut usize) -> Option<String> {
    let mut out = Vec::new();
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if b != ESCAPE {
            out.push(b);
            continue;
        }
        let next = *buf.get(*pos)?;
        *pos += 1;
        match next {
            ESCAPED_ZERO => out.push(0),
            TERMINATOR => return String::from_utf8(out).ok(),
            _ => return None,
        }
    }
}

/// Decode the item of an item prefix (as returned in `KeyParts::prefix`).
pub fn decode_item(prefix: &[u8]) -> Option<ItemKey> {
    let mut pos = HASH_BYTES + 1;
    let key = match *prefix.get(HASH_BYTES)? {
        0 => ItemKey::Node {
            id: unescape(prefix, &mut pos)?,
        },
        1 => {
            let from = unescape(prefix, &mut pos)?;
            let label = unescape(prefix, &mut pos)?;
            let to = unescape(prefix, &mut pos)?;
            ItemKey::Edge { from, label, to }
        }
        _ => return None,
    };
    if pos != prefix.len() || key.validate().is_err() {
        return None;
    }
    Some(key)
}

/// Append the core item-key encoding (`ItemKey::encode`) of an item prefix without
/// building an `ItemKey`. `None` if the prefix is malformed (the bytes of `out` are then
/// unspecified).
pub fn transcode_item(prefix: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let kind = *prefix.get(HASH_BYTES)?;
    let fields = match kind {
        0 => 1,
        1 => 3,
        _ => return None,
    };
    // The core encoding is never longer than the prefix (4 hash bytes and a 2-byte
    // terminator per field against a 2-byte length per field), so one reserve serves it.
    out.reserve(prefix.len());
    out.push(kind);
    let mut rest = &prefix[HASH_BYTES + 1..];
    for _ in 0..fields {
        let len_at = out.len();
        out.extend_from_slice(&[0, 0]);
        // Copy the runs between escape bytes whole: most fields are one run.
        loop {
            let run = memchr::memchr(ESCAPE, rest)?;
            out.extend_from_slice(&rest[..run]);
            let next = *rest.get(run + 1)?;
            rest = &rest[run + 2..];
            match next {
                ESCAPED_ZERO => out.push(0),
                TERMINATOR => break,
                _ => return None,
            }
        }
        let len = u16::try_from(out.len() - len_at - 2).ok()?;
        out[len_at..len_at + 2].copy_from_slice(&len.to_le_bytes());
    }
    rest.is_empty().then_some(())
}

/// Encode a version's value.
pub fn encode_value(value: &Value, out: &mut Vec<u8>) {
    match value.as_json() {
        Some(json) => {
            out.push(VALUE_OBJECT);
            out.extend_from_slice(json.as_bytes());
        }
        None => out.push(VALUE_TOMBSTONE),
    }
}

/// A stored value, borrowed: `Some(json)` for an object, `None` for a tombstone.
/// The outer `None` means the bytes are not a well-formed value.
pub fn split_value(bytes: &[u8]) -> Option<Option<&[u8]>> {
    match bytes.split_first()? {
        (&VALUE_OBJECT, json) => Some(Some(json)),
        (&VALUE_TOMBSTONE, []) => Some(None),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field() -> impl Strategy<Value = String> {
        // Include NUL and the escape bytes' neighbours so escaping is exercised.
        proptest::collection::vec(
            prop_oneof![Just('\0'), Just('\u{1}'), Just('a'), Just('b'), Just('ÿ')],
            1..5,
        )
        .prop_map(|cs| cs.into_iter().collect())
    }

    fn item() -> impl Strategy<Value = ItemKey> {
        prop_oneof![
            field().prop_map(|id| ItemKey::Node { id }),
            (field(), field(), field()).prop_map(|(from, label, to)| ItemKey::Edge {
                from,
                label,
                to
            }),
        ]
    }

    /// The order keys must sort in: hash, kind, then the fields as byte strings, then index.
    fn logical(key: &ItemKey, index: u64) -> (u32, u8, Vec<Vec<u8>>, u64) {
        let fields = match key {
            ItemKey::Node { id } => vec![id.as_bytes().to_vec()],
            ItemKey::Edge { from, label, to } => vec![
                from.as_bytes().to_vec(),
                label.as_bytes().to_vec(),
                to.as_bytes().to_vec(),
            ],
        };
        (key.hash(), key.kind() as u8, fields, index)
    }

    proptest! {
        #[test]
        fn byte_order_is_logical_order(a in item(), b in item(), i in 0u64..4, j in 0u64..4) {
            let (ka, kb) = (version_key(&a, Index::new(i)), version_key(&b, Index::new(j)));
            prop_assert_eq!(ka.cmp(&kb), logical(&a, i).cmp(&logical(&b, j)));
        }

        #[test]
        fn keys_round_trip(a in item(), i in any::<u64>()) {
            let key = version_key(&a, Index::new(i));
            let parts = split_key(&key).unwrap();
            prop_assert_eq!(parts.hash, a.hash());
            prop_assert_eq!(parts.kind, a.kind());
            prop_assert_eq!(parts.index, Index::new(i));
            prop_assert_eq!(decode_item(parts.prefix), Some(a.clone()));
            let mut core = Vec::new();
            transcode_item(parts.prefix, &mut core).unwrap();
            prop_assert_eq!(core, a.to_bytes());
        }
    }

    #[test]
    fn out_edges_share_a_prefix_that_excludes_the_node() {
        let p = out_edges_prefix("n\0");
        let edge = version_key(&ItemKey::edge("n\0", "l", "m").unwrap(), Index::FIRST);
        assert!(edge.starts_with(&p));
        let node = version_key(&ItemKey::node("n\0").unwrap(), Index::FIRST);
        assert!(!node.starts_with(&p));
        let longer = version_key(&ItemKey::edge("n", "l", "m").unwrap(), Index::FIRST);
        assert!(!longer.starts_with(&p));
    }

    #[test]
    fn malformed_keys_and_values_are_refused() {
        let key = version_key(&ItemKey::node("a").unwrap(), Index::FIRST);
        assert!(split_key(&key[..5]).is_none());
        let mut bad_kind = key.clone();
        bad_kind[4] = 9;
        assert!(split_key(&bad_kind).is_none());
        let parts = split_key(&key).unwrap();
        assert!(decode_item(&parts.prefix[..parts.prefix.len() - 1]).is_none());
        assert_eq!(split_value(&[VALUE_TOMBSTONE]), Some(None));
        assert_eq!(
            split_value(&[VALUE_OBJECT, b'{', b'}']),
            Some(Some(&b"{}"[..]))
        );
        assert!(split_value(&[VALUE_TOMBSTONE, 0]).is_none());
        assert!(split_value(&[7]).is_none());
        assert!(split_value(&[]).is_none());
    }

    #[test]
    fn hash_bounds() {
        assert_eq!(hash_floor(0x0102_0304), vec![1, 2, 3, 4]);
        assert_eq!(hash_ceiling(1 << 32), None);
        assert_eq!(hash_ceiling(5), Some(vec![0, 0, 0, 5]));
    }
}
