//! Scanning a log directory: the recovery rule, shared by `FileLog::open` and `inspect`.
//!
//! Every retained segment is read and every frame checked. The last segment may end in a torn
//! tail (unsynced batches cut by a crash): the scan ends at the last commit record before the
//! first bad frame, and the caller cuts there. A bad frame in any other segment, a segment
//! that does not end on a commit, or a gap between segments is corruption, reported with the
//! file and byte offset and never repaired.
//!
//! A torn tail can only be the unsynced end. The writer never has more than the segment's
//! unsynced window (recorded in its header) written but not synced, and everything past the
//! written end is zeros. So if an intact frame of a later index sits at least one window past
//! the first bad frame, the bad frame was synced: that is damage, reported with the file and
//! offset, and nothing is cut. Intact frames closer than that may be unsynced writes that
//! reached the disk ahead of earlier ones, and are cut with the tail. When the window is
//! unknown (0), any intact later frame means damage. A bad frame below the synced length of
//! the hint a clean close leaves (`hint`) is damage too, and so is a segment whose records
//! end cleanly below it, or a hint naming a segment that is gone.

use std::path::{Path, PathBuf};

use spindle_core::record::payload_key;
use spindle_core::{Index, RECORD_BYTES_MAX};

use crate::error::{io_at, OpenError};
use crate::fs::Fs;
use crate::hint::SyncedHint;
use crate::segment::{
    decode_header, find_frame_after, header_unsynced_window, list_segments_in, scan_frames,
    SEGMENT_HEADER_BYTES,
};

/// What the scan learned about one segment.
#[derive(Clone, Debug)]
pub struct SegmentScan {
    pub first: Index,
    pub path: PathBuf,
    /// The index after the last committed record kept.
    pub next_index: Index,
    /// Byte offset after the last committed record kept.
    pub end_offset: u64,
    pub file_bytes: u64,
    /// The unsynced window its header declares (0: unknown).
    pub unsynced_window: u64,
    /// (index, offset) of every `stride`-th record, for positioned reads.
    pub sparse: Vec<(Index, u64)>,
}

/// A torn tail found in the last segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub file: PathBuf,
    /// Where the kept data ends and the cut begins.
    pub offset: u64,
    /// Intact records after the cut that were discarded: they belong to a transaction
    /// whose commit record never reached the disk.
    pub discarded_records: u64,
    pub reason: String,
}

/// The whole directory.
#[derive(Clone, Debug, Default)]
pub struct DirScan {
    pub segments: Vec<SegmentScan>,
    pub torn_tail: Option<TornTail>,
}

impl DirScan {
    /// The last committed index (0 for an empty log).
    pub fn last_index(&self) -> Index {
        self.segments
            .last()
            .map_or(Index::ZERO, |s| s.next_index.prev())
    }
}

/// Scan every segment in `dir`. `visit` sees each committed write as (index, encoded key,
/// is a delete) in log order, transactions whole.
pub fn scan_dir(
    fs: &dyn Fs,
    dir: &Path,
    stride: u64,
    hint: Option<SyncedHint>,
    mut visit: impl FnMut(Index, &[u8], bool),
) -> Result<DirScan, OpenError> {
    let listed = list_segments_in(fs, dir).map_err(io_at(dir))?;
    let mut out = DirScan::default();
    let count = listed.len();
    let mut pending: Vec<(Index, Vec<u8>, bool)> = Vec::new();
    for (i, (first, path)) in listed.into_iter().enumerate() {
        let is_last = i + 1 == count;
        let buf = fs.read(&path).map_err(io_at(&path))?;
        let corrupt = |offset: u64, reason: String| OpenError::Corrupt {
            file: path.clone(),
            offset,
            reason,
        };
        let declared = decode_header(&buf).map_err(|r| corrupt(0, r))?;
        if declared != first {
            return Err(corrupt(
                0,
                format!("header says first index {declared}, name says {first}"),
            ));
        }
        if let Some(prev) = out.segments.last() {
            if prev.next_index != first {
                return Err(corrupt(
                    0,
                    format!(
                        "gap: previous segment ends before {}, this starts at {first}",
                        prev.next_index
                    ),
                ));
            }
        }
        let mut sparse = Vec::new();
        pending.clear();
        let end = scan_frames(&buf, first, RECORD_BYTES_MAX, |index, payload, offset| {
            if (index.get() - first.get()) % stride == 0 {
                sparse.push((index, offset));
            }
            let key = payload_key(payload).ok_or("record payload does not decode")?;
            let deleted = payload[0] & spindle_core::RecordFlags::TOMBSTONE != 0;
            pending.push((index, key.to_vec(), deleted));
            if payload[0] & spindle_core::RecordFlags::COMMIT != 0 {
                for (index, key, deleted) in pending.drain(..) {
                    visit(index, &key, deleted);
                }
            }
            Ok(())
        })
        .map_err(|(offset, reason)| corrupt(offset, reason))?;

        let clean = end.fault.is_none() && end.commit_next_index == end.next_index;
        let synced = hint
            .filter(|h| h.segment == first)
            .map_or(0, |h| h.synced_bytes);
        if clean && end.commit_end_offset < synced {
            // Zeros (or nothing) where a clean close had synced frames: not a torn tail, and
            // appending there would give the lost indexes to new records.
            return Err(corrupt(
                end.commit_end_offset,
                format!(
                    "the segment's records end at offset {}, below the {synced} bytes the \
                     last clean close synced, so synced data is missing; nothing was cut",
                    end.commit_end_offset
                ),
            ));
        }
        if !clean {
            let reason = match end.fault {
                Some((at, fault)) => format!("{fault} at offset {at}"),
                None => "last transaction has no commit record".to_owned(),
            };
            if !is_last {
                let at = end.fault.map_or(end.commit_end_offset, |(at, _)| at);
                return Err(corrupt(at, format!("sealed segment damaged: {reason}")));
            }
            let at = end.fault.map_or(end.commit_end_offset, |(at, _)| at);
            if at < synced {
                return Err(corrupt(
                    at,
                    format!(
                        "{reason}, below the {synced} bytes the last clean close synced, so \
                         synced data is damaged (not a torn tail); nothing was cut"
                    ),
                ));
            }
            if let Some((at, _)) = end.fault {
                let window = header_unsynced_window(&buf);
                if let Some(damage) = damage_before_intact_frame(&buf, at, end.next_index, window) {
                    return Err(corrupt(at, format!("{reason}; {damage}")));
                }
            }
            out.torn_tail = Some(TornTail {
                file: path.clone(),
                offset: end.commit_end_offset,
                discarded_records: end.next_index.get() - end.commit_next_index.get(),
                reason,
            });
        }
        sparse.retain(|&(index, _)| index < end.commit_next_index);
        out.segments.push(SegmentScan {
            first,
            path,
            next_index: end.commit_next_index,
            end_offset: end.commit_end_offset.max(SEGMENT_HEADER_BYTES),
            file_bytes: buf.len() as u64,
            unsynced_window: header_unsynced_window(&buf),
            sparse,
        });
    }
    // The hint's segment was the last one at a clean close; only a prefix truncation
    // removes segments, and it never removes the last. So a hint naming a segment past the
    // last one listed means that segment, synced, is gone.
    if let Some(h) = hint {
        let last = out.segments.last().map(|s| s.first);
        if last.is_none_or(|last| h.segment > last) {
            return Err(OpenError::Corrupt {
                file: dir.join(crate::segment::segment_file_name(h.segment)),
                offset: 0,
                reason: format!(
                    "missing: the last clean close synced {} bytes of this segment (synced.hint), \
                     and no segment from it on is left; nothing was changed",
                    h.synced_bytes
                ),
            });
        }
    }
    Ok(out)
}

/// After the first bad frame at `at` (where index `expected` belonged) in the last segment:
/// why it must be damage rather than a torn tail, if an intact later frame proves it synced.
fn damage_before_intact_frame(buf: &[u8], at: u64, expected: Index, window: u64) -> Option<String> {
    let beyond = if window == 0 { at + 1 } else { at + window };
    let (found_at, found) = find_frame_after(buf, beyond, expected, RECORD_BYTES_MAX)?;
    let why = if window == 0 {
        "and the segment does not record how much of it could be unsynced".to_owned()
    } else {
        format!("{window} bytes or more past it, beyond what can be unsynced")
    };
    Some(format!(
        "an intact frame with index {found} follows at offset {found_at}, {why}, so synced \
         data is damaged (not a torn tail); nothing was cut"
    ))
}
