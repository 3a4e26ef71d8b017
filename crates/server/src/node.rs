//! The embedded node: the file log, the Disk View partitions, the Memory View, the
//! configured Index Views, the chunk store, and the workers that keep them going (the log
//! tailer and its ring fan-out, one follower per view, the boots, the truncation worker).
//!
//! Start-up order keeps invariant 5: Disk Views resume from their own applied index; the
//! Memory and Index Views are rebuilt on every start by booting from the Disk Views to a
//! cut (with a retention hold so truncation keeps the log above it) and then following.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use spindle_chunk::ChunkStore;
use spindle_core::{Index, ItemKey, Partition};
use spindle_log::{FileLog, LogConfig, SyncMode};

use crate::node_log::NodeLog;
use spindle_ring::Ring;
use spindle_view::carousel::Carousel;
use spindle_view::disk::DiskOptions;
use spindle_view::truncate::{self, Holds, Replica, Truncation};
use spindle_view::{
    select, BootProgress, CatalogEntry, DiskView, IndexView, MemoryView, Role, SelectRequest,
};
use tokio::sync::watch;

use crate::config::{IndexConfig, ServerConfig};
use crate::fanout::{self, Slot, TailerHealth};

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot create data directory {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("opening the log: {0}. The log was left as found: run `spindle inspect <data_dir>/log` to see what is wrong; if it reports corruption, restore the log from a replica or a backup (Spindle never cuts or repairs acknowledged data by itself)")]
    Log(#[from] spindle_log::OpenError),
    #[error("opening the JetStream log: {0}")]
    JetStreamLog(String),
    #[error("opening Disk View {}: {source}", dir.display())]
    View {
        dir: PathBuf,
        source: spindle_view::ViewError,
    },
    #[error(
        "{} holds Disk Views of {found} partitions but disk_partitions is {configured}; \
         re-partitioning an existing data directory is not supported by `serve`",
        dir.display()
    )]
    Partitions {
        dir: PathBuf,
        found: u64,
        configured: u64,
    },
    #[error(
        "Disk View {} has applied the log through index {applied}, but the log ends at \
         {log_last}: the log lost its tail or is not the log this view was built from. \
         Serving would give new writes the indexes {}..={applied} again and the view would \
         silently diverge, so the node refuses to start. Restore the log that belongs to \
         this data directory, or remove {} so the view is rebuilt from the log (possible \
         only while the log still starts at index 1).",
        dir.display(), log_last.next(), dir.display()
    )]
    ViewAheadOfLog {
        dir: PathBuf,
        applied: Index,
        log_last: Index,
    },
    #[error(
        "Disk View {} has applied the log through index {applied}, but the log's first \
         retained index is {log_first}: the records in between were truncated, so the view \
         cannot catch up and would miss them. Restore the view (or the whole data \
         directory) from a backup taken together with its log.",
        dir.display()
    )]
    ViewBehindLog {
        dir: PathBuf,
        applied: Index,
        log_first: Index,
    },
    /// `spindle import` created the directory and did not finish (it crashed or failed).
    #[error(
        "{}: import did not finish; remove {} and import again",
        dir.display(), dir.display()
    )]
    ImportUnfinished { dir: PathBuf },
    #[error("opening the chunk store: {0}")]
    Chunks(#[from] spindle_chunk::ChunkError),
    #[error("starting a worker thread: {0}")]
    Thread(std::io::Error),
}

/// Why a read that waits for an applied index did not get it.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("view {view} has applied {applied} and did not reach {wanted} within {waited_ms} ms")]
    Timeout {
        view: String,
        wanted: Index,
        applied: Index,
        waited_ms: u64,
    },
    /// The view stopped following the log: waiting longer cannot help.
    #[error(
        "view {view} has applied {applied} and will not reach {wanted}: it stopped following \
         the log ({reason}); acknowledged writes are safe in the log, and a restart resumes \
         the views"
    )]
    Stalled {
        view: String,
        wanted: Index,
        applied: Index,
        reason: String,
    },
    /// The view cannot write now (its disk is full) and retries on its own.
    #[error(
        "view {view} has applied {applied} and is paused before {wanted}: {reason}; \
         acknowledged writes are safe in the log, and the view resumes by itself once it \
         can write again"
    )]
    Paused {
        view: String,
        wanted: Index,
        applied: Index,
        reason: String,
    },
}

/// An item whose partition this process does not hold (a Disk View server holds some).
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "item hash {hash:#010x} lies in no partition this server holds ({}); read it from a \
     server that holds it (see the catalog in /v1/status)",
    held.iter().map(|p| format!("[{:#x}, {:#x})", p.lo(), p.hi())).collect::<Vec<_>>().join(", ")
)]
pub struct NotServed {
    pub hash: u32,
    pub held: Vec<Partition>,
}

/// Why a view stopped following the log, once it has (its follower failed, or the log
/// tailer that feeds every view did), or why it is paused (its disk is full and its follower
/// retries). Readers waiting for an index fail at once on either.
#[derive(Debug)]
pub struct Stall(watch::Sender<Option<Stalled>>);

/// A view's stall: why, and whether its follower is retrying (it resumes by itself).
#[derive(Clone, Debug, PartialEq)]
pub struct Stalled {
    pub reason: String,
    pub retrying: bool,
}

impl Default for Stall {
    fn default() -> Self {
        Stall(watch::Sender::new(None))
    }
}

impl Stall {
    /// Record the first permanent reason (it replaces a pause); later ones are dropped.
    pub fn set(&self, reason: String) {
        self.0.send_if_modified(|r| {
            let first = r.as_ref().is_none_or(|s| s.retrying);
            if first {
                *r = Some(Stalled {
                    reason,
                    retrying: false,
                });
            }
            first
        });
    }

    /// The follower cannot write but retries: readers fail fast until `resume`.
    pub fn pause(&self, reason: String) {
        self.0.send_if_modified(|r| {
            let free = r.as_ref().is_none_or(|s| s.retrying);
            if free {
                *r = Some(Stalled {
                    reason,
                    retrying: true,
                });
            }
            free
        });
    }

    /// The follower wrote again: a pause ends (a permanent stall stays).
    pub fn resume(&self) {
        self.0.send_if_modified(|r| {
            let paused = r.as_ref().is_some_and(|s| s.retrying);
            if paused {
                *r = None;
            }
            paused
        });
    }

    pub fn reason(&self) -> Option<String> {
        self.0.borrow().as_ref().map(|s| s.reason.clone())
    }

    pub fn state(&self) -> Option<Stalled> {
        self.0.borrow().clone()
    }

    /// Wait until `reached` resolves (true: the index was applied; false: timed out) or the
    /// view stalls, whichever comes first; an index already applied wins over a stall.
    async fn wait(
        &self,
        view: &str,
        wanted: Index,
        timeout: Duration,
        applied: impl Fn() -> Index,
        reached: impl std::future::Future<Output = bool>,
    ) -> Result<Index, WaitError> {
        let started = Instant::now();
        let mut stall = self.0.subscribe();
        let stalled = async move {
            let state = stall
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|r| r.clone());
            match state {
                Some(state) => state,
                // The sender lives as long as the view: never closed while waited on.
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            ok = tokio::time::timeout(timeout, reached) => match ok {
                Ok(true) => Ok(applied()),
                Ok(false) | Err(_) => Err(WaitError::Timeout {
                    view: view.to_owned(),
                    wanted,
                    applied: applied(),
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                }),
            },
            state = stalled => {
                let applied = applied();
                if applied >= wanted {
                    return Ok(applied);
                }
                let (view, reason) = (view.to_owned(), state.reason);
                Err(if state.retrying {
                    WaitError::Paused { view, wanted, applied, reason }
                } else {
                    WaitError::Stalled { view, wanted, applied, reason }
                })
            }
        }
    }
}

/// What a view's follower reports: progress to `on_applied`, pauses to the view's stall.
struct ViewEvents<'a, F> {
    stall: &'a Stall,
    on_applied: F,
}

impl<F: Fn(Index)> fanout::FollowEvents for ViewEvents<'_, F> {
    fn applied(&self, index: Index) {
        (self.on_applied)(index)
    }
    fn paused(&self, reason: String) {
        self.stall.pause(reason);
    }
    fn resumed(&self) {
        self.stall.resume();
    }
}

/// One Disk View partition and its carousel.
#[derive(Debug)]
pub struct DiskSlot {
    pub id: String,
    pub view: Arc<DiskView>,
    pub carousel: Carousel,
    /// Set when the view stops following the log.
    pub stall: Stall,
    /// What the scrubs of this view found.
    pub scrub: Mutex<ScrubState>,
}

/// The scrubs of one Disk View (`scrub_interval_ms`).
#[derive(Clone, Debug, Default)]
pub struct ScrubState {
    pub runs: u64,
    /// When the last scrub ended, how long it took and how many versions it read.
    pub last: Option<(Instant, Duration, u64)>,
    /// Why the view failed its scrub: it serves nothing from then on.
    pub corrupt: Option<String>,
}

/// A read of a Disk View this process cannot answer.
#[derive(Debug, thiserror::Error)]
pub enum DiskUnavailable {
    #[error(transparent)]
    NotServed(#[from] NotServed),
    /// The view failed its scrub (a corrupt table file, or data that does not match its
    /// checksum): it answers nothing until it is rebuilt.
    #[error(
        "Disk View {view} failed verification and serves nothing: {reason}; read from \
         another replica, and rebuild this one (remove its directory: a Disk View server \
         boots it again from the others)"
    )]
    Corrupt { view: String, reason: String },
}

impl DiskSlot {
    /// Why it serves nothing, once its scrub failed.
    pub fn corrupt(&self) -> Option<String> {
        self.scrub.lock().corrupt.clone()
    }
}

impl DiskSlot {
    /// Wait until the view has applied `index`: at most `timeout`, and not at all once the
    /// view has stopped following the log.
    pub async fn wait_applied(&self, index: Index, timeout: Duration) -> Result<Index, WaitError> {
        let view = &self.view;
        let reached = async {
            // `wait_applied_async` times out on its own; the outer bound is the same.
            view.wait_applied_async(index, timeout).await.is_ok()
        };
        self.stall
            .wait(&self.id, index, timeout, || view.applied_index(), reached)
            .await
    }
}

/// The Disk View partitions this process holds. Each is ready when the node opens, or
/// (a Disk View server filling a partition it does not have yet from the Disk View
/// servers of the catalog) once its boot finishes; until then it is not served, listed
/// or counted (docs/cluster.md "Re-partitioning").
#[derive(Debug, Default)]
pub struct DiskSet {
    entries: Vec<DiskEntry>,
}

/// `DiskSet::iter`.
pub type ReadyDisks<'a> = std::iter::FilterMap<
    std::slice::Iter<'a, DiskEntry>,
    fn(&'a DiskEntry) -> Option<&'a DiskSlot>,
>;

impl<'a> IntoIterator for &'a DiskSet {
    type Item = &'a DiskSlot;
    type IntoIter = ReadyDisks<'a>;
    fn into_iter(self) -> ReadyDisks<'a> {
        self.iter()
    }
}

#[derive(Debug)]
pub struct DiskEntry {
    id: String,
    /// Partition `i` of `disk_partitions`.
    i: u64,
    partition: Partition,
    slot: OnceLock<DiskSlot>,
    /// The retention hold of its boot, taken when the node opened (so the first catalog
    /// entry already carries it); the boot thread takes it over.
    boot_hold: Mutex<Option<truncate::HoldGuard>>,
}

impl DiskSet {
    /// The ready Disk Views.
    pub fn iter(&self) -> ReadyDisks<'_> {
        self.entries.iter().filter_map(|e| e.slot.get())
    }

    /// The partitions still booting, as (view id, range).
    pub fn booting(&self) -> impl Iterator<Item = (&str, Partition)> + '_ {
        self.entries
            .iter()
            .filter(|e| e.slot.get().is_none())
            .map(|e| (e.id.as_str(), e.partition))
    }
}

/// A view that is rebuilt by booting on every start: empty until its boot finishes.
#[derive(Debug)]
pub struct Booted<V> {
    pub name: String,
    view: OnceLock<Arc<V>>,
    /// The applied index, for readers that wait for a minimum index.
    applied: watch::Sender<Index>,
    /// Set when the view stops following the log (or its boot failed).
    pub stall: Stall,
}

impl<V> Booted<V> {
    fn new(name: String) -> Self {
        Booted {
            name,
            view: OnceLock::new(),
            applied: watch::Sender::new(Index::ZERO),
            stall: Stall::default(),
        }
    }

    /// The view, once booted.
    pub fn get(&self) -> Option<&Arc<V>> {
        self.view.get()
    }

    pub fn applied(&self) -> Index {
        *self.applied.borrow()
    }

    /// Wait until the view has applied `index`: at most `timeout`, and not at all once the
    /// view has stopped following the log.
    pub async fn wait_applied(&self, index: Index, timeout: Duration) -> Result<Index, WaitError> {
        let mut rx = self.applied.subscribe();
        let reached = async move { rx.wait_for(|a| *a >= index).await.is_ok() };
        self.stall
            .wait(&self.name, index, timeout, || self.applied(), reached)
            .await
    }
}

/// A boot in progress or finished, for the status call.
#[derive(Debug)]
pub struct BootState {
    pub view: String,
    pub started: Instant,
    pub progress: Arc<BootProgress>,
    pub cut: Option<Index>,
    /// The plan's sources (`disk-I`, or `<member>/disk-I` on an api server).
    pub sources: Vec<String>,
    /// Why the boot has not begun (an api server waiting for Disk View servers).
    pub waiting: Option<String>,
    pub bytes_total: Option<u64>,
    pub finished: Option<std::time::Duration>,
    pub error: Option<String>,
}

impl BootState {
    /// A boot that runs again: its plan no longer holds until the next one is chosen.
    pub fn forget_plan(&mut self) {
        self.cut = None;
        self.sources.clear();
    }
}

/// The last decision of the truncation worker.
#[derive(Clone, Debug, Default)]
pub struct TruncationState {
    pub decision: Option<Truncation>,
    pub first_retained: Option<Index>,
    pub error: Option<String>,
    pub runs: u64,
}

/// How often an api server's boot looks at the catalog again while the Disk View servers
/// there do not cover the hash space.
pub const REMOTE_SELECT_RETRY_MS: u64 = 250;

/// Boots of one view (a new Disk View, an api server's Memory or Index View) a server tries
/// in a row when the log is truncated past each cut.
pub const DISK_BOOT_ATTEMPTS_MAX: u32 = 3;

/// Reads of the log's first index after a boot before it counts as unknown (each
/// `REMOTE_SELECT_RETRY_MS` apart: about 10 s of a log that cannot be reached).
pub const FIRST_INDEX_READS_MAX: u32 = 40;

/// The error of a boot that could not be followed `attempts` times in a row.
fn boot_gave_up(why: &str, attempts: u32) -> String {
    format!(
        "{why}, after {attempts} boots in a row: the truncation coordinator does not keep \
         this server's hold, or the log cannot be read"
    )
}

/// Empty the directory of a Disk View that holds nothing it may claim (`disk_is_new`) or
/// can never catch up (`behind_log`), so a boot starts clean: a fill left by an earlier
/// attempt may hold versions above a new cut.
fn remove_new_view(dir: &Path) -> Result<(), String> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("removing {} before its boot: {e}", dir.display())),
    }
}

/// Where a boot's plan sources are: this process's Disk Views, or remote ones.
#[derive(Debug)]
pub enum BootSources<'a> {
    Local(&'a Node),
    Remote(std::collections::HashMap<String, crate::remote::RemoteSource>),
}

impl BootSources<'_> {
    /// The source a plan names.
    pub fn get(&self, id: &str) -> Option<&dyn spindle_view::boot::BootSource> {
        match self {
            BootSources::Local(node) => node
                .disk_by_id(id)
                .map(|v| v as &dyn spindle_view::boot::BootSource),
            BootSources::Remote(sources) => sources
                .get(id)
                .map(|s| s as &dyn spindle_view::boot::BootSource),
        }
    }
}

/// The running node. Shared by the HTTP and gRPC surfaces through an `Arc`.
#[derive(Debug)]
pub struct Node {
    pub config: ServerConfig,
    pub log: NodeLog,
    /// This node's entry in the JetStream stream's catalog, once `serve` has bound its
    /// listeners (none on the file log).
    pub catalog: crate::catalog::CatalogSlot,
    pub disks: DiskSet,
    pub memory: Booted<MemoryView>,
    pub indexes: Vec<(IndexConfig, Booted<IndexView>)>,
    pub chunks: ChunkStore,
    pub holds: Holds,
    pub boots: Mutex<Vec<BootState>>,
    pub truncation: Mutex<TruncationState>,
    pub tail_ring: Ring<Slot>,
    /// Whether the log tailer still feeds the views.
    pub tailer_health: Arc<TailerHealth>,
    /// HTTP request bodies held at once, at most `request_bodies_bytes_max`.
    pub body_budget: crate::http_input::BodyBudget,
    /// HTTP answers being sent, at most `answers_bytes_max`.
    pub answer_budget: crate::http_input::BodyBudget,
    /// The status stream's events, made once a second for every client watching.
    pub status_events: crate::page::StatusEvents,
    /// Open `Iterate` streams, at most `iterate_streams_max`.
    pub iterate_seats: crate::grpc::StreamSeats,
    /// Open `Tail` streams, at most `tail_streams_max`.
    pub tail_seats: crate::grpc::StreamSeats,
    /// Worker failures (a view follower that stopped): reported by status and metrics.
    pub failures: Mutex<Vec<String>>,
    pub metrics: crate::status::Counters,
    pub started: Instant,
    /// Turns true when the node begins to stop: streams end, the truncation worker stops.
    stop: watch::Sender<bool>,
    /// Turns true when the tailer is to drain to the durable index and stop.
    tailer_stop: watch::Sender<bool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    tailer: Mutex<Option<fanout::Tailer>>,
}

fn disk_dir(data: &Path, i: u64, n: u64) -> PathBuf {
    spindle_view::disk_ingest::disk_view_dir(data, i, n)
}

/// Partition counts of existing Disk View directories (`disk-I-of-N`).
fn existing_partition_counts(data: &Path) -> std::io::Result<Vec<u64>> {
    let dir = data.join("views");
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .strip_prefix("disk-")
            .and_then(|rest| rest.split_once("-of-"))
            .and_then(|(_, n)| n.parse().ok())
        {
            out.push(n);
        }
    }
    Ok(out)
}

/// A Disk View may resume only if the log holds the record right after its applied
/// index and nothing it has applied lies beyond the log's end (issue: views ahead of the
/// log diverge silently as later appends reuse their indexes).
fn check_view_against_log(view: &DiskView, log: &NodeLog) -> Result<(), NodeError> {
    let applied = view.applied_index();
    let log_last = log.durable_index();
    if applied > log_last {
        return Err(NodeError::ViewAheadOfLog {
            dir: view.dir().to_owned(),
            applied,
            log_last,
        });
    }
    let log_first = log.first_index();
    if applied.next() < log_first {
        return Err(NodeError::ViewBehindLog {
            dir: view.dir().to_owned(),
            applied,
            log_first,
        });
    }
    Ok(())
}

/// Open the Disk View of `partition` in `dir` with the configured options, and its carousel.
fn open_disk_slot(
    config: &ServerConfig,
    dir: &Path,
    partition: Partition,
    id: &str,
) -> Result<DiskSlot, NodeError> {
    let options = DiskOptions {
        block_cache_bytes: config.disk_block_cache_bytes,
        direct_reads: config.disk_direct_reads,
    };
    let view = DiskView::open_with(dir, partition, options).map_err(|source| NodeError::View {
        dir: dir.to_owned(),
        source,
    })?;
    let view = Arc::new(view);
    let carousel = Carousel::try_new(view.clone(), config.carousel())
        .map_err(|e| crate::config::ConfigError::Invalid(e.to_string()))?;
    Ok(DiskSlot {
        id: id.to_owned(),
        carousel,
        view,
        stall: Stall::default(),
        scrub: Mutex::new(ScrubState::default()),
    })
}

/// Whether the Disk View in `dir` has applied less than the log still holds (the records
/// after its applied index were purged): it can never catch up, protects nothing, and a
/// Disk View server that boots new partitions fills it again instead of refusing to start.
fn behind_log(dir: &Path, partition: Partition, log: &NodeLog) -> Result<bool, NodeError> {
    let view = DiskView::open(dir, partition).map_err(|source| NodeError::View {
        dir: dir.to_owned(),
        source,
    })?;
    let first = log
        .refresh_first_index()
        .unwrap_or_else(|_| log.first_index());
    let behind = view.applied_index().next() < first;
    if behind {
        tracing::warn!(
            "{}: applied through {}, but the log starts at {first}: booting it again",
            dir.display(),
            view.applied_index()
        );
    }
    Ok(behind)
}

/// Whether the Disk View in `dir` holds nothing yet: absent, never applied anything, or
/// left by a boot that did not finish (which holds nothing it may claim).
fn disk_is_new(dir: &Path, partition: Partition) -> Result<bool, NodeError> {
    if !dir.exists() {
        return Ok(true);
    }
    match DiskView::open(dir, partition) {
        Ok(view) => Ok(view.applied_index().is_zero()),
        Err(spindle_view::ViewError::BootIncomplete { .. }) => Ok(true),
        Err(source) => Err(NodeError::View {
            dir: dir.to_owned(),
            source,
        }),
    }
}

impl Node {
    /// Open (or create) everything under `config.data_dir` and start the workers. Views
    /// that boot (Memory, Index) do so in the background; `status` shows their progress.
    pub fn open(config: ServerConfig) -> Result<Arc<Node>, NodeError> {
        Self::open_on(config, spindle_log::fs::std_fs())
    }

    /// `open` with the log and the chunk store on the file system `fs` (a simulated disk
    /// that loses power, in tests); the Disk Views stay on the real one under `data_dir`.
    pub fn open_on(
        config: ServerConfig,
        fs: Arc<dyn spindle_log::fs::Fs>,
    ) -> Result<Arc<Node>, NodeError> {
        config.validate()?;
        let mut config = config;
        if config.role == crate::config::Role::DiskView {
            // A Disk View server only holds Disk Views and follows the shared log; the
            // views that boot, and truncation, belong to the nodes that append.
            config.memory_view = false;
            config.index_views.clear();
            config.truncate = false;
        }
        let data = config.data_dir.clone();
        let unfinished = spindle_view::disk_ingest::import_unfinished(&data).map_err(|source| {
            NodeError::DataDir {
                path: data.join(spindle_view::disk_ingest::IMPORT_MARKER_FILE),
                source,
            }
        })?;
        if unfinished {
            return Err(NodeError::ImportUnfinished { dir: data });
        }
        let mkdir = |p: &Path| {
            std::fs::create_dir_all(p).map_err(|source| NodeError::DataDir {
                path: p.to_owned(),
                source,
            })
        };
        mkdir(&data)?;
        // Answers to clients name files under it without it (`redact`).
        crate::redact::hide_directory(&data);
        let n = config.disk_partitions;
        let counts = existing_partition_counts(&data).map_err(|source| NodeError::DataDir {
            path: data.clone(),
            source,
        })?;
        if let Some(&found) = counts.iter().find(|&&c| c != n) {
            return Err(NodeError::Partitions {
                dir: data,
                found,
                configured: n,
            });
        }
        let log_config = LogConfig {
            segment_bytes: config.log_segment_bytes,
            sync: if config.log_sync {
                SyncMode::Data
            } else {
                SyncMode::Off
            },
            ..LogConfig::default()
        };
        let log = match &config.jetstream {
            None => NodeLog::File(Arc::new(FileLog::open_in(
                fs.clone(),
                data.join("log"),
                log_config,
            )?)),
            // A node appends; an api server appends, or stands by while another holds the
            // lease; a Disk View server only reads.
            Some(js) => open_jetstream(js, config.role)?,
        };
        let mut disks = DiskSet::default();
        let held = match config.role {
            // An api server reaches the Disk Views of the catalog instead.
            crate::config::Role::Api => Vec::new(),
            _ => config
                .partitions
                .clone()
                .unwrap_or_else(|| (0..n).collect()),
        };
        let holds = Holds::default();
        // A Disk View server fills a partition it does not have yet by booting it (from
        // the catalog's Disk View servers, or by replaying the log) once it has joined the
        // catalog; the others open now.
        let boots_new = config.role == crate::config::Role::DiskView
            && config.disk_boot != crate::config::DiskBoot::Log;
        for i in held {
            let dir = disk_dir(&data, i, n);
            let partition = Partition::nth(i, n);
            let entry = DiskEntry {
                id: format!("disk-{i}"),
                i,
                partition,
                slot: OnceLock::new(),
                boot_hold: Mutex::new(None),
            };
            // On an empty log there is nothing to boot from (`auto`): open it at once, so its
            // first catalog entry already lists it.
            let empty_log = config.disk_boot == crate::config::DiskBoot::Auto
                && log.durable_index().is_zero()
                && log.first_index() <= Index::FIRST;
            let new =
                boots_new && (disk_is_new(&dir, partition)? || behind_log(&dir, partition, &log)?);
            if new && !empty_log {
                *entry.boot_hold.lock() = Some(holds.hold(Index::ZERO));
            } else {
                if new {
                    // Nothing it holds may be claimed (a boot's unfinished fill at most).
                    remove_new_view(&dir).map_err(|e| NodeError::DataDir {
                        path: dir.clone(),
                        source: std::io::Error::other(e),
                    })?;
                }
                let slot = open_disk_slot(&config, &dir, partition, &entry.id)?;
                check_view_against_log(&slot.view, &log)?;
                let _ = entry.slot.set(slot);
            }
            disks.entries.push(entry);
        }
        let chunks = ChunkStore::open_in(
            fs,
            data.join("chunks"),
            spindle_chunk::Options {
                space_bytes_max: config.chunk_store_bytes_max,
                active_volumes: config.chunk_active_volumes,
                chunk_bytes_max: config.chunk_bytes_max as u64,
                write_buffer_bytes_max: (64 << 20).max(2 * config.chunk_bytes_max as u64),
                ..spindle_chunk::Options::default()
            },
        )?;
        let opened = chunks.open_report();
        for (file, offset, bytes) in &opened.torn_tails {
            tracing::warn!(
                "chunk store: cut a torn tail of {bytes} bytes at offset {offset} of {} \
                 (writes never acknowledged, cut short by a crash)",
                file.display()
            );
        }
        for (file, why) in &opened.rewritten_hints {
            tracing::warn!(
                "chunk store: rewrote hint {} from a scan of its volume: {why}",
                file.display()
            );
        }
        // Without Disk Views (an api server) the tail starts at the log's end: a view that
        // boots later reads what lies between its cut and the tail from the log itself.
        let from = disks
            .iter()
            .map(|d| d.view.applied_index())
            .min()
            .unwrap_or_else(|| log.durable_index())
            .next();
        let (stop, _) = watch::channel(false);
        let (tailer_stop, tailer_stop_rx) = watch::channel(false);
        let tailer_health = Arc::new(TailerHealth::default());
        let (tail_ring, tailer) =
            fanout::start(log.clone(), from, tailer_stop_rx, tailer_health.clone())
                .map_err(NodeError::Thread)?;
        let indexes = config
            .index_views
            .iter()
            .map(|c| (c.clone(), Booted::new(format!("index-{}", c.name))))
            .collect();
        let node = Arc::new(Node {
            log,
            catalog: Default::default(),
            disks,
            memory: Booted::new("memory".into()),
            indexes,
            chunks,
            holds,
            boots: Mutex::new(Vec::new()),
            truncation: Mutex::new(TruncationState::default()),
            tail_ring,
            tailer_health,
            body_budget: crate::http_input::BodyBudget::new(config.request_bodies_bytes_max),
            answer_budget: crate::http_input::BodyBudget::new(config.answers_bytes_max),
            status_events: crate::page::StatusEvents::default(),
            iterate_seats: crate::grpc::StreamSeats::new(
                "Iterate",
                "iterate_streams_max",
                config.iterate_streams_max,
            ),
            tail_seats: crate::grpc::StreamSeats::new(
                "Tail",
                "tail_streams_max",
                config.tail_streams_max,
            ),
            failures: Mutex::new(Vec::new()),
            metrics: crate::status::Counters::default(),
            started: Instant::now(),
            stop,
            tailer_stop,
            threads: Mutex::new(Vec::new()),
            tailer: Mutex::new(Some(tailer)),
            config,
        });
        node.start_disk_followers()?;
        node.start_boots()?;
        Ok(node)
    }

    fn spawn(
        self: &Arc<Self>,
        name: String,
        f: impl FnOnce(&Node) + Send + 'static,
    ) -> Result<(), NodeError> {
        let node = self.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || f(&node))
            .map_err(NodeError::Thread)?;
        self.threads.lock().push(handle);
        Ok(())
    }

    fn fail(&self, what: String) {
        tracing::error!("{what}");
        self.failures.lock().push(what);
    }

    /// A follower returned: if the ring closed because the tailer failed (not because the
    /// node stops), the view is stalled.
    fn follower_ended(&self, stall: &Stall, result: Result<(), String>) {
        match result {
            Err(reason) => stall.set(reason),
            Ok(()) => {
                if let Some(reason) = self.tailer_health.failure() {
                    stall.set(format!("the log tailer stopped: {reason}"));
                }
            }
        }
    }

    fn start_disk_followers(self: &Arc<Self>) -> Result<(), NodeError> {
        for e in 0..self.disks.entries.len() {
            let entry = &self.disks.entries[e];
            if entry.slot.get().is_some() {
                let name = format!("follow-{}", entry.id);
                self.spawn(name, move |node| {
                    let slot = node.disks.entries[e].slot.get().expect("opened");
                    node.follow_disk(slot, || {});
                })?;
            } else {
                let name = format!("boot-{}", entry.id);
                self.spawn(name, move |node| node.boot_disk_and_follow(e))?;
            }
        }
        Ok(())
    }

    /// Follow the log into a ready Disk View until the node stops; `caught_up` runs at its
    /// first applied batch.
    fn follow_disk(&self, slot: &DiskSlot, caught_up: impl Fn()) {
        let name = format!("follow-{}", slot.id);
        let events = ViewEvents {
            stall: &slot.stall,
            on_applied: |_| caught_up(),
        };
        let result = fanout::follow(&name, &*slot.view, &self.log, &self.tail_ring, &events)
            .map_err(|e| {
                let what = format!("Disk View {} stopped following the log: {e}", slot.id);
                self.fail(what.clone());
                what
            });
        self.follower_ended(&slot.stall, result);
    }

    fn start_boots(self: &Arc<Self>) -> Result<(), NodeError> {
        if self.config.memory_view {
            self.spawn("boot-memory".into(), |node| {
                node.boot_and_follow(&node.memory, |plan, sources, progress| {
                    MemoryView::boot(Partition::ALL, plan, |id| sources.get(id), progress)
                });
            })?;
        }
        for i in 0..self.indexes.len() {
            let name = format!("boot-{}", self.indexes[i].1.name);
            self.spawn(name, move |node| {
                let (config, slot) = &node.indexes[i];
                node.boot_and_follow(slot, |plan, sources, progress| {
                    IndexView::boot(
                        Partition::ALL,
                        &config.pointer,
                        plan,
                        |id| sources.get(id),
                        progress,
                    )
                });
            })?;
        }
        Ok(())
    }

    pub fn disk_by_id(&self, id: &str) -> Option<&DiskView> {
        self.disks.iter().find(|d| d.id == id).map(|d| &*d.view)
    }

    /// The Disk View that owns `key` (refused once it failed its scrub).
    pub fn disk_for(&self, key: &ItemKey) -> Result<&DiskSlot, DiskUnavailable> {
        let hash = key.hash();
        let slot = self
            .disks
            .iter()
            .find(|d| d.view.partition().contains(hash))
            .ok_or_else(|| NotServed {
                hash,
                held: self.disks.iter().map(|d| d.view.partition()).collect(),
            })?;
        match slot.corrupt() {
            Some(reason) => Err(DiskUnavailable::Corrupt {
                view: slot.id.clone(),
                reason,
            }),
            None => Ok(slot),
        }
    }

    /// Scrub every ready Disk View not yet found corrupt (a blocking full read of each):
    /// record what each scrub found; a view that fails is marked corrupt, reported as a
    /// failure, and the catalog entry is put again so other members stop using it.
    pub fn scrub_once(&self) {
        for d in self.disks.iter() {
            if *self.stop.borrow() {
                return;
            }
            if d.corrupt().is_some() {
                continue;
            }
            let started = Instant::now();
            let found = match d.view.verify() {
                Ok(r) if r.ok() => Ok(r.versions),
                Ok(r) => Err(format!(
                    "its data does not match its stored checksum at index {} (stored {}, \
                     computed {}; {} checkpoint(s) differ, {} version(s) misplaced)",
                    r.applied,
                    r.stored.map_or("none".to_owned(), |c| c.to_hex()),
                    r.computed.to_hex(),
                    r.checkpoint_mismatches.len(),
                    r.misplaced
                )),
                Err(e) => Err(e.to_string()),
            };
            let mut scrub = d.scrub.lock();
            scrub.runs += 1;
            match found {
                Ok(versions) => scrub.last = Some((Instant::now(), started.elapsed(), versions)),
                Err(reason) => {
                    scrub.last = Some((Instant::now(), started.elapsed(), 0));
                    scrub.corrupt = Some(reason.clone());
                    drop(scrub);
                    self.fail(format!(
                        "Disk View {} failed its scrub and serves nothing from now on: {reason}",
                        d.id
                    ));
                    self.catalog.renew_now();
                }
            }
        }
    }

    /// Run the scrubs every `scrub_interval_ms` until the node stops (not at all for 0).
    pub async fn scrub_worker(self: Arc<Self>) {
        if self.config.scrub_interval_ms == 0 {
            return;
        }
        let mut stop = self.stop.subscribe();
        let every = Duration::from_millis(self.config.scrub_interval_ms);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let node = self.clone();
            let _ = tokio::task::spawn_blocking(move || node.scrub_once()).await;
        }
    }

    /// The catalog view selection sees: every Disk View that has not failed its scrub, for
    /// iteration.
    pub fn catalog(&self) -> Vec<CatalogEntry> {
        self.disks
            .iter()
            .filter(|d| d.corrupt().is_none())
            .map(|d| CatalogEntry {
                id: d.id.clone(),
                range: d.view.partition(),
                applied: d.view.applied_index(),
                role: Role::Iteration,
            })
            .collect()
    }

    /// Boot `slot` from the Disk Views to a cut, then follow the log into it. Runs on its
    /// own thread; failures are recorded for status. An api server boots from the Disk
    /// View servers of the catalog (waiting until they cover the hash space).
    fn boot_and_follow<V, E>(
        &self,
        slot: &Booted<V>,
        boot: impl Fn(&spindle_view::Plan, &BootSources<'_>, &BootProgress) -> Result<V, E>,
    ) where
        V: spindle_view::follow::Applier + Send + Sync + 'static,
        E: std::fmt::Display,
    {
        // Hold the log above the lowest applied index before choosing the cut: the cut
        // can only be at or above it, so the records the view will tail stay.
        // (An api server holds everything until it knows its cut.)
        let floor = self
            .disks
            .iter()
            .map(|d| d.view.applied_index())
            .min()
            .unwrap_or(Index::ZERO);
        let hold = Mutex::new(Some(self.holds.hold(floor)));
        let progress = Arc::new(BootProgress::default());
        let bytes_total = self
            .disks
            .iter()
            .map(|d| d.view.estimate_live_bytes().ok())
            .sum::<Option<u64>>();
        let at = self.boots.lock().len();
        self.boots.lock().push(BootState {
            view: slot.name.clone(),
            started: Instant::now(),
            progress: progress.clone(),
            cut: None,
            sources: Vec::new(),
            waiting: None,
            bytes_total,
            finished: None,
            error: None,
        });
        let request = SelectRequest {
            range: Partition::ALL,
            role: Role::Iteration,
            head: self.log.durable_index(),
            lag_records_max: u64::MAX,
        };
        let booted = if self.config.role == crate::config::Role::Api {
            self.boot_remote(at, &request, &hold, |plan, sources| {
                boot(plan, sources, &progress).map_err(|e| e.to_string())
            })
        } else {
            Some(
                select(&self.catalog(), &request)
                    .map_err(|e| e.to_string())
                    .and_then(|plan| {
                        let mut boots = self.boots.lock();
                        boots[at].cut = Some(plan.cut);
                        boots[at].sources = plan.sources.iter().map(|s| s.view.clone()).collect();
                        drop(boots);
                        boot(&plan, &BootSources::Local(self), &progress).map_err(|e| e.to_string())
                    }),
            )
        };
        let booted = match booted {
            Some(b) => b,
            None => return, // the node stops before the boot could begin
        };
        let view = match booted {
            Ok(view) => Arc::new(view),
            Err(e) => {
                self.boots.lock()[at].error = Some(e.clone());
                let what = format!("booting {} failed: {e}", slot.name);
                self.fail(what.clone());
                slot.stall.set(what);
                return;
            }
        };
        let started = self.boots.lock()[at].started;
        self.boots.lock()[at].finished = Some(started.elapsed());
        slot.applied.send_replace(view.applied_index());
        slot.view
            .set(view.clone())
            .unwrap_or_else(|_| panic!("{} booted twice", slot.name));
        let name = format!("follow-{}", slot.name);
        let events = ViewEvents {
            stall: &slot.stall,
            on_applied: |applied| {
                // Caught up with the log: the records above the cut are applied, so the
                // boot's retention hold is no longer needed.
                hold.lock().take();
                slot.applied.send_replace(applied);
            },
        };
        let followed = fanout::follow(&name, &*view, &self.log, &self.tail_ring, &events);
        let result = followed.map_err(|e| {
            let what = format!("{} stopped following the log: {e}", slot.name);
            self.fail(what.clone());
            what
        });
        self.follower_ended(&slot.stall, result);
    }

    /// Choose a plan over the remote Disk Views of the catalog (waiting, while the node
    /// runs, until they cover the hash space with views the log can be followed from),
    /// hold the log above its cut, and boot. `None` when the node stops first.
    ///
    /// A view is chosen only if it has applied the record before the log's first retained
    /// index (`SelectRequest::followed_from`): a stalled replica behind a truncation would
    /// give a cut the view could never tail from. And since the truncation may pass the cut
    /// before it sees the hold, the first index is asked again after the boot; if it passed
    /// the cut, the boot is made again (at most `DISK_BOOT_ATTEMPTS_MAX` times).
    fn boot_remote<V>(
        &self,
        at: usize,
        request: &SelectRequest,
        hold: &Mutex<Option<truncate::HoldGuard>>,
        boot: impl Fn(&spindle_view::Plan, &BootSources<'_>) -> Result<V, String>,
    ) -> Option<Result<V, String>> {
        let mut attempts = 0;
        loop {
            let (plan, views) = self.choose_remote_plan(at, request)?;
            self.begin_boot(at, &plan, hold);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("boot-remote")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return Some(Err(format!("starting the remote boot's runtime: {e}"))),
            };
            let sources = crate::remote::plan_sources(
                &plan,
                &views,
                self.config.token.clone(),
                rt.handle().clone(),
            );
            tracing::info!(
                "booting from {} remote Disk View(s) to cut {}",
                plan.sources.len(),
                plan.cut
            );
            let result = boot(&plan, &BootSources::Remote(sources));
            rt.shutdown_background();
            if result.is_ok() {
                attempts += 1;
                match self.must_boot_again(at, plan.cut, attempts) {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
            return Some(result);
        }
    }

    /// Begin boot `at` to `plan`: hold the log above the cut (published in the catalog at
    /// once) before letting go of the hold `hold` had, and show the plan in status.
    fn begin_boot(
        &self,
        at: usize,
        plan: &spindle_view::Plan,
        hold: &Mutex<Option<truncate::HoldGuard>>,
    ) {
        *hold.lock() = Some(self.holds.hold(plan.cut));
        self.catalog.renew_now();
        let mut boots = self.boots.lock();
        boots[at].cut = Some(plan.cut);
        boots[at].sources = plan.sources.iter().map(|s| s.view.clone()).collect();
        boots[at].waiting = None;
    }

    /// After boot `at` reached `cut` (its `attempts`-th in a row): `Ok(false)` when the view
    /// can follow the log from there; `Ok(true)` when the log was truncated past the cut
    /// (the coordinator may have purged before it saw the hold), so the boot must be made
    /// again, its old plan forgotten in status; `Err` once that has happened
    /// `DISK_BOOT_ATTEMPTS_MAX` times in a row.
    fn must_boot_again(&self, at: usize, cut: Index, attempts: u32) -> Result<bool, String> {
        let Err(why) = self.followable_after_boot(cut) else {
            return Ok(false);
        };
        if attempts >= DISK_BOOT_ATTEMPTS_MAX {
            return Err(boot_gave_up(&why, attempts));
        }
        let mut boots = self.boots.lock();
        tracing::warn!("{}: {why}; booting again", boots[at].view);
        boots[at].forget_plan();
        Ok(true)
    }

    /// After a boot to `cut`: whether the view can follow the log from `cut + 1`. Not if
    /// the log was purged past the cut meanwhile (a truncation coordinator that had not yet
    /// read the hold), nor if the log's first index cannot be read for a while (about
    /// `FIRST_INDEX_READS_MAX` × `REMOTE_SELECT_RETRY_MS`): unknown counts as purged, since
    /// booting again is safe and following a gap is not. `Err` says which.
    fn followable_after_boot(&self, cut: Index) -> Result<(), String> {
        let mut error = String::new();
        for _ in 0..FIRST_INDEX_READS_MAX {
            // Asked of the servers: a reader's cached first index can lag a purge.
            match self.log.refresh_first_index() {
                Ok(first) if cut.next() >= first => return Ok(()),
                Ok(first) => {
                    return Err(format!(
                        "the log was truncated past the boot's cut {cut} (it starts at {first})"
                    ))
                }
                Err(e) => error = e,
            }
            if *self.stop.borrow() {
                break;
            }
            std::thread::sleep(Duration::from_millis(REMOTE_SELECT_RETRY_MS));
        }
        Err(format!(
            "the log's first index could not be read after the boot to cut {cut}: {error}"
        ))
    }

    /// Wait (while the node runs) for a plan over the catalog's remote Disk Views whose cut
    /// the log can be followed from; `None` when the node stops first.
    fn choose_remote_plan(
        &self,
        at: usize,
        request: &SelectRequest,
    ) -> Option<(spindle_view::Plan, Vec<crate::remote::RemoteView>)> {
        let mut waiting_since: Option<Instant> = None;
        let mut wait = |why: String| {
            if waiting_since.is_none() {
                tracing::info!("waiting for Disk View servers in the catalog: {why}");
                waiting_since = Some(Instant::now());
            }
            self.boots.lock()[at].waiting = Some(why);
            std::thread::sleep(Duration::from_millis(REMOTE_SELECT_RETRY_MS));
        };
        loop {
            if *self.stop.borrow() {
                return None;
            }
            // Asked of the servers: a reader's cached first index can lag a purge.
            let first = match self.log.refresh_first_index() {
                Ok(first) => first,
                Err(e) => {
                    wait(format!("reading the log's first index: {e}"));
                    continue;
                }
            };
            // Members whose entries missed a renewal, or whose checksums disagree with
            // their range's majority, are not chosen to boot from.
            let views = self.catalog.boot_views();
            let request = request.clone().followed_from(first);
            match select(&crate::remote::selection_catalog(&views), &request) {
                Ok(plan) => return Some((plan, views)),
                Err(e) => wait(format!("{e} (the log starts at {first})")),
            }
        }
    }

    /// Fill a Disk View this server does not have yet, then follow the log into it (a Disk
    /// View server's thread per such partition): boot it from the Disk View servers of the
    /// catalog that cover its range (re-partitioning, a new replica), or replay the log
    /// while it still starts at index 1 (`disk_boot`, docs/cluster.md "Re-partitioning").
    /// Its retention hold is published in the catalog from the start, at 0 until the cut
    /// is chosen, then at the cut until the view has applied past it.
    fn boot_disk_and_follow(&self, e: usize) {
        let entry = &self.disks.entries[e];
        let hold = Mutex::new(entry.boot_hold.lock().take());
        let progress = Arc::new(BootProgress::default());
        let at = {
            let mut boots = self.boots.lock();
            boots.push(BootState {
                view: entry.id.clone(),
                started: Instant::now(),
                progress: progress.clone(),
                cut: None,
                sources: Vec::new(),
                waiting: Some("joining the catalog".into()),
                bytes_total: None,
                finished: None,
                error: None,
            });
            boots.len() - 1
        };
        let booted = self.boot_disk(entry, at, &hold, &progress);
        let slot = match booted {
            None => return, // the node stops first
            Some(Ok(slot)) => slot,
            Some(Err(e)) => {
                self.boots.lock()[at].error = Some(e.clone());
                self.fail(format!("booting {} failed: {e}", entry.id));
                return;
            }
        };
        {
            let mut boots = self.boots.lock();
            let b = &mut boots[at];
            b.finished = Some(b.started.elapsed());
            b.waiting = None;
        }
        let _ = entry.slot.set(slot);
        let slot = entry.slot.get().expect("just set");
        // Readers, view selection and truncation see the view from the next entry on.
        self.catalog.renew_now();
        tracing::info!(
            "{} booted at {}; following the log",
            entry.id,
            slot.view.applied_index()
        );
        self.follow_disk(slot, || {
            if hold.lock().take().is_some() {
                self.catalog.renew_now();
            }
        });
    }

    /// `boot_disk_and_follow`'s boot: the ready slot, an error, or `None` when the node
    /// stops first.
    fn boot_disk(
        &self,
        entry: &DiskEntry,
        at: usize,
        hold: &Mutex<Option<truncate::HoldGuard>>,
        progress: &BootProgress,
    ) -> Option<Result<DiskSlot, String>> {
        let dir = disk_dir(&self.config.data_dir, entry.i, self.config.disk_partitions);
        let partition = entry.partition;
        let set_waiting = |why: Option<String>| self.boots.lock()[at].waiting = why;
        let sleep = || std::thread::sleep(Duration::from_millis(REMOTE_SELECT_RETRY_MS));
        // The hold must be in the catalog before a cut is chosen.
        while !self.catalog.registered() {
            if *self.stop.borrow() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.catalog.renew_now();
        // A truncation coordinator reads the catalog every third of its ttl: when there is
        // anything it could purge, give it one read to see the hold before a cut is chosen
        // (a purge past the cut in the meantime is caught after the boot, below).
        let purgeable = self
            .catalog
            .boot_views()
            .iter()
            .any(|v| !v.applied.is_zero());
        if let (true, Some(js)) = (purgeable, &self.config.jetstream) {
            set_waiting(Some("publishing its retention hold".into()));
            std::thread::sleep(Duration::from_millis(js.catalog_ttl_ms / 3 + 250));
        }
        let auto = self.config.disk_boot == crate::config::DiskBoot::Auto;
        let request = SelectRequest {
            range: partition,
            role: Role::Iteration,
            head: Index::ZERO,
            lag_records_max: u64::MAX,
        };
        // Say why it waits (logged once), then look again after a pause.
        let mut waiting_logged = false;
        let mut wait = |why: String| {
            if !waiting_logged {
                tracing::info!("{}: {why}", entry.id);
                waiting_logged = true;
            }
            set_waiting(Some(why));
            sleep();
        };
        let mut attempts = 0;
        loop {
            if *self.stop.borrow() {
                return None;
            }
            // Asked of the servers: a reader's cached first index can lag a purge.
            let first = match self.log.refresh_first_index() {
                Ok(first) => first,
                Err(e) => {
                    wait(format!("reading the log's first index: {e}"));
                    continue;
                }
            };
            let views = self.catalog.boot_views();
            // Views behind the log's first retained index are passed over, so a fresh
            // larger one is chosen rather than waiting on a stalled smaller one.
            let chosen = select(
                &crate::remote::selection_catalog(&views),
                &SelectRequest {
                    head: self.log.durable_index(),
                    ..request.clone()
                }
                .followed_from(first),
            );
            let plan = match chosen {
                Ok(plan) if plan.cut.next() >= first && !(auto && plan.cut.is_zero()) => plan,
                _ if auto && first <= Index::FIRST => {
                    // Nothing to boot from, and the log holds everything: replay it.
                    set_waiting(None);
                    if let Err(e) = remove_new_view(&dir) {
                        return Some(Err(e));
                    }
                    let slot = open_disk_slot(&self.config, &dir, partition, &entry.id)
                        .map_err(|e| e.to_string());
                    tracing::info!("{}: replaying the log from index 1", entry.id);
                    return Some(slot);
                }
                Ok(plan) => {
                    wait(format!(
                        "the Disk View servers covering [{:#x}, {:#x}) have applied through \
                         {}, but the log starts at {first}: waiting for fresher ones",
                        partition.lo(),
                        partition.hi(),
                        plan.cut
                    ));
                    continue;
                }
                Err(e) => {
                    wait(format!(
                        "no Disk View servers in the catalog cover [{:#x}, {:#x}) to boot \
                         from ({e}), and the log starts at {first}",
                        partition.lo(),
                        partition.hi()
                    ));
                    continue;
                }
            };
            self.begin_boot(at, &plan, hold);
            attempts += 1;
            if let Err(e) = self.boot_disk_from(&dir, partition, &plan, &views, progress) {
                return Some(Err(e));
            }
            match self.must_boot_again(at, plan.cut, attempts) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => return Some(Err(e)),
            }
            return Some(
                open_disk_slot(&self.config, &dir, partition, &entry.id).map_err(|e| e.to_string()),
            );
        }
    }

    /// Boot the Disk View in `dir` (emptied first) from the remote sources of `plan`.
    fn boot_disk_from(
        &self,
        dir: &Path,
        partition: Partition,
        plan: &spindle_view::Plan,
        views: &[crate::remote::RemoteView],
        progress: &BootProgress,
    ) -> Result<(), String> {
        remove_new_view(dir)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("boot-remote")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the remote boot's runtime: {e}"))?;
        let sources = crate::remote::plan_sources(
            plan,
            views,
            self.config.token.clone(),
            rt.handle().clone(),
        );
        tracing::info!(
            "booting Disk View [{:#x}, {:#x}) from {} remote Disk View(s) to cut {}",
            partition.lo(),
            partition.hi(),
            plan.sources.len(),
            plan.cut
        );
        let sources = BootSources::Remote(sources);
        let booted = DiskView::boot(dir, partition, plan, |id| sources.get(id), progress);
        drop(sources);
        rt.shutdown_background();
        booted.map(drop).map_err(|e| e.to_string())
    }

    /// The truncation coordinator's decision now (DESIGN.md §7). A Disk View counts at its
    /// *persisted* applied index, never its in-memory one: after a power cut a view comes
    /// back at what it had synced, and the log must still hold everything above that.
    pub fn truncation_decision(&self) -> Truncation {
        // A view that failed its scrub is no replica.
        let mut replicas: Vec<Replica> = self
            .disks
            .iter()
            .filter(|d| d.corrupt().is_none())
            .map(|d| Replica {
                view: d.id.clone(),
                range: d.view.partition(),
                applied: d.view.persisted_index(),
            })
            .collect();
        // On a shared JetStream log, the Disk Views of every other live member of the
        // catalog count too, at the persisted index they last published (never above what
        // they have: an entry is at most one renewal old).
        replicas.extend(self.catalog.replicas());
        // Boots on other hosts (Disk View servers filling new partitions) hold the log too.
        let mut holds = self.holds.active();
        holds.extend(self.catalog.holds());
        truncate::safe_index(&replicas, self.config.truncate_replicas_min, &holds)
    }

    /// Sync every Disk View's write-ahead log so its persisted index catches up with what
    /// it has applied (one fdatasync per view, off the async workers).
    pub async fn persist_disk_views(&self) -> Result<(), String> {
        let views: Vec<(String, Arc<DiskView>)> = self
            .disks
            .iter()
            .map(|d| (d.id.clone(), d.view.clone()))
            .collect();
        tokio::task::spawn_blocking(move || {
            for (id, view) in views {
                view.persist()
                    .map_err(|e| format!("syncing Disk View {id}: {e}"))?;
            }
            Ok(())
        })
        .await
        .map_err(|e| format!("persisting Disk Views: {e}"))?
    }

    /// One run of the truncation worker: persist the Disk Views' progress, decide from
    /// what is persisted, then delete the log prefix that allows.
    pub async fn truncate_once(&self) {
        // A Disk View server never truncates, but publishes what it has persisted for the
        // node that does.
        let persist = self.config.truncate || self.config.role == crate::config::Role::DiskView;
        let persisted = if persist {
            self.persist_disk_views().await
        } else {
            Ok(())
        };
        let decision = self.truncation_decision();
        let result = match persisted {
            // Only the appender purges (a standby api server decides but does not act).
            Ok(()) if self.config.truncate && self.log.appends() => Some(
                truncate::truncate(&self.log, &decision)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            Ok(()) => None,
            // A view that cannot sync keeps its old persisted index; skip this round and
            // say why (the decision shown is still what is persisted).
            Err(e) => Some(Err(e)),
        };
        let mut state = self.truncation.lock();
        state.runs += 1;
        match result {
            Some(Ok(first)) => {
                state.first_retained = Some(first);
                state.error = None;
            }
            Some(Err(e)) => state.error = Some(e),
            None => {}
        }
        state.decision = Some(decision);
    }

    /// Run the truncation worker until the node stops.
    pub async fn truncation_worker(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        let mut tick = tokio::time::interval(self.config.truncate_interval());
        loop {
            tokio::select! {
                _ = tick.tick() => self.truncate_once().await,
                _ = stop.changed() => return,
            }
        }
    }

    /// When `at` lies inside a transaction of several records (not at its end), that
    /// transaction's commit index: a read or an iteration as of `at` would show part of it
    /// (DESIGN.md §12, invariant 2), and a Disk View keeps no transaction boundaries. Known
    /// only while the log holds `at` and it is durable; `Ok(None)` otherwise, and for a
    /// commit. Reads the log on a blocking thread.
    pub async fn commit_around(self: &Arc<Self>, at: Index) -> Result<Option<Index>, String> {
        if at < self.log.first_index() || at > self.log.durable_index() {
            return Ok(None);
        }
        let node = self.clone();
        // The records from `at` through the end of its transaction (a read ends on a commit).
        let records = tokio::task::spawn_blocking(move || node.log.read(at, 1))
            .await
            .map_err(|e| e.to_string())?;
        match records {
            Ok(records) => Ok(match (records.first(), records.last()) {
                (Some(first), Some(last)) if first.index == at && !first.commit => Some(last.index),
                _ => None,
            }),
            // Truncated meanwhile: no longer checkable.
            Err(spindle_log::ReadError::Truncated { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A receiver that turns true when the node is stopping.
    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Begin stopping: every gRPC stream ends with UNAVAILABLE and its rider is detached,
    /// the truncation worker stops. The tailer and the views go on until `shutdown`.
    pub fn begin_shutdown(&self) {
        self.stop.send_replace(true);
    }

    /// Stop the workers: the tailer publishes up to the durable index and stops, the
    /// followers drain the ring, the Disk Views persist their applied indexes, and the log
    /// is closed. Call after the listeners stopped (no appends arrive any more). A view that
    /// did not reach the durable index is named in the log with the reason.
    pub fn shutdown(&self) {
        self.begin_shutdown();
        self.tailer_stop.send_replace(true);
        if let Some(tailer) = self.tailer.lock().take() {
            match tailer.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("log tailer stopped with: {e}"),
                Err(_) => tracing::error!("log tailer panicked"),
            }
        }
        // A boot still iterating is not waited for: its view is rebuilt on the next start.
        let iterating: Vec<String> = self
            .boots
            .lock()
            .iter()
            .filter(|b| b.finished.is_none() && b.error.is_none())
            .map(|b| format!("boot-{}", b.view))
            .collect();
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock());
        for handle in threads {
            let name = handle.thread().name().unwrap_or("worker").to_owned();
            if iterating.contains(&name) {
                continue;
            }
            if handle.join().is_err() {
                tracing::error!("{name} panicked");
            }
        }
        for d in self.disks.iter() {
            if let Err(e) = d.view.flush() {
                tracing::error!("flushing {}: {e}", d.id);
            }
        }
        self.report_drain();
        self.log.close();
    }

    /// Log each view that stopped below the durable index, and why.
    fn report_drain(&self) {
        let durable = self.log.durable_index();
        let stalls = self
            .disks
            .iter()
            .map(|d| (&d.id, &d.stall, d.view.applied_index()))
            .chain(
                self.config
                    .memory_view
                    .then(|| (&self.memory.name, &self.memory.stall, self.memory.applied())),
            )
            .chain(
                self.indexes
                    .iter()
                    .map(|(_, s)| (&s.name, &s.stall, s.applied())),
            );
        for (name, stall, applied) in stalls {
            if applied >= durable {
                continue;
            }
            let why = stall.reason().unwrap_or_else(|| {
                if name.starts_with("disk-") {
                    "it stopped before the tailer's last batch".to_owned()
                } else {
                    "it was still booting or had not caught up (it is rebuilt on the next \
                     start)"
                        .to_owned()
                }
            });
            tracing::warn!(
                "shutdown: view {name} stopped at index {applied}, below the durable index \
                 {durable}: {why}"
            );
        }
    }

    /// Every view's applied index by name (for status, metrics and tests).
    pub fn applied_indexes(&self) -> BTreeMap<String, Index> {
        let mut out = BTreeMap::new();
        for d in self.disks.iter() {
            out.insert(d.id.clone(), d.view.applied_index());
        }
        out.insert(self.memory.name.clone(), self.memory.applied());
        for (_, slot) in &self.indexes {
            out.insert(slot.name.clone(), slot.applied());
        }
        out
    }
}

/// Open the node's log on JetStream as its stream's appender.
#[cfg(feature = "jetstream")]
fn open_jetstream(
    js: &crate::config::JetStreamSettings,
    role: crate::config::Role,
) -> Result<NodeLog, NodeError> {
    use spindle_log::jetstream::{JetStreamConfig, JetStreamLog};
    let mut config = JetStreamConfig::new(js.servers.clone(), js.monitor_urls.clone());
    config.stream = js.stream.clone();
    config.replicas = js.replicas;
    config.group_commit_linger = std::time::Duration::from_millis(js.group_commit_linger_ms);
    config.feed_cache_bytes_max = js.feed_cache_bytes_max;
    config.leader_follows_appender = js.leader_follows_appender;
    let log = match role {
        crate::config::Role::Node => JetStreamLog::open(config),
        crate::config::Role::Api => JetStreamLog::open_standby(config),
        crate::config::Role::DiskView => JetStreamLog::open_reader(config),
    }
    .map_err(|e| NodeError::JetStreamLog(e.to_string()))?;
    Ok(NodeLog::JetStream(Arc::new(log)))
}

#[cfg(not(feature = "jetstream"))]
fn open_jetstream(
    _: &crate::config::JetStreamSettings,
    _: crate::config::Role,
) -> Result<NodeLog, NodeError> {
    Err(NodeError::JetStreamLog(
        "this build has no JetStream support (the `jetstream` feature)".into(),
    ))
}
