//! The view crate's errors: one enum for Disk View operations, one for iteration requests,
//! one for view selection. Each variant carries what a user needs to act on it.

use std::path::PathBuf;

use spindle_core::{Index, InputError, ItemKey, Partition};
use spindle_log::ReadError;
use thiserror::Error;

/// Why a Disk View operation failed.
#[derive(Debug, Error)]
pub enum ViewError {
    #[error("RocksDB error in disk view {}: {source}", dir.display())]
    Db {
        dir: PathBuf,
        source: rocksdb::Error,
    },
    /// The view's stored bytes are not in the documented layout.
    #[error("corrupt disk view {}: {what}", dir.display())]
    Corrupt { dir: PathBuf, what: String },
    /// The directory holds a view of another partition.
    #[error(
        "disk view {} holds partition [{}, {}), not the requested [{}, {})",
        dir.display(), stored.lo(), stored.hi(), requested.lo(), requested.hi()
    )]
    WrongPartition {
        dir: PathBuf,
        stored: Partition,
        requested: Partition,
    },
    /// The view was being booted from iteration when its process stopped.
    #[error(
        "disk view {} was booting (to cut {cut}) and did not finish; run the boot again",
        dir.display()
    )]
    BootIncomplete { dir: PathBuf, cut: Index },
    /// A boot was asked to fill a view that already holds applied state.
    #[error(
        "disk view {} has applied the log up to {applied}; a boot needs a new or unfinished view",
        dir.display()
    )]
    NotEmpty { dir: PathBuf, applied: Index },
    /// A read asked for an item this view does not hold.
    #[error("{key} (hash {hash:#010x}) is outside this view's partition [{}, {})", partition.lo(), partition.hi())]
    NotInPartition {
        key: ItemKey,
        hash: u32,
        partition: Partition,
    },
    /// A read asked for a state the view has not reached within its timeout.
    #[error(
        "view has applied the log up to {applied}, not {wanted}, after waiting {waited_ms} ms; \
         retry later or with a longer timeout"
    )]
    NotYetApplied {
        wanted: Index,
        applied: Index,
        waited_ms: u64,
    },
    /// Records handed to `apply` do not continue the applied prefix.
    #[error("records start at {got} but the view has applied up to {applied}; expected {}", applied.next())]
    Gap { applied: Index, got: Index },
    /// Records handed to `apply` end inside a transaction.
    #[error("records end at {last} without a commit record (part of a transaction)")]
    PartialTransaction { last: Index },
    /// The log no longer holds what this view needs next: it must be rebooted from
    /// iteration.
    #[error(
        "the log was truncated below {first} but this view needs {next}; boot it again from other views"
    )]
    LogTruncated { next: Index, first: Index },
    #[error("reading the log: {0}")]
    Log(ReadError),
    #[error("bad input: {0}")]
    Input(#[from] InputError),
}

impl ViewError {
    /// The device under the view is full. RocksDB then refuses every write until it has
    /// seen enough free space again (it polls every few seconds and needs about one write
    /// buffer free, 64 MiB by default) and resumes on its own: a writer may retry the same
    /// records later instead of giving up.
    pub fn is_disk_full(&self) -> bool {
        match self {
            ViewError::Db { source, .. } => {
                source.kind() == rocksdb::ErrorKind::IOError
                    && source.as_ref().contains("No space left on device")
            }
            _ => false,
        }
    }
}

/// Why an iteration request was refused (before any data flowed) or stopped.
#[derive(Debug, Error)]
pub enum IterError {
    #[error("range [{lo}, {hi}) is empty or outside the hash space [0, 2^32)")]
    EmptyRange { lo: u64, hi: u64 },
    #[error(
        "range [{lo}, {hi}) does not overlap this view's partition [{}, {})",
        view.lo(), view.hi()
    )]
    RangeOutsideView { lo: u64, hi: u64, view: Partition },
    #[error("no kinds requested: ask for nodes, edges or both")]
    NoKinds,
    #[error("index range is empty: from {from} is above to {to}")]
    FromAboveTo { from: Index, to: Index },
    #[error(
        "cut {cut} is above this view's applied index {applied}; ask for a lower `to` or wait"
    )]
    CutAboveApplied { cut: Index, applied: Index },
    #[error(
        "projection {projection:?} is not a JSON Pointer to one property (like \"/name\"): {reason}"
    )]
    BadProjection { projection: String, reason: String },
    #[error("projection and keys-only exclude each other: a keys-only frame carries no value")]
    ProjectionWithKeysOnly,
    /// A plan names a view this process cannot reach.
    #[error("the plan names view {view:?}, which is not available here")]
    UnknownSource { view: String },
    /// A carousel configuration that cannot work.
    #[error("carousel configuration refused: {reason}")]
    CarouselConfig { reason: String },
    /// The carousel's shared scan stopped with an error; every rider aboard gets it.
    #[error(
        "the carousel's shared scan of this view failed: {reason}; board again, or ask for a \
         dedicated iterator"
    )]
    CarouselFailed { reason: String },
    /// Boarding would make the carousel encode for more filter groups than it may.
    #[error(
        "the carousel already encodes for {groups} distinct filter groups (kinds, keys-only, \
         from, projection), its limit; board with the filter of a rider aboard, try again \
         later, or ask for a dedicated iterator"
    )]
    CarouselGroupsFull { groups: usize },
    /// A Disk View of another process could not be iterated (unreachable, refused, or the
    /// stream broke off); `retry` says whether another replica may be tried.
    #[error("remote Disk View {view}: {detail}")]
    Remote {
        view: String,
        detail: String,
        retry: bool,
    },
    #[error(transparent)]
    View(#[from] ViewError),
}

/// Why view selection found no plan.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SelectError {
    /// No usable view covers part of the request.
    #[error(
        "no usable view covers hash range [{}, {}){}", missing.lo(), missing.hi(),
        describe_skipped(.skipped)
    )]
    Uncovered {
        missing: Partition,
        /// Views that cover some of the missing range but were not usable, and why.
        skipped: Vec<(String, SkipReason)>,
    },
}

/// Why selection passed over a view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// Applied index below the bound the request allows.
    Lagging { applied: Index, needed: Index },
    /// Serves queries, not iteration (or the other way round).
    WrongRole,
}

fn describe_skipped(skipped: &[(String, SkipReason)]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = skipped
        .iter()
        .map(|(id, why)| match why {
            SkipReason::Lagging { applied, needed } => {
                format!("{id} lags (applied {applied}, needs {needed})")
            }
            SkipReason::WrongRole => format!("{id} has the wrong role"),
        })
        .collect();
    format!("; skipped: {}", parts.join(", "))
}
