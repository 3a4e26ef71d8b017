//! The version table: each item's current version (the index of its latest record), which
//! the writer checks conditions against. It is rebuilt on open from a checkpoint plus the
//! retained log, and checkpointed before prefix truncation deletes the records behind it.
//!
//! Checkpoint file `versions.ckpt` (written as `.tmp`, synced, renamed, directory synced):
//!
//! ```text
//! 0   8  magic "SPNDLVER"
//! 8   4  format version u32 LE (1)
//! 12  4  reserved, zero
//! 16  8  as_of index u64 LE: the table reflects records 1..=as_of
//! 24  8  entry count u64 LE
//! 32  .. entries: key_len u16 LE | key (ItemKey encoding) | version u64 LE
//! end 4  CRC32C of every byte before it
//! ```

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

use spindle_core::Index;

use crate::segment::sync_dir;

pub const CHECKPOINT_FILE: &str = "versions.ckpt";
const MAGIC: &[u8; 8] = b"SPNDLVER";
const FORMAT_VERSION: u32 = 1;

type Map = HashMap<Box<[u8]>, u64, foldhash::fast::RandomState>;

/// Item (by encoded key) → current version.
#[derive(Debug, Default)]
pub struct VersionTable {
    map: Map,
}

impl VersionTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The item's current version, `Index::ZERO` if it was never written.
    pub fn get(&self, key: &[u8]) -> Index {
        Index::new(self.map.get(key).copied().unwrap_or(0))
    }

    /// Record that `key` was written at `version`.
    pub fn set(&mut self, key: &[u8], version: Index) {
        if let Some(v) = self.map.get_mut(key) {
            *v = version.get();
        } else {
            self.map.insert(key.into(), version.get());
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Write a checkpoint of the table as of `as_of` into `dir`, durably.
    pub fn write_checkpoint(&self, dir: &Path, as_of: Index) -> io::Result<()> {
        let mut buf = Vec::with_capacity(32 + self.map.len() * 32);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&as_of.get().to_le_bytes());
        buf.extend_from_slice(&(self.map.len() as u64).to_le_bytes());
        for (key, version) in &self.map {
            let len = u16::try_from(key.len()).expect("encoded keys fit u16");
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(key);
            buf.extend_from_slice(&version.to_le_bytes());
        }
        let crc = crc32c::crc32c(&buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(&buf)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(CHECKPOINT_FILE))?;
        sync_dir(dir)
    }

    /// Load the checkpoint in `dir`: `Ok(None)` if there is none, an error string if it is
    /// damaged.
    pub fn read_checkpoint(
        dir: &Path,
    ) -> io::Result<Option<Result<(VersionTable, Index), String>>> {
        let buf = match fs::read(dir.join(CHECKPOINT_FILE)) {
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
    if version != FORMAT_VERSION {
        return Err(format!("unknown checkpoint format version {version}"));
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
        table.set(
            key,
            Index::new(u64::from_le_bytes(v.try_into().expect("8 bytes"))),
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

    #[test]
    fn checkpoint_round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = VersionTable::new();
        t.set(b"\0\x01\0a", Index::new(5));
        t.set(b"\0\x01\0b", Index::new(9));
        t.set(b"\0\x01\0a", Index::new(11));
        t.write_checkpoint(dir.path(), Index::new(12)).unwrap();
        let (back, as_of) = VersionTable::read_checkpoint(dir.path())
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(as_of, Index::new(12));
        assert_eq!(back.get(b"\0\x01\0a"), Index::new(11));
        assert_eq!(back.get(b"\0\x01\0b"), Index::new(9));
        assert_eq!(back.get(b"\0\x01\0c"), Index::ZERO);

        let path = dir.path().join(CHECKPOINT_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes[40] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        assert!(VersionTable::read_checkpoint(dir.path())
            .unwrap()
            .unwrap()
            .is_err());
    }
}
