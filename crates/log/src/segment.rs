//! Segment files: naming, the header, creation with preallocation, and scanning.
//!
//! A segment is named by its first index (`00000000000000000001.seg`, 20 decimal digits so
//! names sort) and holds consecutive frames after a 32-byte header:
//!
//! ```text
//! 0   8  magic  "SPNDLLOG"
//! 8   4  format version u32 LE (1)
//! 12  4  reserved, zero
//! 16  8  first index u64 LE
//! 24  4  CRC32C of bytes [0..24]
//! 28  4  reserved, zero
//! 32  .. frames, then zeros up to the preallocated size
//! ```
//!
//! A segment appears under its final name only once its header is synced (created as
//! `.tmp`, synced, renamed, directory synced), so a named segment always has a valid header.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use spindle_core::record::RecordFlags;
use spindle_core::Index;

use crate::frame::{decode_frame, FrameFault};

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

/// List the segments in `dir`, sorted by first index.
pub fn list_segments(dir: &Path) -> io::Result<Vec<(Index, PathBuf)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(first) = name.to_str().and_then(parse_segment_name) {
            out.push((first, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn encode_header(first: Index) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES as usize];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
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
    Ok(Index::new(u64::from_le_bytes(
        h[16..24].try_into().expect("8 bytes"),
    )))
}

/// Sync a directory so that creations, renames and deletions in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Create a preallocated segment starting at `first`, durable under its final name.
pub fn create_segment(dir: &Path, first: Index, segment_bytes: u64) -> io::Result<File> {
    let name = segment_file_name(first);
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(&name);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    file.write_all(&encode_header(first))?;
    preallocate(&file, segment_bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, &path)?;
    sync_dir(dir)?;
    Ok(file)
}

/// Reserve `bytes` for the file so appends do not change its size (and fdatasync need not
/// write size metadata). Falls back to extending the file where fallocate is unsupported.
fn preallocate(file: &File, bytes: u64) -> io::Result<()> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, bytes) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => file.set_len(bytes),
        Err(e) => Err(e.into()),
    }
}

/// Overwrite `[from, to)` with zeros, so stale frames past a cut can never be read again.
pub fn zero_range(file: &File, from: u64, to: u64) -> io::Result<()> {
    if from >= to {
        return Ok(());
    }
    let flags = rustix::fs::FallocateFlags::ZERO_RANGE | rustix::fs::FallocateFlags::KEEP_SIZE;
    if rustix::fs::fallocate(file, flags, from, to - from).is_ok() {
        return Ok(());
    }
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
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
        let h = encode_header(Index::new(77));
        assert_eq!(decode_header(&h), Ok(Index::new(77)));
        for i in 0..28 {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(decode_header(&bad).is_err(), "flip at {i}");
        }
    }
}
