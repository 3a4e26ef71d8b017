//! Spindle's durable, append-only log (DESIGN.md §2).
//!
//! Fault model: the process may die at any instruction and the machine may lose power at any
//! byte; the disk honours fdatasync and may tear a write at any byte when it does not reach
//! it. An append is acknowledged only after its bytes are synced (invariant 1), readers see
//! only synced, committed records (invariant 2), and indexes are dense (invariant 3). See
//! docs/log-format.md.

#![forbid(unsafe_code)]

pub mod config;
pub mod error;
mod file_log;
pub mod frame;
/// The file-system seam, shared with the chunk store (`spindle-fs`).
pub use spindle_fs as fs;
pub mod hint;
pub mod inspect;
mod intake;
#[cfg(feature = "jetstream")]
pub mod jetstream;
mod reader;
pub mod recovery;
pub mod segment;
/// The simulated power-losing disk (`spindle_fs::sim`).
pub use spindle_fs::sim as sim_fs;
mod syncer;
pub mod tail;
pub mod versions;
mod writer;

use std::future::Future;
use std::sync::Arc;

pub use config::{LogConfig, SyncMode};
pub use error::{AppendError, FailedCondition, OpenError, ReadError, TruncateError};
pub use file_log::{
    FileLog, LogStats, OpenReport, SyncLatency, SyncPercentiles, SYNC_LATENCY_WINDOW,
};
pub use spindle_core::{Index, Record, Transaction};
pub use tail::Tail;

/// A durable, totally ordered log of records. Views read through this trait and do not know
/// which implementation (file, JetStream) is underneath.
pub trait Log: Send + Sync + 'static {
    /// Append a transaction atomically if its conditions hold; resolves with the commit index
    /// once durable.
    fn append(&self, txn: &Transaction) -> impl Future<Output = Result<Index, AppendError>> + Send;
    /// Durable records from `from`, ending on a transaction boundary.
    fn read(
        &self,
        from: Index,
        max_records: usize,
    ) -> impl Future<Output = Result<Vec<Record>, ReadError>> + Send;
    /// Resolve once the durable index reaches `index`.
    fn wait_for(&self, index: Index) -> impl Future<Output = Result<Index, ReadError>> + Send;
    /// Delete whole stored units below `below`; returns the first retained index.
    fn truncate_prefix(
        &self,
        below: Index,
    ) -> impl Future<Output = Result<Index, TruncateError>> + Send;
    fn durable_index(&self) -> Index;
    fn first_index(&self) -> Index;
}

impl Log for FileLog {
    fn append(&self, txn: &Transaction) -> impl Future<Output = Result<Index, AppendError>> + Send {
        FileLog::append(self, txn)
    }

    async fn read(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        FileLog::read(self, from, max_records)
    }

    fn wait_for(&self, index: Index) -> impl Future<Output = Result<Index, ReadError>> + Send {
        FileLog::wait_for(self, index)
    }

    fn truncate_prefix(
        &self,
        below: Index,
    ) -> impl Future<Output = Result<Index, TruncateError>> + Send {
        FileLog::truncate_prefix(self, below)
    }

    fn durable_index(&self) -> Index {
        FileLog::durable_index(self)
    }

    fn first_index(&self) -> Index {
        FileLog::first_index(self)
    }
}

/// A shared log is a log: the server hands one `Arc<FileLog>` to every view follower.
impl<L: Log> Log for Arc<L> {
    fn append(&self, txn: &Transaction) -> impl Future<Output = Result<Index, AppendError>> + Send {
        L::append(self, txn)
    }

    fn read(
        &self,
        from: Index,
        max_records: usize,
    ) -> impl Future<Output = Result<Vec<Record>, ReadError>> + Send {
        L::read(self, from, max_records)
    }

    fn wait_for(&self, index: Index) -> impl Future<Output = Result<Index, ReadError>> + Send {
        L::wait_for(self, index)
    }

    fn truncate_prefix(
        &self,
        below: Index,
    ) -> impl Future<Output = Result<Index, TruncateError>> + Send {
        L::truncate_prefix(self, below)
    }

    fn durable_index(&self) -> Index {
        L::durable_index(self)
    }

    fn first_index(&self) -> Index {
        L::first_index(self)
    }
}
