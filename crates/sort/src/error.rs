//! The sort's error enum: every variant carries the path or sizes a user needs to act.

use std::path::PathBuf;

/// Everything that can go wrong in a sort. A full disk is its own variant ([`SortError::NoSpace`])
/// so callers can tell the user how much space the sort needs.
#[derive(Debug, thiserror::Error)]
pub enum SortError {
    /// The memory budget cannot hold the sort's fixed buffers.
    #[error("memory budget of {memory_bytes} bytes is too small: the sort needs at least {min_bytes} bytes")]
    MemoryTooSmall { memory_bytes: u64, min_bytes: u64 },
    /// One entry is larger than the sort can hold next to its buffers.
    #[error("entry of {bytes} bytes (key, value and the sorter's framing) is larger than the limit of {limit_bytes} bytes (1/8 of the memory budget)")]
    EntryTooLarge { bytes: u64, limit_bytes: u64 },
    /// The private temporary directory could not be created.
    #[error("cannot create a temporary directory in {dir}: {source}")]
    TmpDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// The disk holding temporary files (or the output) is full. Temporary files are removed
    /// when the error reaches the caller.
    #[error(
        "no space left on device while writing {path}: the sort needs about {needed_bytes} bytes \
         free (its input's size, and for a sort larger than memory its largest bucket \
         besides: buckets are removed as they are read); its temporary files were removed"
    )]
    NoSpace { path: PathBuf, needed_bytes: u64 },
    /// The disk filled while `gen-records` wrote its file; the partial file was removed.
    #[error(
        "no space left on device while writing {path}: the records need {needed_bytes} bytes \
         free; the partial file was removed"
    )]
    NoSpaceForRecords { path: PathBuf, needed_bytes: u64 },
    /// The output is complete under its name (its bytes synced), but syncing its directory
    /// failed, so the name may not survive a power cut. The file is kept: removing it would
    /// need the same directory sync.
    #[error(
        "{path} is complete, but syncing its directory {dir} failed: {source}; its name may \
         not survive a power cut (run `sync` before relying on it)"
    )]
    OutputNotDurable {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },
    /// A write failed for another reason.
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A read failed.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The input file cannot be opened or its size read.
    #[error("cannot open input {path}: {source}")]
    Input {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The input is not a whole number of records.
    #[error("input {path} is {bytes} bytes, not a multiple of the {record_bytes}-byte record")]
    BadLength {
        path: PathBuf,
        bytes: u64,
        record_bytes: u64,
    },
    /// The input ended before the length it had when the sort started.
    #[error(
        "input {path} changed during the sort: expected {expected_bytes} bytes, read {read_bytes}"
    )]
    InputChanged {
        path: PathBuf,
        expected_bytes: u64,
        read_bytes: u64,
    },
    /// The input's length, modification time or identity changed while it was read: the
    /// output would be a sort of no one state of it, so none is written.
    #[error(
        "input {path} was modified during the sort (its {what} changed): nothing was written; \
         sort it again once nothing writes to it"
    )]
    InputModified { path: PathBuf, what: &'static str },
    /// The input is not a regular file (a directory, a pipe, a device): its length is not
    /// known up front, and the sort needs it to plan.
    #[error("input {path} is not a regular file: the sort reads a file of whole records")]
    InputNotFile { path: PathBuf },
    /// The output cannot be written where it was asked for.
    #[error("cannot write the output {path}: {why}")]
    BadOutput { path: PathBuf, why: String },
    /// Splitting an oversized bucket made no progress (its keys defeat the sampler).
    #[error(
        "bucket of {bytes} bytes could not be split below the memory budget after {depth} splits"
    )]
    SplitStalled { bytes: u64, depth: u32 },
    /// A stage stopped because another one failed; replaced by that stage's error before
    /// it reaches the caller.
    #[error("sort stopped because another stage failed")]
    Stopped,
    /// A temporary file did not read back as written (checksum or framing).
    #[error("temporary file {path} is corrupt at offset {offset}")]
    Corrupt { path: PathBuf, offset: u64 },
}

impl SortError {
    /// Maps a write error, telling a full disk apart. `needed_bytes` is the space the whole
    /// sort needs, for the message.
    pub(crate) fn write(
        path: impl Into<PathBuf>,
        needed_bytes: u64,
        source: std::io::Error,
    ) -> Self {
        let path = path.into();
        if is_no_space(&source) {
            SortError::NoSpace { path, needed_bytes }
        } else {
            SortError::Write { path, source }
        }
    }

    /// Maps an error creating the private temporary directory in `dir`: a full disk says
    /// how much space the sort needs, as a full disk met later does.
    pub(crate) fn tmp_dir(
        dir: &std::path::Path,
        needed_bytes: u64,
        source: std::io::Error,
    ) -> Self {
        if is_no_space(&source) {
            SortError::NoSpace {
                path: dir.to_path_buf(),
                needed_bytes,
            }
        } else {
            SortError::TmpDir {
                dir: dir.to_path_buf(),
                source,
            }
        }
    }

    /// Maps a read error.
    pub(crate) fn read(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SortError::Read {
            path: path.into(),
            source,
        }
    }

    /// Whether this error is a full disk.
    pub fn is_no_space(&self) -> bool {
        matches!(
            self,
            SortError::NoSpace { .. } | SortError::NoSpaceForRecords { .. }
        )
    }
}

/// Whether an I/O error means the device is full (ENOSPC, or EDQUOT for a quota).
pub(crate) fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || e.raw_os_error() == Some(libc::ENOSPC)
}
