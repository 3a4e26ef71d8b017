//! Positioned reads of durable records.
//!
//! A read finds the segment holding `from`, starts at the nearest sparse-index entry at or
//! before it, and parses frames from chunks read with `pread`. It never reads past the
//! durable index, so it never races the writer's unsynced bytes, and it always ends on a
//! commit record so a caller never holds part of a transaction.

use std::sync::Arc;

use spindle_core::record::decode_payload;
use spindle_core::{Index, Record, RECORD_BYTES_MAX};

use crate::error::ReadError;
use crate::file_log::{SegmentHandle, Shared};
use crate::frame::{decode_frame, FrameFault, FRAME_HEADER_BYTES};
use crate::segment::SEGMENT_HEADER_BYTES;

pub(crate) fn read_range(
    shared: &Shared,
    from: Index,
    max_records: usize,
) -> Result<Vec<Record>, ReadError> {
    let from = from.max(Index::FIRST);
    let durable = shared.durable_index();
    let mut out = Vec::new();
    let mut next = from;
    // One read buffer for the whole call, however many segments it crosses.
    let mut buf = vec![0u8; shared.config.read_chunk_bytes];
    while next <= durable {
        let (segment, seg_end) = {
            let segs = shared.segments.read();
            let first = segs[0].first;
            if next < first {
                return Err(ReadError::Truncated { first });
            }
            let pos = segs.partition_point(|s| s.first <= next) - 1;
            let seg_end = segs.get(pos + 1).map_or(durable.next(), |s| s.first);
            (segs[pos].clone(), seg_end.min(durable.next()))
        };
        let done = read_segment(
            &segment,
            &mut next,
            seg_end,
            max_records,
            &mut buf,
            &mut out,
        )?;
        if done {
            break;
        }
    }
    Ok(out)
}

/// Read records `[*next, end)` from one segment into `out`. Returns true once `max_records`
/// is reached at a commit boundary.
fn read_segment(
    seg: &Arc<SegmentHandle>,
    next: &mut Index,
    end: Index,
    max_records: usize,
    buf: &mut Vec<u8>,
    out: &mut Vec<Record>,
) -> Result<bool, ReadError> {
    let (mut index, mut offset) = {
        let sparse = seg.sparse.lock();
        let pos = sparse.partition_point(|&(i, _)| i <= *next);
        if pos == 0 {
            (seg.first, SEGMENT_HEADER_BYTES)
        } else {
            sparse[pos - 1]
        }
    };
    let corrupt = |offset: u64, reason: String| ReadError::Corrupt {
        file: seg.path.clone(),
        offset,
        reason,
    };
    while index < end {
        let filled = read_at(seg, buf, offset)?;
        let mut pos = 0usize;
        let mut progressed = false;
        while index < end {
            match decode_frame(&buf[pos..filled], index, RECORD_BYTES_MAX) {
                Ok(frame) => {
                    let len = frame.total_len();
                    if index >= *next {
                        let rec = decode_payload(index, frame.payload).map_err(|e| {
                            corrupt(
                                offset + pos as u64,
                                format!("record does not decode: {e:?}"),
                            )
                        })?;
                        let commit = rec.commit;
                        out.push(rec);
                        *next = index.next();
                        if commit && out.len() >= max_records {
                            return Ok(true);
                        }
                    }
                    index = index.next();
                    pos += len;
                    progressed = true;
                }
                Err(FrameFault::Short) => break,
                Err(fault) => return Err(corrupt(offset + pos as u64, fault.to_string())),
            }
        }
        if !progressed {
            // One frame larger than the chunk: grow the buffer to hold it.
            let need = frame_len(&buf[..filled]).ok_or_else(|| {
                corrupt(
                    offset,
                    "frame header cut short, or its length past the record limit, below the \
                     durable index"
                        .into(),
                )
            })?;
            if need <= buf.len() {
                return Err(corrupt(
                    offset,
                    "frame cut short below the durable index".into(),
                ));
            }
            buf.resize(need, 0);
            continue;
        }
        offset += pos as u64;
    }
    Ok(false)
}

/// The whole length of the frame starting `buf`, if its length field is readable and within
/// the record limit: the read buffer grows to this, so a damaged length must not size it.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(buf.get(4..8)?.try_into().ok()?) as usize;
    (len <= RECORD_BYTES_MAX).then_some(FRAME_HEADER_BYTES + len)
}

fn read_at(seg: &SegmentHandle, buf: &mut [u8], offset: u64) -> Result<usize, ReadError> {
    seg.file.read_at(buf, offset).map_err(|e| ReadError::Io {
        file: seg.path.clone(),
        source: Arc::new(e),
    })
}
