//! The crate's one error type. Every variant says what failed and where, so a user can act.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in the chunk store.
#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// An I/O call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What the store was doing ("read", "sync", "create", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// Bytes on disk do not match their checksums or their id. Nothing wrong is returned.
    #[error(
        "corrupt chunk volume {volume} at offset {offset}: {reason} \
         (run `spindle inspect` on the store directory; restore the volume from a replica)"
    )]
    Corrupt {
        /// The volume (or hint) file.
        volume: PathBuf,
        /// Byte offset of the bad record in that file.
        offset: u64,
        /// What did not match.
        reason: String,
    },

    /// A put would take the store past its space limit. Nothing was written.
    #[error(
        "chunk store is full: the put needs {needed_bytes} bytes, {used_bytes} of \
         {space_bytes_max} are used (delete and compact, or raise space_bytes_max)"
    )]
    SpaceExhausted {
        /// Bytes the put may add: its record, its hint entry, and a new volume's header and
        /// empty hint should it be the one to start its lane's next volume.
        needed_bytes: u64,
        /// Bytes in use, including puts still in the write buffer.
        used_bytes: u64,
        /// The configured limit.
        space_bytes_max: u64,
    },

    /// A chunk is larger than the store accepts.
    #[error("chunk of {len_bytes} bytes is larger than chunk_bytes_max ({chunk_bytes_max} bytes)")]
    ChunkTooLarge {
        /// Size of the rejected chunk.
        len_bytes: u64,
        /// The configured limit.
        chunk_bytes_max: u64,
    },

    /// An earlier write or sync failed; the store refuses writes until it is reopened. Gets
    /// of durable chunks keep working.
    #[error(
        "chunk store writer stopped after a failure ({reason}); {}",
        if *.disk_full { "free disk space, then reopen the store" } else { "reopen the store" }
    )]
    WriterFailed {
        /// The first failure.
        reason: String,
        /// The failure was the disk running out of space (ENOSPC or a quota), so freeing
        /// space and reopening is the remedy.
        disk_full: bool,
    },

    /// The store is closed.
    #[error("chunk store is closed")]
    Closed,

    /// Another process (or another handle in this one) has the store open.
    #[error("chunk store {path} is locked by another open handle")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },

    /// Options that cannot work together.
    #[error("bad chunk store options: {reason}")]
    BadOptions {
        /// Which bound is wrong and why.
        reason: String,
    },

    /// A file that is not a chunk store file, or of a format version this build cannot read.
    #[error("{path} is not a chunk store file this build can read: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was expected.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = ChunkError> = std::result::Result<T, E>;

impl ChunkError {
    /// Whether this is the file system refusing a write for lack of space (or quota).
    pub fn is_disk_full(&self) -> bool {
        match self {
            Self::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
            ),
            Self::WriterFailed { disk_full, .. } => *disk_full,
            _ => false,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
