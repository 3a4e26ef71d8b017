//! Offline verification of a log directory (`spindle inspect`). Reads only; changes nothing.

use std::path::{Path, PathBuf};

use serde::Serialize;
use spindle_core::Index;

use crate::error::OpenError;
use crate::fs::{Fs, StdFs};
use crate::recovery::scan_dir;
use crate::versions::VersionTable;

/// One segment as found on disk.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentReport {
    pub file: PathBuf,
    pub first_index: u64,
    /// Last committed index in the segment (first_index - 1 when empty).
    pub last_index: u64,
    pub records: u64,
    pub used_bytes: u64,
    pub file_bytes: u64,
}

/// The whole directory.
#[derive(Clone, Debug, Serialize)]
pub struct InspectReport {
    pub dir: PathBuf,
    pub segments: Vec<SegmentReport>,
    pub first_index: u64,
    pub last_index: u64,
    pub items: usize,
    pub checkpoint_as_of: Option<u64>,
    /// (segment first index, bytes) the last clean close recorded as synced, if any.
    pub synced_hint: Option<(u64, u64)>,
    /// A torn tail that opening the log would cut: file, offset, discarded records, reason.
    pub torn_tail: Option<TornTailReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TornTailReport {
    pub file: PathBuf,
    pub offset: u64,
    pub discarded_records: u64,
    pub reason: String,
}

/// Verify every segment and the version checkpoint in `dir`. Corruption is an error naming
/// the file and offset; a torn tail is reported, not an error.
pub fn inspect(dir: &Path) -> Result<InspectReport, OpenError> {
    inspect_in(&StdFs, dir)
}

/// `inspect` on the given file system.
pub fn inspect_in(fs: &dyn Fs, dir: &Path) -> Result<InspectReport, OpenError> {
    if !fs.is_dir(dir) {
        return Err(OpenError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
        });
    }
    let ckpt_path = dir.join(crate::versions::CHECKPOINT_FILE);
    let (mut table, as_of) =
        match VersionTable::read_checkpoint(fs, dir).map_err(|source| OpenError::Io {
            path: ckpt_path.clone(),
            source,
        })? {
            None => (VersionTable::new(), None),
            Some(Ok((t, a))) => (t, Some(a)),
            Some(Err(reason)) => {
                return Err(OpenError::Corrupt {
                    file: ckpt_path,
                    offset: 0,
                    reason,
                })
            }
        };
    crate::segment::check_names(fs, dir)?;
    let segments = crate::segment::list_segments_in(fs, dir).map_err(|source| OpenError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    if segments.is_empty() {
        return Err(OpenError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no log segments (*.seg) here: not a Spindle log",
            ),
        });
    }
    let hint_path = dir.join(crate::hint::HINT_FILE);
    let hint = crate::hint::read_hint(fs, dir)
        .map_err(|source| OpenError::Io {
            path: hint_path.clone(),
            source,
        })?
        .map_err(|(offset, reason)| OpenError::Corrupt {
            file: hint_path,
            offset,
            reason,
        })?;
    let floor = as_of.unwrap_or(Index::ZERO);
    let scan = scan_dir(fs, dir, u64::MAX, hint, |index, key, deleted| {
        if index > floor {
            table.set(key, index, deleted);
        }
    })?;
    let segments = scan
        .segments
        .iter()
        .map(|s| SegmentReport {
            file: s.path.clone(),
            first_index: s.first.get(),
            last_index: s.next_index.get() - 1,
            records: s.next_index.get() - s.first.get(),
            used_bytes: s.end_offset,
            file_bytes: s.file_bytes,
        })
        .collect();
    Ok(InspectReport {
        dir: dir.to_path_buf(),
        segments,
        first_index: scan.segments.first().map_or(0, |s| s.first.get()),
        last_index: scan.last_index().get(),
        items: table.len(),
        checkpoint_as_of: as_of.map(Index::get),
        synced_hint: hint.map(|h| (h.segment.get(), h.synced_bytes)),
        torn_tail: scan.torn_tail.map(|t| TornTailReport {
            file: t.file,
            offset: t.offset,
            discarded_records: t.discarded_records,
            reason: t.reason,
        }),
    })
}
