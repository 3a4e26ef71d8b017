//! The log's errors, one enum per operation, each variant carrying what a user needs to act.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use spindle_core::{Index, InputError, ItemKey};
use thiserror::Error;

/// A condition that did not hold when the writer checked it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedCondition {
    pub key: ItemKey,
    pub expected: Index,
    pub actual: Index,
}

/// Why an append was not acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AppendError {
    /// The transaction is malformed; nothing was written.
    #[error("bad transaction: {0}")]
    Input(#[from] InputError),
    /// One or more conditions failed; nothing was written.
    #[error("conflict: {}", describe_conflicts(.failed))]
    Conflict { failed: Vec<FailedCondition> },
    /// A write or sync failed, now or earlier. The log refuses writes until it is reopened
    /// (a JetStream standby's answers this for the failed batch only, and `NotWritten` for
    /// appends it refuses until it is the appender again); the outcome of appends in the
    /// failed batch is unknown (they may or may not be on disk after reopen, exactly like a
    /// client whose connection dropped).
    #[error("log failed ({cause}); it refuses writes until reopened (a JetStream api server: until it is the appender again)")]
    Failed { cause: String },
    /// The append needed a new segment the log could not create (`disk_full`: the disk or
    /// a quota ran out of space). Nothing of it was written, and the log goes on: appends
    /// that fit the current segment, and any once space is freed, are taken.
    #[error("not written: {cause}")]
    NotWritten { cause: String, disk_full: bool },
    /// The log was closed before the append was written.
    #[error("log is closed")]
    Closed,
}

fn describe_conflicts(failed: &[FailedCondition]) -> String {
    failed
        .iter()
        .map(|f| format!("{} expected version {}, is {}", f.key, f.expected, f.actual))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why a read failed.
#[derive(Clone, Debug, Error)]
pub enum ReadError {
    /// The requested position was deleted by prefix truncation.
    #[error("index was truncated; the first retained index is {first}")]
    Truncated { first: Index },
    /// The bytes on disk are damaged.
    #[error("corrupt log file {}: offset {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("I/O error reading {}: {source}", file.display())]
    Io {
        file: PathBuf,
        source: Arc<io::Error>,
    },
    #[error("log is closed")]
    Closed,
}

/// Why a log could not be opened.
#[derive(Debug, Error)]
pub enum OpenError {
    #[error("I/O error on {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// Damage outside the torn tail: never repaired silently.
    #[error("corrupt log file {}: offset {offset}: {reason}", file.display())]
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("log directory {} is in use by another process", dir.display())]
    Locked { dir: PathBuf },
    #[error("bad log configuration: {0}")]
    Config(String),
}

/// Why prefix truncation failed.
#[derive(Debug, Clone, Error)]
pub enum TruncateError {
    #[error("log failed ({cause}); reopen it")]
    Failed { cause: String },
    #[error("log is closed")]
    Closed,
}

pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> OpenError {
    let path = path.into();
    move |source| OpenError::Io { path, source }
}
