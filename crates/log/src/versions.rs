//! The version table: each item's current version (the index of its latest record) and
//! whether that record is a delete, which the writer checks conditions against. It is
//! rebuilt on open from a checkpoint plus the retained log, and checkpointed before prefix
//! truncation deletes the records behind it.
//!
//! Condition semantics: a condition `expected` holds when it is the item's current version,
//! or when it is 0 and the item does not exist, that is, was never written or its latest
//! record is a delete. (A deleted item can thus be re-created under "must not exist", and
//! its delete's index still names it exactly.)
//!
//! Checkpoint file `versions.ckpt` (written as `.tmp`, synced, renamed, directory synced):
//!
//! ```text
//! 0   8  magic "SPNDLVER"
//! 8   4  format version u32 LE (2)
//! 12  4  reserved, zero
//! 16  8  as_of index u64 LE: the table reflects records 1..=as_of
//! 24  8  entry count u64 LE
//! 32  .. entries: key_len u16 LE | key (ItemKey encoding) | version u64 LE
//!        (bit 63 of version set: the item's latest record is a delete)
//! end 4  CRC32C of every byte before it
//! ```
//!
//! Format version 1 (the same layout, written before deletes were tracked) is still read:
//! its entries are taken as live, so an item deleted before such a checkpoint counts as
//! existing (a 0-condition on it fails) until it is written again.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::Path;

use spindle_core::Index;

use crate::fs::Fs;

pub const CHECKPOINT_FILE: &str = "versions.ckpt";
const MAGIC: &[u8; 8] = b"SPNDLVER";
const FORMAT_VERSION: u32 = 2;
/// The format written before deletes were tracked; read with every entry live.
const FORMAT_VERSION_LIVE_ONLY: u32 = 1;
/// Bit of a stored version marking "the latest record is a delete". Indexes stay below it.
const DELETED_BIT: u64 = 1 << 63;

type Map = HashMap<KeyBytes, u64, foldhash::fast::RandomState>;

/// Longest encoded key stored inside the table's own slots. The writer probes the table
/// once per record; a key on the heap costs every probe a second cache miss (the pointer,
/// then the bytes), which on a table larger than the cache was most of the writer's time.
/// 38 bytes hold a node key of up to 35 bytes of id and an edge of two 12-byte ids with a
/// 7-byte label (each field carries a 2-byte length; docs/log-format.md).
const INLINE_KEY_BYTES: usize = 38;

/// An encoded item key: inline when short, else on the heap. Hashes and compares as the
/// byte slice it holds, so the table is probed with `&[u8]`.
#[derive(Clone, Debug)]
enum KeyBytes {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(Box<[u8]>),
}

impl KeyBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBytes::Heap(b) => b,
        }
    }
}

impl From<&[u8]> for KeyBytes {
    fn from(key: &[u8]) -> Self {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY_BYTES => {
                let mut bytes = [0u8; INLINE_KEY_BYTES];
                bytes[..key.len()].copy_from_slice(key);
                KeyBytes::Inline { len, bytes }
            }
            _ => KeyBytes::Heap(key.into()),
        }
    }
}

impl Borrow<[u8]> for KeyBytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

// `Borrow` requires these to agree with `[u8]`'s: they delegate to the slice.
impl Hash for KeyBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq for KeyBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for KeyBytes {}

/// Item (by encoded key) → current version, with `DELETED_BIT` set when it is a delete.
#[derive(Debug, Default)]
pub struct VersionTable {
    map: Map,
}

impl VersionTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The item's current version (a delete's index if it was deleted), `Index::ZERO` if it
    /// was never written.
    pub fn get(&self, key: &[u8]) -> Index {
        Index::new(self.map.get(key).map_or(0, |v| v & !DELETED_BIT))
    }

    /// Whether the item's latest record is a delete.
    pub fn is_deleted(&self, key: &[u8]) -> bool {
        self.map.get(key).is_some_and(|v| v & DELETED_BIT != 0)
    }

    /// Whether the condition "`key` is at version `expected`" holds (see the module doc:
    /// 0 holds for an item never written or deleted).
    pub fn holds(&self, key: &[u8], expected: Index) -> bool {
        self.get(key) == expected || (expected == Index::ZERO && self.is_deleted(key))
    }

    /// Record that `key` was written at `version`, by a delete if `deleted`.
    pub fn set(&mut self, key: &[u8], version: Index, deleted: bool) {
        assert!(
            version.get() & DELETED_BIT == 0,
            "log index {version} reaches the version table's delete bit"
        );
        let stored = version.get() | if deleted { DELETED_BIT } else { 0 };
        if let Some(v) = self.map.get_mut(key) {
            *v = stored;
        } else {
            self.map.insert(key.into(), stored);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Write a checkpoint of the table as of `as_of` into `dir`, durably.
    pub fn write_checkpoint(&self, fs: &dyn Fs, dir: &Path, as_of: Index) -> io::Result<()> {
        let buf = self.encode_checkpoint(as_of);
        let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let f = fs.create(&tmp)?;
        f.write_all_at(&buf, 0)?;
        f.sync_all()?;
        fs.rename(&tmp, &dir.join(CHECKPOINT_FILE))?;
        fs.sync_dir(dir)
    }

    /// The checkpoint bytes (module doc) of the table as of `as_of`; `decode_checkpoint`
    /// reads them back. The JetStream log stores the same bytes in an object store.
    pub fn encode_checkpoint(&self, as_of: Index) -> Vec<u8> {
        let mut buf = Vec::with_capacity(32 + self.map.len() * 32);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&as_of.get().to_le_bytes());
        buf.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        for (key, version) in &self.map {
            let key = key.as_slice();
            let len = u16::try_from(key.len()).expect("encoded keys fit u16");
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(key);
            buf.extend_from_slice(&version.to_le_bytes());
        }
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        buf
    }

    /// Load the checkpoint in `dir`: `Ok(None)` if there is none, an error string if it is
    /// damaged.
    pub fn read_checkpoint(
        fs: &dyn Fs,
        dir: &Path,
    ) -> io::Result<Option<Result<(VersionTable, Index), String>>> {
        let buf = match fs.read(&dir.join(CHECKPOINT_FILE)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(Some(decode_checkpoint(&buf)))
    }
}

/// Decode a checkpoint file's bytes (see the module doc): the table and its `as_of` index,
/// or what is wrong with the bytes. Allocation follows the entries the bytes hold, never the
/// declared count.
pub fn decode_checkpoint(buf: &[u8]) -> Result<(VersionTable, Index), String> {
    if buf.len() < 36 || &buf[0..8] != MAGIC {
        return Err("not a version checkpoint (bad magic or too short)".to_owned());
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("checkpoint checksum mismatch".to_owned());
    }
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION && version != FORMAT_VERSION_LIVE_ONLY {
        return Err(format!(
            "unknown checkpoint format version {version} (this build reads 1 and 2)"
        ));
    }
    let as_of = Index::new(u64_at(16));
    let count = u64_at(24);
    let mut table = VersionTable::new();
    let mut pos = 32;
    for _ in 0..count {
        let len = body
            .get(pos..pos + 2)
            .map(|b| u16::from_le_bytes(b.try_into().expect("2 bytes")) as usize)
            .ok_or("checkpoint entry cut short")?;
        let key = body
            .get(pos + 2..pos + 2 + len)
            .ok_or("checkpoint entry cut short")?;
        let v = body
            .get(pos + 2 + len..pos + 10 + len)
            .ok_or("checkpoint entry cut short")?;
        let stored = u64::from_le_bytes(v.try_into().expect("8 bytes"));
        if version == FORMAT_VERSION_LIVE_ONLY && stored & DELETED_BIT != 0 {
            return Err(format!("format 1 checkpoint entry has version {stored}"));
        }
        table.set(
            key,
            Index::new(stored & !DELETED_BIT),
            stored & DELETED_BIT != 0,
        );
        pos += 10 + len;
    }
    if pos != body.len() {
        return Err("checkpoint has trailing bytes".to_owned());
    }
    Ok((table, as_of))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;

    /// Keys on both sides of the inline bound behave alike: found by their bytes only.
    #[test]
    fn short_and_long_keys_are_kept_apart() {
        let mut t = VersionTable::new();
        let keys: Vec<Vec<u8>> = [0, 1, 37, 38, 39, 255, 256, 1000]
            .iter()
            .map(|&n| (0..n).map(|i| (i % 7) as u8).collect())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            t.set(k, Index::new(i as u64 + 1), i % 2 == 1);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(
                t.get(k),
                Index::new(i as u64 + 1),
                "key of {} bytes",
                k.len()
            );
            assert_eq!(t.is_deleted(k), i % 2 == 1);
            let mut longer = k.clone();
            longer.push(0);
            if !keys.contains(&longer) {
                assert_eq!(t.get(&longer), Index::ZERO, "{} bytes + 1", k.len());
            }
        }
        assert_eq!(t.len(), keys.len());
        let (back, _) = decode_checkpoint(&t.encode_checkpoint(Index::new(9))).unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(back.get(k), Index::new(i as u64 + 1));
        }
    }

    #[test]
    fn checkpoint_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = VersionTable::new();
        t.set(b"\0\x01\0a", Index::new(5), false);
        t.set(b"\0\x01\0b", Index::new(9), true);
        t.set(b"\0\x01\0a", Index::new(11), false);
        t.write_checkpoint(&StdFs, dir.path(), Index::new(12))
            .unwrap();
        let (back, as_of) = VersionTable::read_checkpoint(&StdFs, dir.path())
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(as_of, Index::new(12));
        assert_eq!(back.get(b"\0\x01\0a"), Index::new(11));
        assert_eq!(back.get(b"\0\x01\0b"), Index::new(9));
        assert_eq!(back.get(b"\0\x01\0c"), Index::ZERO);
        assert!(back.is_deleted(b"\0\x01\0b") && !back.is_deleted(b"\0\x01\0a"));

        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(VersionTable::read_checkpoint(&StdFs, dir.path())
            .unwrap()
            .unwrap()
            .is_err());
    }
}

#[cfg(test)]
mod condition_tests {
    use super::*;
    use crate::fs::StdFs;

    #[test]
    fn zero_holds_for_absent_and_deleted_items_only() {
        let mut t = VersionTable::new();
        let (live, gone, never) = (b"live".as_slice(), b"gone".as_slice(), b"never".as_slice());
        t.set(live, Index::new(3), false);
        t.set(gone, Index::new(4), true);
        assert!(t.holds(never, Index::ZERO));
        assert!(!t.holds(never, Index::new(4)));
        assert!(t.holds(gone, Index::ZERO));
        assert!(t.holds(gone, Index::new(4)));
        assert!(!t.holds(gone, Index::new(3)));
        assert!(!t.holds(live, Index::ZERO));
        assert!(t.holds(live, Index::new(3)));
        assert_eq!(t.get(gone), Index::new(4));
        t.set(gone, Index::new(5), false);
        assert!(!t.holds(gone, Index::ZERO));
    }

    /// A format 1 checkpoint (no delete bit) is read with every entry live.
    #[test]
    fn format_one_checkpoints_are_read_as_live() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&FORMAT_VERSION_LIVE_ONLY.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&7u64.to_le_bytes());
        buf.extend_from_slice(&1u64.to_le_bytes());
        buf.extend_from_slice(&1u16.to_le_bytes());
        buf.push(b'k');
        buf.extend_from_slice(&6u64.to_le_bytes());
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        std::fs::write(dir.path().join(CHECKPOINT_FILE), &buf).unwrap();
        let (t, as_of) = VersionTable::read_checkpoint(&StdFs, dir.path())
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(as_of, Index::new(7));
        assert_eq!(t.get(b"k"), Index::new(6));
        assert!(!t.is_deleted(b"k"));

        buf[8..12].copy_from_slice(&3u32.to_le_bytes());
        let n = buf.len() - 4;
        let crc = crc32c::crc32c(&buf[..n]);
        buf[n..].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(dir.path().join(CHECKPOINT_FILE), &buf).unwrap();
        let err = VersionTable::read_checkpoint(&StdFs, dir.path())
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(err.contains("format version 3"), "{err}");
    }
}
