//! On-disk formats: volume header, record header, hint file. All integers little-endian and
//! fixed width. `docs/chunk-format.md` has the byte diagrams; change both together.

use std::path::{Path, PathBuf};

use crate::id::ChunkId;

/// Format version written into every volume and hint header.
pub const FORMAT_VERSION: u32 = 1;

/// Name of the marker file that makes a directory a chunk store (and is the lock file).
pub const MARKER_FILE: &str = "CHUNKSTORE";
/// Contents of the marker file.
pub const MARKER_TEXT: &str = "spindle chunk store, format 1\n";

/// Bytes of a volume header.
pub const VOLUME_HEADER_LEN: u64 = 64;
const VOLUME_MAGIC: &[u8; 8] = b"SPNDLVOL";

/// Bytes of a record header; the chunk's bytes follow it.
pub const RECORD_HEADER_LEN: u64 = 52;
const RECORD_MAGIC: &[u8; 4] = b"CHNK";

/// Bytes of a hint file header.
pub const HINT_HEADER_LEN: usize = 32;
/// Bytes of one hint entry.
pub const HINT_ENTRY_LEN: usize = 48;
/// Bytes of a hint file trailer (CRC32C of the entries).
pub const HINT_TRAILER_LEN: usize = 4;
const HINT_MAGIC: &[u8; 8] = b"SPNDLHNT";

/// What a record says about its chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// The chunk's bytes follow the header.
    Put,
    /// The chunk was deleted; no bytes follow.
    Tombstone,
}

impl RecordKind {
    fn code(self) -> u8 {
        match self {
            Self::Put => 1,
            Self::Tombstone => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Put),
            2 => Some(Self::Tombstone),
            _ => None,
        }
    }
}

/// A decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Put or tombstone.
    pub kind: RecordKind,
    /// Bytes of chunk data after the header (0 for a tombstone).
    pub len: u32,
    /// CRC32C of the chunk data.
    pub data_crc: u32,
    /// The chunk.
    pub id: ChunkId,
}

impl RecordHeader {
    /// A put record header for `data`, whose id is `id`.
    pub fn put(id: ChunkId, data: &[u8]) -> Self {
        let len = u32::try_from(data.len()).expect("chunk length checked against chunk_bytes_max");
        Self {
            kind: RecordKind::Put,
            len,
            data_crc: crc32c::crc32c(data),
            id,
        }
    }

    /// A tombstone for `id`.
    pub fn tombstone(id: ChunkId) -> Self {
        Self {
            kind: RecordKind::Tombstone,
            len: 0,
            data_crc: crc32c::crc32c(&[]),
            id,
        }
    }

    /// Bytes of the whole record on disk.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN + u64::from(self.len)
    }

    /// Encode into exactly `RECORD_HEADER_LEN` bytes.
    pub fn encode(&self) -> [u8; RECORD_HEADER_LEN as usize] {
        let mut b = [0u8; RECORD_HEADER_LEN as usize];
        b[0..4].copy_from_slice(RECORD_MAGIC);
        b[4] = self.kind.code();
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.data_crc.to_le_bytes());
        b[16..48].copy_from_slice(self.id.as_bytes());
        let crc = crc32c::crc32c(&b[0..48]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode, or say why the bytes are not a valid header.
    pub fn decode(b: &[u8; RECORD_HEADER_LEN as usize]) -> Result<Self, &'static str> {
        if &b[0..4] != RECORD_MAGIC {
            return Err("no record magic");
        }
        let crc = u32::from_le_bytes(b[48..52].try_into().unwrap());
        if crc != crc32c::crc32c(&b[0..48]) {
            return Err("record header checksum mismatch");
        }
        let kind = RecordKind::from_code(b[4]).ok_or("unknown record kind")?;
        if b[5..8] != [0, 0, 0] {
            return Err("reserved header bytes are not zero");
        }
        let len = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if kind == RecordKind::Tombstone && len != 0 {
            return Err("tombstone with data");
        }
        let data_crc = u32::from_le_bytes(b[12..16].try_into().unwrap());
        let id = ChunkId::from_bytes(b[16..48].try_into().unwrap());
        Ok(Self {
            kind,
            len,
            data_crc,
            id,
        })
    }
}

/// Encode a volume header.
pub fn encode_volume_header(volume: u32) -> [u8; VOLUME_HEADER_LEN as usize] {
    let mut b = [0u8; VOLUME_HEADER_LEN as usize];
    b[0..8].copy_from_slice(VOLUME_MAGIC);
    b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[12..16].copy_from_slice(&volume.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Decode a volume header; returns the volume number written in it.
pub fn decode_volume_header(b: &[u8; VOLUME_HEADER_LEN as usize]) -> Result<u32, String> {
    if &b[0..8] != VOLUME_MAGIC {
        return Err("no volume magic".into());
    }
    let crc = u32::from_le_bytes(b[60..64].try_into().unwrap());
    if crc != crc32c::crc32c(&b[0..60]) {
        return Err("volume header checksum mismatch".into());
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(format!(
            "format version {version}, this build reads {FORMAT_VERSION}"
        ));
    }
    Ok(u32::from_le_bytes(b[12..16].try_into().unwrap()))
}

/// One record of a volume as listed in a hint file (and in memory while a volume is active).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintEntry {
    /// The chunk.
    pub id: ChunkId,
    /// Offset of the record header in the volume.
    pub offset: u64,
    /// Bytes of chunk data (0 for a tombstone).
    pub len: u32,
    /// Put or tombstone.
    pub kind: RecordKind,
}

impl HintEntry {
    /// Bytes of the whole record in the volume.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN + u64::from(self.len)
    }
}

/// Encode a whole hint file for `volume`, which is `volume_len` bytes long.
pub fn encode_hint(volume: u32, volume_len: u64, entries: &[HintEntry]) -> Vec<u8> {
    let count = u32::try_from(entries.len()).expect("a volume holds fewer than 2^32 records");
    let mut b = Vec::with_capacity(HINT_HEADER_LEN + entries.len() * HINT_ENTRY_LEN + 4);
    b.extend_from_slice(HINT_MAGIC);
    b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    b.extend_from_slice(&volume.to_le_bytes());
    b.extend_from_slice(&volume_len.to_le_bytes());
    b.extend_from_slice(&count.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..28]);
    b.extend_from_slice(&crc.to_le_bytes());
    for e in entries {
        b.extend_from_slice(e.id.as_bytes());
        b.extend_from_slice(&e.offset.to_le_bytes());
        b.extend_from_slice(&e.len.to_le_bytes());
        b.push(e.kind.code());
        b.extend_from_slice(&[0, 0, 0]);
    }
    let crc = crc32c::crc32c(&b[HINT_HEADER_LEN..]);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A decoded hint file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    /// The volume it describes.
    pub volume: u32,
    /// The volume's length when the hint was written; a volume of another length needs a scan.
    pub volume_len: u64,
    /// Every record of the volume, in file order.
    pub entries: Vec<HintEntry>,
}

/// Why a hint file cannot be trusted, and where in it the damage is: the start of the
/// checksummed region that failed (the header at 0, the entries at `HINT_HEADER_LEN`), or of
/// the one entry that did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintDamage {
    /// Byte offset in the hint file.
    pub offset: u64,
    /// What did not match.
    pub reason: String,
}

/// Decode a hint file, or say why and where it cannot be trusted (the caller then scans the
/// volume).
pub fn decode_hint(b: &[u8]) -> Result<Hint, HintDamage> {
    let damage = |offset: usize, reason: String| HintDamage {
        offset: offset as u64,
        reason,
    };
    if b.len() < HINT_HEADER_LEN + HINT_TRAILER_LEN || &b[0..8] != HINT_MAGIC {
        return Err(damage(0, "no hint magic".into()));
    }
    let crc = u32::from_le_bytes(b[28..32].try_into().unwrap());
    if crc != crc32c::crc32c(&b[0..28]) {
        return Err(damage(0, "hint header checksum mismatch".into()));
    }
    let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(damage(0, format!("hint format version {version}")));
    }
    let volume = u32::from_le_bytes(b[12..16].try_into().unwrap());
    let volume_len = u64::from_le_bytes(b[16..24].try_into().unwrap());
    let count = u32::from_le_bytes(b[24..28].try_into().unwrap()) as usize;
    let body_end = HINT_HEADER_LEN + count * HINT_ENTRY_LEN;
    if b.len() != body_end + HINT_TRAILER_LEN {
        return Err(damage(
            HINT_HEADER_LEN,
            format!("hint length {} does not fit {count} entries", b.len()),
        ));
    }
    let crc = u32::from_le_bytes(b[body_end..body_end + 4].try_into().unwrap());
    if crc != crc32c::crc32c(&b[HINT_HEADER_LEN..body_end]) {
        return Err(damage(
            HINT_HEADER_LEN,
            "hint entries checksum mismatch".into(),
        ));
    }
    // `count` is bounded by the length check above: the vector holds what the file holds.
    let mut entries = Vec::with_capacity(count);
    let mut next_offset = VOLUME_HEADER_LEN;
    for (i, e) in b[HINT_HEADER_LEN..body_end]
        .chunks_exact(HINT_ENTRY_LEN)
        .enumerate()
    {
        let at = HINT_HEADER_LEN + i * HINT_ENTRY_LEN;
        let kind = RecordKind::from_code(e[44])
            .ok_or_else(|| damage(at, "unknown record kind in hint".into()))?;
        if e[45..48] != [0, 0, 0] {
            return Err(damage(at, "reserved hint entry bytes are not zero".into()));
        }
        let entry = HintEntry {
            id: ChunkId::from_bytes(e[0..32].try_into().unwrap()),
            offset: u64::from_le_bytes(e[32..40].try_into().unwrap()),
            len: u32::from_le_bytes(e[40..44].try_into().unwrap()),
            kind,
        };
        next_offset =
            check_hint_entry(&entry, next_offset, volume_len).map_err(|r| damage(at, r))?;
        entries.push(entry);
    }
    if next_offset != volume_len {
        return Err(damage(
            body_end,
            format!("hint records end at {next_offset}, the volume at {volume_len}"),
        ));
    }
    Ok(Hint {
        volume,
        volume_len,
        entries,
    })
}

/// Check that `e` is the record a volume holds at `expected_offset` (records are contiguous
/// from the volume header on, tombstones carry no data) and ends within `volume_len`; return
/// where the next record starts. A checksum only says the hint is as written, so a hint that
/// disagrees with this layout is refused rather than handed to the catalog, which asserts it,
/// and to reads, which would size their buffers by its lengths.
fn check_hint_entry(e: &HintEntry, expected_offset: u64, volume_len: u64) -> Result<u64, String> {
    if e.offset != expected_offset {
        return Err(format!(
            "hint record at offset {}, the previous record ends at {expected_offset}",
            e.offset
        ));
    }
    if e.kind == RecordKind::Tombstone && e.len != 0 {
        return Err(format!("hint tombstone at offset {} has data", e.offset));
    }
    match e.offset.checked_add(e.record_len()) {
        Some(end) if end <= volume_len => Ok(end),
        _ => Err(format!(
            "hint record at offset {} ends past the volume's {volume_len} bytes",
            e.offset
        )),
    }
}

/// Path of volume `n` in `dir`.
pub fn volume_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:08}.volume"))
}

/// Path of the hint file of volume `n` in `dir`.
pub fn hint_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:08}.hint"))
}

/// Path a hint is written to before it is renamed into place.
pub fn hint_tmp_path(dir: &Path, n: u32) -> PathBuf {
    dir.join(format!("{n:08}.hint.tmp"))
}

/// The volume number of a file name like `00000012.volume`.
pub fn parse_volume_name(name: &str) -> Option<u32> {
    let stem = name.strip_suffix(".volume")?;
    if stem.len() != 8 || !stem.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_header_round_trips() {
        let data = b"hello chunk";
        let h = RecordHeader::put(ChunkId::of(data), data);
        assert_eq!(RecordHeader::decode(&h.encode()).unwrap(), h);
        let t = RecordHeader::tombstone(ChunkId::of(data));
        assert_eq!(RecordHeader::decode(&t.encode()).unwrap(), t);
    }

    #[test]
    fn every_flipped_header_bit_is_detected() {
        let data = b"x";
        let enc = RecordHeader::put(ChunkId::of(data), data).encode();
        for byte in 0..enc.len() {
            for bit in 0..8 {
                let mut b = enc;
                b[byte] ^= 1 << bit;
                assert!(RecordHeader::decode(&b).is_err(), "byte {byte} bit {bit}");
            }
        }
    }

    #[test]
    fn zeroes_are_not_a_record() {
        assert!(RecordHeader::decode(&[0u8; RECORD_HEADER_LEN as usize]).is_err());
    }

    #[test]
    fn volume_header_round_trips() {
        assert_eq!(decode_volume_header(&encode_volume_header(7)).unwrap(), 7);
        let mut b = encode_volume_header(7);
        b[13] ^= 1;
        assert!(decode_volume_header(&b).is_err());
    }

    #[test]
    fn hint_round_trips_and_detects_damage() {
        let entries = vec![
            HintEntry {
                id: ChunkId::of(b"a"),
                offset: 64,
                len: 1,
                kind: RecordKind::Put,
            },
            HintEntry {
                id: ChunkId::of(b"a"),
                offset: 117,
                len: 0,
                kind: RecordKind::Tombstone,
            },
        ];
        let b = encode_hint(3, 169, &entries);
        assert_eq!(
            b.len(),
            HINT_HEADER_LEN + 2 * HINT_ENTRY_LEN + HINT_TRAILER_LEN
        );
        let h = decode_hint(&b).unwrap();
        assert_eq!((h.volume, h.volume_len, h.entries), (3, 169, entries));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            let damage = decode_hint(&bad).unwrap_err();
            let region = if i < HINT_HEADER_LEN {
                0
            } else {
                HINT_HEADER_LEN
            };
            assert_eq!(damage.offset, region as u64, "byte {i}");
        }
        assert!(decode_hint(&b[..b.len() - 1]).is_err());
    }

    #[test]
    fn volume_names_parse() {
        assert_eq!(parse_volume_name("00000012.volume"), Some(12));
        assert_eq!(parse_volume_name("12.volume"), None);
        assert_eq!(parse_volume_name("00000012.hint"), None);
        let p = volume_path(Path::new("d"), 12);
        assert_eq!(
            parse_volume_name(p.file_name().unwrap().to_str().unwrap()),
            Some(12)
        );
    }
}
