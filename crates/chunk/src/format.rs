//! On-disk formats: volume header, record header, hint file. All integers little-endian and
//! fixed width. `docs/chunk-format.md` has the byte diagrams; change both together.

use std::path::{Path, PathBuf};

use crate::id::ChunkId;

/// Format version of hint files (and of the store as a whole, in the marker).
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
pub(crate) const RECORD_MAGIC: &[u8; 4] = b"CHNK";

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

/// Version of volume headers written now: 2 adds the volume's lane (bytes 16..24), 3 its
/// unsynced window (bytes 24..32), which a build that does not keep the window (one that does
/// not count deletes against the write buffer) must not append under, so it refuses the
/// version. Version 1 headers (zeros there) still read, as lane 0 of 1 in generation 0, and
/// versions 1 and 2 with an unknown window (0).
pub const VOLUME_FORMAT_VERSION: u32 = 3;

/// What a volume header says: its number and which lane of which generation it belongs to.
///
/// A store appends to several volumes at once, one per lane; a chunk's records always go to
/// the lane `lane_of(id, lanes)`, and a lane's volumes are numbered in the order they were
/// written, so the records of one chunk are in (volume, offset) order. A generation is a run
/// of volumes written with one lane count; it is named by its first volume's number, and a
/// store opened with another lane count starts a new one above every existing volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeHeader {
    /// The volume's number (also in its file name).
    pub number: u32,
    /// Number of the first volume of its generation (0 for version 1 volumes).
    pub generation: u32,
    /// Its lane, below `lanes`.
    pub lane: u16,
    /// Lanes of its generation.
    pub lanes: u16,
    /// Most bytes of it that were ever written but not yet synced at once (the store's
    /// write buffer when it was created); 0 where unknown (written before this was kept).
    /// Recovery reads damage further than this before an intact record as synced data.
    pub unsynced_window: u64,
}

impl VolumeHeader {
    /// Encode the header.
    pub fn encode(&self) -> [u8; VOLUME_HEADER_LEN as usize] {
        let mut b = [0u8; VOLUME_HEADER_LEN as usize];
        b[0..8].copy_from_slice(VOLUME_MAGIC);
        b[8..12].copy_from_slice(&VOLUME_FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.number.to_le_bytes());
        b[16..20].copy_from_slice(&self.generation.to_le_bytes());
        b[20..22].copy_from_slice(&self.lane.to_le_bytes());
        b[22..24].copy_from_slice(&self.lanes.to_le_bytes());
        b[24..32].copy_from_slice(&self.unsynced_window.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode a header (version 1 or 2).
    pub fn decode(b: &[u8; VOLUME_HEADER_LEN as usize]) -> Result<Self, String> {
        if &b[0..8] != VOLUME_MAGIC {
            return Err("no volume magic".into());
        }
        let crc = u32::from_le_bytes(b[60..64].try_into().unwrap());
        if crc != crc32c::crc32c(&b[0..60]) {
            return Err("volume header checksum mismatch".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u16_at = |at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
        let number = u32_at(12);
        let h = match u32_at(8) {
            1 => VolumeHeader {
                number,
                generation: 0,
                lane: 0,
                lanes: 1,
                unsynced_window: 0,
            },
            version @ (2 | 3) => VolumeHeader {
                number,
                generation: u32_at(16),
                lane: u16_at(20),
                lanes: u16_at(22),
                unsynced_window: if version == 3 {
                    u64::from_le_bytes(b[24..32].try_into().unwrap())
                } else {
                    0
                },
            },
            version => {
                return Err(format!(
                    "format version {version}, this build reads 1 to {VOLUME_FORMAT_VERSION}"
                ))
            }
        };
        if h.lane >= h.lanes || h.generation > h.number {
            return Err(format!(
                "lane {} of {} in generation {} is not a lane of volume {number}",
                h.lane, h.lanes, h.generation
            ));
        }
        Ok(h)
    }
}

/// Whether a volume header was written whole: its magic and checksum match, whatever its
/// version and fields say (a header cut short by a crash while the volume was created fails).
pub fn volume_header_is_whole(b: &[u8; VOLUME_HEADER_LEN as usize]) -> bool {
    &b[0..8] == VOLUME_MAGIC
        && u32::from_le_bytes(b[60..64].try_into().unwrap()) == crc32c::crc32c(&b[0..60])
}

/// The lane every record of chunk `id` goes to when a generation has `lanes` lanes.
pub fn lane_of(id: &ChunkId, lanes: u16) -> u16 {
    let b = id.as_bytes();
    (u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")) % u64::from(lanes)) as u16
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
    parse_volume_number(name.strip_suffix(".volume")?)
}

/// The volume number a file's name starts with (`00000012` of `00000012.hint`): 8 digits.
pub fn parse_volume_number(stem: &str) -> Option<u32> {
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
        let h = VolumeHeader {
            number: 7,
            generation: 5,
            lane: 2,
            lanes: 4,
            unsynced_window: 64 << 20,
        };
        assert_eq!(VolumeHeader::decode(&h.encode()).unwrap(), h);
        for byte in 0..VOLUME_HEADER_LEN as usize {
            let mut b = h.encode();
            b[byte] ^= 1;
            assert!(VolumeHeader::decode(&b).is_err(), "flipped byte {byte}");
        }
        // A lane outside its generation's lanes is refused even with a good checksum.
        let bad = VolumeHeader { lane: 4, ..h }.encode();
        assert!(VolumeHeader::decode(&bad).is_err());
    }

    #[test]
    fn version_1_volume_headers_read_as_one_lane() {
        let mut b = [0u8; VOLUME_HEADER_LEN as usize];
        b[0..8].copy_from_slice(VOLUME_MAGIC);
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&9u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        let h = VolumeHeader::decode(&b).unwrap();
        assert_eq!((h.number, h.generation, h.lane, h.lanes), (9, 0, 0, 1));
    }

    #[test]
    fn lanes_spread_ids() {
        let mut counts = [0u32; 4];
        for i in 0u32..4000 {
            counts[usize::from(lane_of(&ChunkId::of(&i.to_le_bytes()), 4))] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(lane_of(&ChunkId::of(b"x"), 1), 0);
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
