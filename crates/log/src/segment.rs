//! Segment files: naming, the header, creation with preallocation, and scanning.
//!
//! A segment is named by its first index (`00000000000000000001.seg`, 20 decimal digits so
//! names sort) and holds consecutive frames after a 32-byte header:
//!
//! ```text
//! 0   8  magic  "SPNDLLOG"
//! 8   4  format version u32 LE (1)
//! 12  4  unsynced window u32 LE: the writer never has more than this many bytes of the
//!          segment written but not synced (0: unknown, for segments written before it
//!          was recorded or without syncing). Recovery uses it to tell a torn tail from
//!          damage (see `recovery`).
//! 16  8  first index u64 LE
//! 24  4  CRC32C of bytes [0..24]
//! 28  4  reserved, zero
//! 32  .. frames, then zeros up to the preallocated size
//! ```
//!
//! A segment appears under its final name only once its header is synced (created as
//! `.tmp`, synced, renamed, directory synced), so a named segment always has a valid header.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spindle_core::record::RecordFlags;
use spindle_core::Index;

use crate::frame::{decode_frame, frame_crc, FrameFault, FRAME_HEADER_BYTES};
use crate::fs::{Fs, FsFile, StdFs};

pub const SEGMENT_HEADER_BYTES: u64 = 32;
const MAGIC: &[u8; 8] = b"SPNDLLOG";
const FORMAT_VERSION: u32 = 1;
const SUFFIX: &str = ".seg";

/// The file name of the segment whose first index is `first`.
pub fn segment_file_name(first: Index) -> String {
    format!("{:020}{SUFFIX}", first.get())
}

/// The first index encoded in a segment file name, if it is one.
pub fn parse_segment_name(name: &str) -> Option<Index> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Index::new)
}

/// Refuse a log directory that holds a file the log does not write (or its temporary,
/// `NAME.tmp`). A segment whose name was damaged would otherwise be left out of the log
/// unseen: the last one, and its acknowledged records would be gone; the first, and the
/// log would seem truncated.
pub(crate) fn check_names(fs: &dyn Fs, dir: &Path) -> Result<(), crate::error::OpenError> {
    let names = fs.list(dir).map_err(crate::error::io_at(dir))?;
    for name in names {
        if spindle_fs::is_left_by_the_file_system(&name) {
            tracing::warn!(dir = %dir.display(), "{name:?} in the log directory is a file system's own, not the log's: left alone");
            continue;
        }
        let ok = is_log_file_name(&name) || name.strip_suffix(".tmp").is_some_and(is_log_file_name);
        if !ok {
            return Err(crate::error::OpenError::Corrupt {
                file: dir.join(&name),
                offset: 0,
                reason: format!(
                    "{name:?} is not a file the log writes (a segment is named by 20 digits \
                     and \"{SUFFIX}\"); a segment with a damaged name would be left out of \
                     the log, so it is refused: rename the file if it is a damaged segment \
                     (its header holds its first index), or move it out of the directory"
                ),
            });
        }
    }
    Ok(())
}

/// A file the log writes: a segment, its lock, its hint or its checkpoint.
pub(crate) fn is_log_file_name(name: &str) -> bool {
    parse_segment_name(name).is_some()
        || name == crate::file_log::LOCK_FILE
        || name == crate::hint::HINT_FILE
        || name == crate::versions::CHECKPOINT_FILE
}

/// List the segments in `dir` on the real file system, sorted by first index.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(Index, PathBuf)>> {
    list_segments_in(&StdFs, dir)
}

/// List the segments in `dir`, sorted by first index.
pub fn list_segments_in(fs: &dyn Fs, dir: &Path) -> io::Result<Vec<(Index, PathBuf)>> {
    let mut out = Vec::new();
    for name in fs.list(dir)? {
        if let Some(first) = parse_segment_name(&name) {
            out.push((first, dir.join(name)));
        }
    }
    out.sort();
    Ok(out)
}

fn encode_header(first: Index, unsynced_window_bytes: u32) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&unsynced_window_bytes.to_le_bytes());
    h[16..24].copy_from_slice(&first.get().to_le_bytes());
    let crc = crc32c::crc32c(&h[0..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Check a segment header; returns the first index it declares or what is wrong with it.
pub fn decode_header(h: &[u8]) -> Result<Index, String> {
    if h.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(format!(
            "header is {} bytes, expected {SEGMENT_HEADER_BYTES}",
            h.len()
        ));
    }
    if &h[0..8] != MAGIC {
        return Err("bad magic: not a Spindle log segment".to_owned());
    }
    let crc = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes"));
    if crc32c::crc32c(&h[0..24]) != crc {
        return Err("header checksum mismatch".to_owned());
    }
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!("unknown segment format version {version}"));
    }
    if h[28..32] != [0; 4] {
        return Err("reserved header bytes 28..32 are not zero".to_owned());
    }
    let first = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    if first == 0 || first > FIRST_INDEX_MAX {
        return Err(format!(
            "first index {first} is outside 1..={FIRST_INDEX_MAX}"
        ));
    }
    Ok(Index::new(first))
}

/// The largest first index a segment header may declare: 2^62, far past any index a log can
/// reach (2^62 appends at one a nanosecond take 146 years), and low enough that no index in
/// a segment reaches the version table's delete bit (2^63), since a segment holds fewer
/// than 2^62 records.
pub const FIRST_INDEX_MAX: u64 = 1 << 62;

/// The unsynced window a header declares (0: unknown). Call after `decode_header` accepted it.
pub fn header_unsynced_window(h: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")))
}

/// Why `create_segment` failed.
#[derive(Debug)]
pub enum CreateSegmentError {
    /// Before the segment had its name: nothing of it is left (its `.tmp` file was removed
    /// as far as it could be, and open removes any `.tmp` anyway). The log may go on.
    Unnamed(io::Error),
    /// After the rename: a segment may be in place under its name, its directory entry
    /// perhaps not durable. The log must not append past it elsewhere (a later open would
    /// find the named segment out of place): a failure of the log.
    Named(io::Error),
}

impl CreateSegmentError {
    pub fn into_io(self) -> io::Error {
        match self {
            CreateSegmentError::Unnamed(e) | CreateSegmentError::Named(e) => e,
        }
    }
}

/// Create a preallocated segment starting at `first`, durable under its final name: written
/// as `.tmp`, synced, renamed, and the directory synced (the segment's name is durable
/// before any record in it is acknowledged).
pub fn create_segment(
    fs: &dyn Fs,
    dir: &Path,
    first: Index,
    segment_bytes: u64,
    unsynced_window_bytes: u32,
) -> Result<Arc<dyn FsFile>, CreateSegmentError> {
    let name = segment_file_name(first);
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(&name);
    let prepared = (|| {
        let file = fs.create(&tmp)?;
        file.write_all_at(&encode_header(first, unsynced_window_bytes), 0)?;
        // Reserve the space so appends do not change the size (and fdatasync need not
        // write size metadata).
        file.allocate(segment_bytes)?;
        file.sync_all()?;
        Ok(file)
    })();
    let file = match prepared {
        Ok(file) => file,
        Err(e) => {
            // Give back what a half-made file holds (a full disk's last blocks); the
            // caller may try again.
            let _ = fs.remove(&tmp);
            return Err(CreateSegmentError::Unnamed(e));
        }
    };
    if let Err(e) = fs.rename(&tmp, &path) {
        let _ = fs.remove(&tmp);
        return Err(CreateSegmentError::Unnamed(e));
    }
    fs.sync_dir(dir).map_err(CreateSegmentError::Named)?;
    Ok(file)
}

/// Where a scan of a segment's frames stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanEnd {
    /// The index after the last valid frame.
    pub next_index: Index,
    /// Byte offset after the last valid frame.
    pub end_offset: u64,
    /// The index after the last valid commit record (a transaction boundary).
    pub commit_next_index: Index,
    /// Byte offset after the last valid commit record.
    pub commit_end_offset: u64,
    /// The first invalid frame, if the scan stopped on one rather than on zeros or the end.
    pub fault: Option<(u64, FrameFault)>,
}

/// Scan the frames of a whole segment image `buf` (header included), calling `visit` with
/// each valid frame's index, payload and offset, stopping at the first invalid frame.
pub fn scan_frames(
    buf: &[u8],
    first: Index,
    payload_max: usize,
    mut visit: impl FnMut(Index, &[u8], u64) -> Result<(), String>,
) -> Result<ScanEnd, (u64, String)> {
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    let mut end = ScanEnd {
        next_index: first,
        end_offset: offset as u64,
        commit_next_index: first,
        commit_end_offset: offset as u64,
        fault: None,
    };
    while offset < buf.len() {
        match decode_frame(&buf[offset..], end.next_index, payload_max) {
            Ok(frame) if frame.index == Index::MAX => {
                // Only damage or a crafted file gets here; `Index::next` would panic.
                end.fault = Some((offset as u64, FrameFault::IndexOverflow));
                break;
            }
            Ok(frame) => {
                visit(frame.index, frame.payload, offset as u64)
                    .map_err(|reason| (offset as u64, reason))?;
                offset += frame.total_len();
                end.next_index = frame.index.next();
                end.end_offset = offset as u64;
                if frame.payload[0] & RecordFlags::COMMIT != 0 {
                    end.commit_next_index = end.next_index;
                    end.commit_end_offset = end.end_offset;
                }
            }
            Err(FrameFault::Zero) if is_zero(&buf[offset..]) => break,
            Err(FrameFault::Short) if is_zero(&buf[offset..]) => break,
            Err(fault) => {
                end.fault = Some((offset as u64, fault));
                break;
            }
        }
    }
    Ok(end)
}

/// The first intact frame at or after byte `from` of a segment image whose index is at least
/// `min_index`: a length within the record limit, an index that could follow, and a matching
/// checksum. Used after a bad frame to tell damage (intact frames follow) from a torn tail.
pub fn find_frame_after(
    buf: &[u8],
    from: u64,
    min_index: Index,
    payload_max: usize,
) -> Option<(u64, Index)> {
    let start = from as usize;
    // Each frame is at least one header and one payload byte, which bounds the index.
    let max_index = min_index
        .get()
        .saturating_add((buf.len().saturating_sub(start) / (FRAME_HEADER_BYTES + 1)) as u64);
    let last = buf.len().checked_sub(FRAME_HEADER_BYTES + 1)?;
    for at in start..=last {
        let h = &buf[at..at + FRAME_HEADER_BYTES];
        let len = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes")) as usize;
        if len == 0 || len > payload_max || at + FRAME_HEADER_BYTES + len > buf.len() {
            continue;
        }
        let index = u64::from_le_bytes(h[8..16].try_into().expect("8 bytes"));
        if index < min_index.get() || index > max_index {
            continue;
        }
        let crc = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
        if frame_crc(&buf[at + 4..at + FRAME_HEADER_BYTES + len]) == crc {
            return Some((at as u64, Index::new(index)));
        }
    }
    None
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
        let a = segment_file_name(Index::new(9));
        let b = segment_file_name(Index::new(10));
        assert!(a < b);
        assert_eq!(parse_segment_name(&a), Some(Index::new(9)));
        assert_eq!(parse_segment_name("9.seg"), None);
        assert_eq!(parse_segment_name(&format!("{a}.tmp")), None);
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let h = encode_header(Index::new(77), 4096);
        assert_eq!(decode_header(&h), Ok(Index::new(77)));
        assert_eq!(header_unsynced_window(&h), 4096);
        for i in 0..32 {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(decode_header(&bad).is_err(), "flip at {i}");
        }
        // A header whose checksum holds but whose first index no log reaches.
        assert_eq!(
            decode_header(&encode_header(Index::new(FIRST_INDEX_MAX), 0)),
            Ok(Index::new(FIRST_INDEX_MAX))
        );
        for first in [0, FIRST_INDEX_MAX + 1, 1 << 63, u64::MAX] {
            let err = decode_header(&encode_header(Index::new(first), 0)).unwrap_err();
            assert!(err.contains("outside"), "{first}: {err}");
        }
    }
}
