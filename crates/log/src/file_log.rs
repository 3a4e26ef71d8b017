//! `FileLog`: the embedded log on local segment files.
//!
//! Appenders validate and encode on their own thread, queue into the bounded intake, and
//! await their outcome; one writer thread group-commits (see `writer`). Readers read synced
//! frames with positioned reads and never look past the durable index, which only ever lands
//! on a commit record, so no reader sees part of a transaction or an unsynced byte.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex, RwLock};
use spindle_core::{Index, Record, Transaction};
use tokio::sync::{oneshot, watch, Semaphore};

use crate::config::LogConfig;
use crate::error::{io_at, AppendError, OpenError, ReadError, TruncateError};
use crate::fs::{std_fs, DirLock, Fs, FsFile};
use crate::intake::{Command, FramePool, Intake, Pending, Prepared, Reply};
use crate::reader::read_range;
use crate::recovery::{scan_dir, TornTail};
use crate::segment::{create_segment, segment_file_name, SEGMENT_HEADER_BYTES};
use crate::syncer;
use crate::versions::VersionTable;
use crate::writer::{Tail, Writer};

pub(crate) const LOCK_FILE: &str = "LOCK";

/// An open segment file and its in-memory offset index.
#[derive(Debug)]
pub(crate) struct SegmentHandle {
    pub first: Index,
    pub path: PathBuf,
    pub file: Arc<dyn FsFile>,
    pub sparse: Mutex<Vec<(Index, u64)>>,
}

impl SegmentHandle {
    pub fn new(first: Index, path: PathBuf, file: Arc<dyn FsFile>) -> Self {
        SegmentHandle {
            first,
            path,
            file,
            sparse: Mutex::new(Vec::new()),
        }
    }
}

/// Counters for reports and metrics.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Group commits written.
    pub batches: AtomicU64,
    /// fdatasync calls made for appends.
    pub syncs: AtomicU64,
    /// Records made durable.
    pub records: AtomicU64,
    /// How long the most recent fdatasyncs took.
    pub sync_latency: SyncLatency,
    /// Syncs that returned while another sync of the log ran, and so waited for it before
    /// trusting their own success (see `syncer::sync`).
    pub sync_overlaps: AtomicU64,
    /// Batches the writer thread synced and answered itself because the syncer was idle
    /// and nothing else was queued (a lone appender's path: one thread handoff fewer).
    pub batches_synced_by_writer: AtomicU64,
}

/// The syncs running now, by the order they began (see `syncer::sync`).
#[derive(Debug, Default)]
pub(crate) struct SyncsRunning {
    pub began: u64,
    pub running: std::collections::BTreeSet<u64>,
}

/// The durations of the last `SYNC_LATENCY_WINDOW` fdatasyncs of appends, for the status
/// page's p50/p99 (a recent window, so a slow hour long ago does not hide today's device).
#[derive(Debug, Default)]
pub struct SyncLatency {
    recent_us: Mutex<std::collections::VecDeque<u64>>,
}

/// fdatasyncs `SyncLatency` keeps.
pub const SYNC_LATENCY_WINDOW: usize = 1024;

/// Percentiles over `SyncLatency`'s window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncPercentiles {
    /// Syncs in the window.
    pub count: usize,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl SyncLatency {
    pub fn record(&self, took: std::time::Duration) {
        let mut recent = self.recent_us.lock();
        if recent.len() == SYNC_LATENCY_WINDOW {
            recent.pop_front();
        }
        recent.push_back(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }

    /// Nearest-rank percentiles of the window; `None` before the first sync.
    pub fn percentiles(&self) -> Option<SyncPercentiles> {
        let mut v: Vec<u64> = self.recent_us.lock().iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = |p: usize| v[(v.len() * p).div_ceil(100).max(1) - 1];
        Some(SyncPercentiles {
            count: v.len(),
            p50_us: rank(50),
            p99_us: rank(99),
            max_us: v[v.len() - 1],
        })
    }
}

/// State shared by appenders, readers and the writer thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    /// (segment first index, offset): how far the syncer has synced the tail segment.
    synced: Mutex<(Index, u64)>,
    pub config: LogConfig,
    pub intake: Mutex<Intake>,
    pub intake_ready: Condvar,
    /// Bumped (under the intake lock) whenever work is queued for the writer or the log
    /// closes, so an idle writer can watch for work without taking the lock.
    pub intake_stamp: AtomicU64,
    /// Sync jobs handed to the syncer thread and not yet completed by it.
    pub sync_jobs_open: AtomicU64,
    pub intake_permits: Semaphore,
    /// Large submissions' frame buffers, given back by the writer.
    pub frame_pool: FramePool,
    pub durable: watch::Sender<Index>,
    pub first: AtomicU64,
    pub segments: RwLock<Vec<Arc<SegmentHandle>>>,
    failure: Mutex<Option<String>>,
    /// Fast check for `failure` on the hot path.
    failed: AtomicBool,
    pub stats: LogStats,
    pub syncs_running: Mutex<SyncsRunning>,
    pub sync_ended: Condvar,
}

impl Shared {
    pub fn durable_index(&self) -> Index {
        *self.durable.borrow()
    }

    pub fn first_index(&self) -> Index {
        Index::new(self.first.load(Ordering::Acquire))
    }

    pub fn publish_durable(&self, index: Index) {
        self.durable.send_replace(index);
    }

    /// The syncer synced `segment` up to `offset`.
    pub fn note_synced(&self, segment: Index, offset: u64) {
        let mut synced = self.synced.lock();
        if *synced < (segment, offset) {
            *synced = (segment, offset);
        }
    }

    /// How far `segment` is known to be synced (0 if nothing is known).
    pub fn synced_offset(&self, segment: Index) -> u64 {
        let synced = self.synced.lock();
        if synced.0 == segment {
            synced.1
        } else {
            0
        }
    }

    pub fn failure(&self) -> Option<String> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.failure.lock().clone()
    }

    /// Make the log refuse writes until reopened (sticky failure).
    pub fn fail(&self, cause: String) {
        tracing::error!(%cause, "log failed; refusing writes until reopened");
        let mut f = self.failure.lock();
        if f.is_none() {
            *f = Some(cause);
        }
        self.failed.store(true, Ordering::Release);
    }
}

/// What `open` found and repaired.
#[derive(Clone, Debug, Default)]
pub struct OpenReport {
    pub segments: usize,
    pub first_index: Index,
    pub last_index: Index,
    /// A torn tail that was cut, if any.
    pub torn_tail: Option<TornTail>,
}

/// The embedded file log. Cheap to clone; the writer stops when the last clone is dropped
/// or `close` is called.
#[derive(Clone, Debug)]
pub struct FileLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
    _lock: Box<dyn DirLock>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        stop_writer(&self.shared, &self.writer);
    }
}

fn stop_writer(shared: &Shared, writer: &Mutex<Option<JoinHandle<()>>>) {
    {
        let mut intake = shared.intake.lock();
        intake.closed = true;
        shared.intake_stamp.fetch_add(1, Ordering::Release);
    }
    shared.intake_ready.notify_one();
    shared.intake_permits.close();
    if let Some(handle) = writer.lock().take() {
        let _ = handle.join();
    }
}

impl FileLog {
    /// Open (or create) the log in `dir`: lock it, scan and verify every segment, cut a torn
    /// tail, rebuild the version table, and start the writer.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<FileLog, OpenError> {
        Self::open_in(std_fs(), dir, config)
    }

    /// `open` on the given file system (the real one, or a simulated one in tests).
    pub fn open_in(
        fs: Arc<dyn Fs>,
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<FileLog, OpenError> {
        config.validate().map_err(OpenError::Config)?;
        let dir = dir.as_ref().to_path_buf();
        fs.create_dir_all(&dir).map_err(io_at(&dir))?;
        let lock = lock_dir(&*fs, &dir)?;
        crate::segment::check_names(&*fs, &dir)?;
        remove_temporaries(&*fs, &dir)?;

        let checkpoint = VersionTable::read_checkpoint(&*fs, &dir).map_err(io_at(&dir))?;
        let ckpt_path = dir.join(crate::versions::CHECKPOINT_FILE);
        let (mut versions, as_of) = match checkpoint {
            None => (VersionTable::new(), Index::ZERO),
            Some(Ok(t)) => t,
            Some(Err(reason)) => {
                return Err(OpenError::Corrupt {
                    file: ckpt_path,
                    offset: 0,
                    reason,
                })
            }
        };
        let hint_path = dir.join(crate::hint::HINT_FILE);
        let hint = crate::hint::read_hint(&*fs, &dir)
            .map_err(io_at(&hint_path))?
            .map_err(|(offset, reason)| OpenError::Corrupt {
                file: hint_path.clone(),
                offset,
                reason,
            })?;
        let stride = config.sparse_index_stride_records;
        // After a failed sync the kernel keeps the unwritten pages cached but clean: a sync
        // will not write them, yet a read returns them. Read the last segment (the only one
        // a failed sync can leave so) from the disk, or records that never reached it would
        // be served as durable.
        // (Best effort: a file system that cannot drop cached pages only loses this guard.)
        if let Some((_, last)) = crate::segment::list_segments_in(&*fs, &dir)
            .map_err(io_at(&dir))?
            .last()
        {
            if let Err(e) = fs.open(last).and_then(|f| f.drop_cache()) {
                tracing::warn!(file = %last.display(), error = %e, "could not drop cached pages before recovery");
            }
        }
        let scan = scan_dir(&*fs, &dir, stride, hint, |index, key, deleted| {
            if index > as_of {
                versions.set(key, index, deleted);
            }
        })?;
        let mut segments = Vec::with_capacity(scan.segments.len());
        for s in &scan.segments {
            let file = fs.open(&s.path).map_err(io_at(&s.path))?;
            let handle = SegmentHandle::new(s.first, s.path.clone(), file);
            *handle.sparse.lock() = s.sparse.clone();
            segments.push(Arc::new(handle));
        }
        if let Some(torn) = &scan.torn_tail {
            tracing::warn!(file = %torn.file.display(), offset = torn.offset, reason = %torn.reason, "cutting torn log tail");
            let last = segments.last().expect("a torn tail has a segment");
            let len = last.file.size().map_err(io_at(&last.path))?;
            last.file
                .zero_range(torn.offset, len)
                .map_err(io_at(&last.path))?;
        }
        if let Some(last) = segments.last() {
            // What recovery kept may still sit only in the page cache (the previous process
            // died before syncing it): make it durable before serving it as durable, and so
            // the unsynced window starts from here.
            last.file.sync_all().map_err(io_at(&last.path))?;
            // Likewise the names: a segment the dead process created and renamed into place
            // but did not live to sync its directory for would be appended to and then lost
            // with its name.
            fs.sync_dir(&dir).map_err(io_at(&dir))?;
        }
        let (first, last) = match (scan.segments.first(), scan.last_index()) {
            (Some(f), last) => (f.first, last),
            (None, _) => {
                let first = as_of.next();
                let file = create_segment(
                    &*fs,
                    &dir,
                    first,
                    config.segment_bytes,
                    config.header_unsynced_window(),
                )
                .map_err(|e| io_at(&dir)(e.into_io()))?;
                let path = dir.join(segment_file_name(first));
                segments.push(Arc::new(SegmentHandle::new(first, path, file)));
                (first, as_of)
            }
        };
        if as_of.get() + 1 < first.get() || as_of > last {
            return Err(OpenError::Corrupt {
                file: ckpt_path,
                offset: 16,
                reason: format!(
                    "version checkpoint covers 1..={as_of} but the log retains {first}..={last}"
                ),
            });
        }
        let tail_scan_end = scan
            .segments
            .last()
            .map_or(SEGMENT_HEADER_BYTES, |s| s.end_offset);
        let tail_window = scan.segments.last().map_or(0, |s| s.unsynced_window);
        let tail = Tail {
            segment: segments.last().expect("at least one segment").clone(),
            offset: tail_scan_end,
            next_index: last.next(),
            window: crate::writer::window_for(config.unsynced_bytes_max, tail_window),
        };
        let report = OpenReport {
            segments: segments.len(),
            first_index: first,
            last_index: last,
            torn_tail: scan.torn_tail.clone(),
        };
        let shared = Arc::new(Shared {
            fs,
            synced: Mutex::new((tail.segment.first, tail.offset)),
            dir,
            intake: Mutex::new(Intake::default()),
            intake_ready: Condvar::new(),
            intake_stamp: AtomicU64::new(0),
            sync_jobs_open: AtomicU64::new(0),
            intake_permits: Semaphore::new(config.intake_bytes_max),
            frame_pool: FramePool::default(),
            config,
            durable: watch::Sender::new(last),
            first: AtomicU64::new(first.get()),
            segments: RwLock::new(segments),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            stats: LogStats::default(),
            syncs_running: Mutex::new(SyncsRunning::default()),
            sync_ended: Condvar::new(),
        });
        let (sync_tx, sync_rx) =
            std::sync::mpsc::sync_channel(shared.config.sync_queue_batches_max);
        let syncer_shared = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("spindle-log-syncer".into())
            .spawn(move || syncer::run(syncer_shared, sync_rx))
            .map_err(io_at(&shared.dir))?;
        let writer = Writer::new(shared.clone(), tail, versions, sync_tx);
        let handle = std::thread::Builder::new()
            .name("spindle-log-writer".into())
            .spawn(move || {
                let (shared, tail) = writer.run();
                // The writer dropped its end of the channel: the syncer finishes and exits.
                let _ = syncer.join();
                write_close_hint(&shared, tail);
            })
            .map_err(io_at(&shared.dir))?;
        Ok(FileLog {
            inner: Arc::new(Inner {
                shared,
                writer: Mutex::new(Some(handle)),
                report,
                _lock: lock,
            }),
        })
    }

    /// What recovery found when this log was opened.
    pub fn open_report(&self) -> &OpenReport {
        &self.inner.report
    }

    pub fn dir(&self) -> &Path {
        &self.inner.shared.dir
    }

    /// Append a transaction; resolves with its commit index once it is durable.
    pub async fn append(&self, txn: &Transaction) -> Result<Index, AppendError> {
        let pool = &self.inner.shared.frame_pool;
        let prepared = Prepared::new([txn], pool);
        if let Some(rejected) = prepared.txns[0].rejected.clone() {
            pool.give(prepared.frames);
            return Err(rejected);
        }
        let (reply, rx) = oneshot::channel();
        self.enqueue(prepared, Reply::One(reply)).await?;
        rx.await.map_err(|_| AppendError::Closed)?
    }

    /// Append many independent transactions in one submission. Each is its own transaction
    /// (own conditions, own commit index, own outcome, in the order given); they share the
    /// queueing and the reply, which makes pipelined clients cheap.
    ///
    /// A call whose transactions take more than the intake bound (`intake_bytes_max`) is
    /// queued as several submissions, one after the other, so it never waits for more room
    /// than the bound has.
    pub async fn append_many(&self, txns: &[Transaction]) -> Vec<Result<Index, AppendError>> {
        let shared = &self.inner.shared;
        let pool = &shared.frame_pool;
        let mut results = Vec::with_capacity(txns.len());
        // Each part's outcomes, known at once or awaited in order.
        enum Part {
            Known(Vec<Result<Index, AppendError>>),
            Queued(oneshot::Receiver<Vec<Result<Index, AppendError>>>, usize),
        }
        let mut parts = Vec::new();
        let mut rest = txns;
        while !rest.is_empty() {
            let (mut prepared, taken) =
                Prepared::new_part(rest, pool, shared.config.intake_bytes_max);
            rest = &rest[taken..];
            if !prepared.has_work() {
                pool.give(std::mem::take(&mut prepared.frames));
                let rejected = prepared.txns.into_iter();
                parts.push(Part::Known(
                    rejected
                        .map(|t| Err(t.rejected.expect("rejected")))
                        .collect(),
                ));
                continue;
            }
            let (reply, rx) = oneshot::channel();
            match self.enqueue(prepared, Reply::Many(reply)).await {
                Ok(()) => parts.push(Part::Queued(rx, taken)),
                Err(e) => {
                    // Nothing after a refused part is queued: every later outcome is this.
                    parts.push(Part::Known(vec![Err(e); taken + rest.len()]));
                    break;
                }
            }
        }
        for part in parts {
            match part {
                Part::Known(outcomes) => results.extend(outcomes),
                Part::Queued(rx, n) => results.extend(
                    rx.await
                        .unwrap_or_else(|_| vec![Err(AppendError::Closed); n]),
                ),
            }
        }
        results
    }

    /// `append` for callers without an async runtime.
    pub fn append_blocking(&self, txn: &Transaction) -> Result<Index, AppendError> {
        futures::executor::block_on(self.append(txn))
    }

    async fn enqueue(&self, prepared: Prepared, reply: Reply) -> Result<(), AppendError> {
        let shared = &self.inner.shared;
        if let Some(cause) = shared.failure() {
            return Err(AppendError::Failed { cause });
        }
        let bytes = prepared.bytes();
        let permits = u32::try_from(bytes.min(shared.config.intake_bytes_max))
            .expect("intake bound fits u32");
        shared
            .intake_permits
            .acquire_many(permits)
            .await
            .map_err(|_| AppendError::Closed)?
            .forget();
        let mut intake = shared.intake.lock();
        if intake.closed {
            drop(intake);
            shared.intake_permits.add_permits(permits as usize);
            return Err(AppendError::Closed);
        }
        intake.queued_bytes += permits as usize;
        intake.queue.push(Pending {
            prepared,
            reply,
            permits: permits as usize,
        });
        shared.intake_stamp.fetch_add(1, Ordering::Release);
        drop(intake);
        shared.intake_ready.notify_one();
        Ok(())
    }

    /// The highest index that is durable (always a commit index; 0 for an empty log).
    pub fn durable_index(&self) -> Index {
        self.inner.shared.durable_index()
    }

    /// The first retained index (records below it were truncated).
    pub fn first_index(&self) -> Index {
        self.inner.shared.first_index()
    }

    /// Read durable records from `from`, at most about `max_records` (the read always ends on
    /// a transaction boundary, so it may exceed the limit to finish a transaction).
    pub fn read(&self, from: Index, max_records: usize) -> Result<Vec<Record>, ReadError> {
        read_range(&self.inner.shared, from, max_records)
    }

    /// Resolve once the durable index is at least `index`; returns the durable index.
    pub async fn wait_for(&self, index: Index) -> Result<Index, ReadError> {
        let mut rx = self.inner.shared.durable.subscribe();
        let seen = rx
            .wait_for(|d| *d >= index)
            .await
            .map_err(|_| ReadError::Closed)?;
        Ok(*seen)
    }

    /// Delete whole segments whose records all lie below `below`. Returns the new first
    /// retained index. The version table is checkpointed first, so conditions still see
    /// the versions written by deleted records.
    pub async fn truncate_prefix(&self, below: Index) -> Result<Index, TruncateError> {
        let shared = &self.inner.shared;
        let (reply, rx) = oneshot::channel();
        {
            let mut intake = shared.intake.lock();
            if intake.closed {
                return Err(TruncateError::Closed);
            }
            intake.commands.push(Command::Truncate { below, reply });
            shared.intake_stamp.fetch_add(1, Ordering::Release);
        }
        shared.intake_ready.notify_one();
        rx.await.map_err(|_| TruncateError::Closed)?
    }

    /// Bytes of encoded transactions waiting for the writer.
    pub fn intake_queued_bytes(&self) -> usize {
        self.inner.shared.intake.lock().queued_bytes
    }

    /// Whether the writer has taken everything queued.
    pub fn intake_is_empty(&self) -> bool {
        self.inner.shared.intake.lock().queue.is_empty()
    }

    /// Counters: group commits, syncs, durable records.
    pub fn stats(&self) -> &LogStats {
        &self.inner.shared.stats
    }

    /// Why the log refuses writes, if it does.
    pub fn failure(&self) -> Option<String> {
        self.inner.shared.failure()
    }

    /// Finish queued appends and stop the writer. Later appends get `Closed`.
    pub fn close(&self) {
        stop_writer(&self.inner.shared, &self.inner.writer);
    }
}

/// After a clean close, record how far the last segment is synced (see `hint`). Skipped when
/// the log failed or does not sync; a stale hint stays true, so a failure here only costs
/// detection strength and is logged.
fn write_close_hint(shared: &Shared, tail: (Index, u64)) {
    if shared.failure().is_some() || shared.config.sync != crate::config::SyncMode::Data {
        return;
    }
    let hint = crate::hint::SyncedHint {
        segment: tail.0,
        synced_bytes: tail.1,
    };
    if let Err(e) = crate::hint::write_hint(&*shared.fs, &shared.dir, hint) {
        tracing::warn!(dir = %shared.dir.display(), error = %e, "could not write the synced-length hint");
    }
}

fn lock_dir(fs: &dyn Fs, dir: &Path) -> Result<Box<dyn DirLock>, OpenError> {
    let path = dir.join(LOCK_FILE);
    match fs.lock(&path) {
        Ok(lock) => Ok(lock),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Err(OpenError::Locked {
            dir: dir.to_path_buf(),
        }),
        Err(source) => Err(OpenError::Io { path, source }),
    }
}

/// Remove the half-made files the log leaves (`NAME.tmp` of a file it writes; the names
/// were checked first, so no other `.tmp` is here).
fn remove_temporaries(fs: &dyn Fs, dir: &Path) -> Result<(), OpenError> {
    for name in fs.list(dir).map_err(io_at(dir))? {
        if name
            .strip_suffix(".tmp")
            .is_some_and(crate::segment::is_log_file_name)
        {
            let path = dir.join(name);
            fs.remove(&path).map_err(io_at(&path))?;
        }
    }
    Ok(())
}
