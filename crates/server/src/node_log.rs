//! The log a node runs on: the file log in its data directory, or (feature `jetstream`) a
//! stream on a NATS JetStream cluster. Views, truncation and the API see one `Log`; only
//! the file log has fsync counters and an intake queue to report.

use std::sync::Arc;

use spindle_core::{Index, Record, Transaction};
use spindle_log::{AppendError, FileLog, Log, LogStats, ReadError, TruncateError};

/// The node's log. Cheap to clone.
#[derive(Clone, Debug)]
pub enum NodeLog {
    File(Arc<FileLog>),
    #[cfg(feature = "jetstream")]
    JetStream(Arc<spindle_log::jetstream::JetStreamLog>),
}

impl NodeLog {
    /// `"file"` or `"jetstream"`, for status.
    pub fn kind(&self) -> &'static str {
        match self {
            NodeLog::File(_) => "file",
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(_) => "jetstream",
        }
    }

    /// The file log, when the node runs on one.
    pub fn file(&self) -> Option<&Arc<FileLog>> {
        match self {
            NodeLog::File(f) => Some(f),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(_) => None,
        }
    }

    /// The log's counters: group commits and records (on JetStream, this process's
    /// appender's), and the file log's fsyncs and their latency (none on JetStream, whose
    /// servers sync).
    pub fn stats(&self) -> Option<&LogStats> {
        match self {
            NodeLog::File(f) => Some(f.stats()),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Some(j.stats()),
        }
    }

    /// On JetStream, the records this process's reads took from the feed and from the
    /// stream itself (`None` on the file log).
    pub fn read_sources(&self) -> Option<(u64, u64)> {
        match self {
            NodeLog::File(_) => None,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Some(j.read_sources()),
        }
    }

    /// Whether this process appends: always on the file log; on JetStream while it holds
    /// the appender lease.
    pub fn appends(&self) -> bool {
        match self {
            NodeLog::File(_) => true,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.is_appender(),
        }
    }

    /// The log's first retained index as it is now (on JetStream asked of the servers:
    /// a reader's cached one can lag a purge made by the appender).
    pub fn refresh_first_index(&self) -> Result<Index, String> {
        match self {
            NodeLog::File(f) => Ok(Log::first_index(&**f)),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.refresh_first_index(),
        }
    }

    /// Why a JetStream standby that took the lease could not start appending.
    pub fn standby_error(&self) -> Option<String> {
        match self {
            NodeLog::File(_) => None,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.promotion_error(),
        }
    }

    /// Why a JetStream api server last stopped being the appender, if it did.
    pub fn stepped_down(&self) -> Option<String> {
        match self {
            NodeLog::File(_) => None,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.stepped_down(),
        }
    }

    /// Encoded transactions waiting for the file log's writer (0 on JetStream, whose
    /// appender bounds its intake by transactions).
    pub fn intake_queued_bytes(&self) -> usize {
        self.file().map_or(0, |f| f.intake_queued_bytes())
    }

    pub async fn append(&self, txn: &Transaction) -> Result<Index, AppendError> {
        match self {
            NodeLog::File(f) => f.append(txn).await,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::append(&**j, txn).await,
        }
    }

    /// Many independent transactions in one submission, each with its own outcome.
    pub async fn append_many(&self, txns: &[Transaction]) -> Vec<Result<Index, AppendError>> {
        match self {
            NodeLog::File(f) => f.append_many(txns).await,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.append_many(txns).await,
        }
    }

    /// `append` for callers without an async runtime.
    pub fn append_blocking(&self, txn: &Transaction) -> Result<Index, AppendError> {
        match self {
            NodeLog::File(f) => f.append_blocking(txn),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.append_blocking(txn),
        }
    }

    /// Durable records from `from`, ending on a commit, for callers on a plain thread
    /// (followers, `spawn_blocking`), never on an async worker.
    pub fn read(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        match self {
            NodeLog::File(f) => FileLog::read(f, from, max_records),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => j.read_blocking(from, max_records),
        }
    }

    /// Finish queued appends and stop taking more.
    pub fn close(&self) {
        match self {
            NodeLog::File(f) => f.close(),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => {
                // The close is async (it finishes the appender and releases the lease); run
                // it on a thread of its own so a caller on an async worker can wait for it.
                let j = j.clone();
                let closed = std::thread::spawn(move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map(|rt| rt.block_on(j.close()))
                });
                if !matches!(closed.join(), Ok(Ok(()))) {
                    tracing::warn!("closing the JetStream log failed; its lease expires by itself");
                }
            }
        }
    }
}

impl Log for NodeLog {
    async fn append(&self, txn: &Transaction) -> Result<Index, AppendError> {
        NodeLog::append(self, txn).await
    }

    async fn read(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        match self {
            NodeLog::File(f) => FileLog::read(f, from, max_records),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::read(&**j, from, max_records).await,
        }
    }

    async fn wait_for(&self, index: Index) -> Result<Index, ReadError> {
        match self {
            NodeLog::File(f) => f.wait_for(index).await,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::wait_for(&**j, index).await,
        }
    }

    async fn truncate_prefix(&self, below: Index) -> Result<Index, TruncateError> {
        match self {
            NodeLog::File(f) => f.truncate_prefix(below).await,
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::truncate_prefix(&**j, below).await,
        }
    }

    fn durable_index(&self) -> Index {
        match self {
            NodeLog::File(f) => f.durable_index(),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::durable_index(&**j),
        }
    }

    fn first_index(&self) -> Index {
        match self {
            NodeLog::File(f) => f.first_index(),
            #[cfg(feature = "jetstream")]
            NodeLog::JetStream(j) => Log::first_index(&**j),
        }
    }
}

impl NodeLog {
    /// The highest durable index (a commit).
    pub fn durable_index(&self) -> Index {
        Log::durable_index(self)
    }

    /// The first retained index.
    pub fn first_index(&self) -> Index {
        Log::first_index(self)
    }

    /// Resolve once the durable index reaches `index`.
    pub async fn wait_for(&self, index: Index) -> Result<Index, ReadError> {
        Log::wait_for(self, index).await
    }
}
