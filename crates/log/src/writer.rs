//! The single writer thread: group commit.
//!
//! Loop: take everything queued (up to `group_commit_bytes_max`), check each transaction's
//! conditions in arrival order against the version table, stamp indexes and checksums into
//! one buffer, write it with one positioned write, and hand it to the syncer thread, which
//! fdatasyncs once, publishes the new durable index and answers every appender (see
//! `syncer`). While a batch syncs, the next one gathers in the intake and is staged and
//! written; nothing waits on a timer, so a lone appender waits for exactly one sync.
//!
//! A lone appender is served with as few thread handoffs as the API allows: when the syncer
//! has nothing in hand and nothing else is queued, the writer syncs and answers the batch
//! itself (handing it over would only add a wake-up to the ack), and then watches the intake
//! for `IDLE_SPIN` before it sleeps, so the appender's next transaction, which typically
//! arrives a few microseconds after its answer, does not wait for a wake-up either. Under
//! load neither happens: batches are larger or hold several submissions, and go to the
//! syncer as before. Two guards keep the shortcut to lone appenders: when appends arrived
//! while the writer synced a batch itself (several appenders taking turns with single
//! transactions, like HTTP clients), the next `INLINE_COOLDOWN_BATCHES` batches go to the
//! syncer; and a watch that saw nothing makes the writer skip the next 1, 2, 4 … 64 watches,
//! so an appender that does not come straight back costs it no CPU.
//!
//! A failed write or sync is sticky: every later append fails until the log is reopened.

use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spindle_core::{Index, RecordFlags};

use crate::config::SyncMode;
use crate::error::{AppendError, FailedCondition, TruncateError};
use crate::file_log::{SegmentHandle, Shared};
use crate::frame::seal_frame;
use crate::intake::{Command, Pending, Prepared};
use crate::segment::{create_segment, CreateSegmentError, SEGMENT_HEADER_BYTES};
use crate::syncer::{self, Replies, SyncJob, SyncMsg};
use crate::versions::VersionTable;

/// How long an idle writer watches the intake before it sleeps on the condition variable.
/// It yields the CPU while it watches, so a runnable thread on its core is not held up.
pub(crate) const IDLE_SPIN: Duration = Duration::from_micros(50);

/// The largest batch (one submission's encoded bytes) the writer syncs itself when the
/// syncer is idle; larger ones always go to the syncer.
pub(crate) const LONE_BATCH_BYTES_MAX: usize = 16 << 10;

/// The most watches skipped after watches that saw nothing (see `Writer::watch_skip`).
const WATCH_BACKOFF_MAX: u32 = 64;

/// Batches handed to the syncer after appends arrived during a sync the writer did itself.
const INLINE_COOLDOWN_BATCHES: u32 = 64;

/// Where the next batch is appended.
pub(crate) struct Tail {
    pub segment: Arc<SegmentHandle>,
    pub offset: u64,
    pub next_index: Index,
    /// The unsynced window this segment's header promises recovery.
    pub window: u64,
}

/// Where a transaction of `len` bytes goes (pure policy).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Append to the current segment.
    Here,
    /// Seal the current segment and start a new one first.
    Roll,
}

/// A transaction never spans segments; one larger than a whole segment gets a fresh segment
/// of its own, which then grows past its preallocated size.
pub(crate) fn place(offset: u64, len: u64, segment_bytes: u64) -> Placement {
    if offset + len <= segment_bytes || offset == SEGMENT_HEADER_BYTES {
        Placement::Here
    } else {
        Placement::Roll
    }
}

pub(crate) struct Writer {
    pub shared: Arc<Shared>,
    pub tail: Tail,
    pub versions: VersionTable,
    buf: Vec<u8>,
    replies: Replies,
    sync_tx: Option<SyncSender<SyncMsg>>,
    /// Records appended to the tail segment since its last sparse-index entry.
    since_sparse: u64,
    /// The last batch was a lone appender's, synced here: watch for its next transaction
    /// before sleeping.
    watch_intake: bool,
    /// Watches to skip: after a watch that saw nothing, the next 1, 2, 4 … 64 are skipped
    /// (an appender that does not come straight back, such as a network client, costs the
    /// writer no CPU); a watch that catches work resets it.
    watch_skip: u32,
    watch_backoff: u32,
    /// Batches still to hand to the syncer before the writer syncs one itself again: set
    /// when appends arrived during a sync the writer did itself (several appenders, whose
    /// batches should overlap the sync rather than wait for it).
    inline_cooldown: u32,
    /// An offset of the tail segment known to be synced: the writer keeps what it has
    /// written past it within `unsynced_bytes_max`.
    synced_floor: u64,
    /// The last roll that could not create its segment, while appends that need one are
    /// refused without trying (`ROLL_RETRY_MS`).
    roll_refused: Option<RollRefused>,
}

/// A new segment that could not be created.
struct RollRefused {
    at: Instant,
    cause: String,
    disk_full: bool,
}

impl RollRefused {
    /// What an append that needs a new segment is told meanwhile.
    fn staged(&self) -> Staged {
        Staged::NoSegment {
            cause: self.cause.clone(),
            disk_full: self.disk_full,
        }
    }
}

/// How long appends that need a new segment are refused without trying after a roll
/// failed to create one.
const ROLL_RETRY_MS: u64 = 1000;

impl Writer {
    pub fn new(
        shared: Arc<Shared>,
        tail: Tail,
        versions: VersionTable,
        sync_tx: SyncSender<SyncMsg>,
    ) -> Self {
        Writer {
            shared,
            synced_floor: tail.offset,
            tail,
            versions,
            buf: Vec::new(),
            replies: Vec::new(),
            sync_tx: Some(sync_tx),
            since_sparse: u64::MAX / 2,
            watch_intake: false,
            watch_skip: 0,
            watch_backoff: 0,
            inline_cooldown: 0,
            roll_refused: None,
        }
    }

    /// Run until the log is closed and the intake drained; then let the syncer finish.
    /// Returns the shared state and where the tail ended (segment, offset).
    pub fn run(mut self) -> (Arc<Shared>, (Index, u64)) {
        loop {
            let (batch, commands, closed) = self.take();
            if !batch.is_empty() {
                self.commit(batch);
            }
            for cmd in commands {
                self.command(cmd);
            }
            if closed {
                self.sync_tx = None;
                return (
                    self.shared.clone(),
                    (self.tail.segment.first, self.tail.offset),
                );
            }
        }
    }

    /// Wait for work and take up to one group commit's worth of it.
    fn take(&mut self) -> (Vec<Pending>, Vec<Command>, bool) {
        let shared = &self.shared;
        let mut intake = shared.intake.lock();
        let watch = std::mem::take(&mut self.watch_intake);
        if watch && intake.queue.is_empty() && intake.commands.is_empty() && !intake.closed {
            if self.watch_skip > 0 {
                self.watch_skip -= 1;
            } else {
                let stamp = shared.intake_stamp.load(Ordering::Acquire);
                drop(intake);
                let until = Instant::now() + IDLE_SPIN;
                while shared.intake_stamp.load(Ordering::Acquire) == stamp && Instant::now() < until
                {
                    std::thread::yield_now();
                }
                if shared.intake_stamp.load(Ordering::Acquire) == stamp {
                    self.watch_backoff = (self.watch_backoff * 2).clamp(1, WATCH_BACKOFF_MAX);
                    self.watch_skip = self.watch_backoff;
                } else {
                    self.watch_backoff = 0;
                }
                intake = shared.intake.lock();
            }
        }
        while intake.queue.is_empty() && intake.commands.is_empty() && !intake.closed {
            shared.intake_ready.wait(&mut intake);
        }
        let limit = shared.config.group_commit_bytes_max;
        let (batch, bytes) = if intake.queued_bytes <= limit {
            let bytes = std::mem::take(&mut intake.queued_bytes);
            (std::mem::take(&mut intake.queue), bytes)
        } else {
            let mut bytes = 0;
            let mut n = 0;
            while n < intake.queue.len() && (n == 0 || bytes + intake.queue[n].permits <= limit) {
                bytes += intake.queue[n].permits;
                n += 1;
            }
            intake.queued_bytes -= bytes;
            (intake.queue.drain(..n).collect(), bytes)
        };
        let commands = std::mem::take(&mut intake.commands);
        let closed = intake.closed && intake.queue.is_empty();
        drop(intake);
        shared.intake_permits.add_permits(bytes);
        (batch, commands, closed)
    }

    /// Stage a batch, write it into the page cache, and hand it to the syncer.
    fn commit(&mut self, batch: Vec<Pending>) {
        self.buf.clear();
        let lone = batch.len() == 1 && batch[0].prepared.bytes() <= LONE_BATCH_BYTES_MAX;
        let mut last_commit = Index::ZERO;
        for mut p in batch {
            let mut results = Vec::with_capacity(p.prepared.txns.len());
            for t in 0..p.prepared.txns.len() {
                if let Some(e) = &p.prepared.txns[t].rejected {
                    results.push(Err(e.clone()));
                    continue;
                }
                if let Some(cause) = self.shared.failure() {
                    results.push(Err(AppendError::Failed { cause }));
                    continue;
                }
                match self.stage(&mut p.prepared, t) {
                    Ok(Staged::Appended(commit)) => {
                        last_commit = commit;
                        results.push(Ok(commit));
                    }
                    Ok(Staged::Conflict(failed)) => {
                        results.push(Err(AppendError::Conflict { failed }));
                    }
                    Ok(Staged::NoSegment { cause, disk_full }) => {
                        results.push(Err(AppendError::NotWritten { cause, disk_full }));
                    }
                    Err(cause) => {
                        self.shared.fail(cause.clone());
                        results.push(Err(AppendError::Failed { cause }));
                    }
                }
            }
            // Staged (copied into the write buffer): its frames can hold the next submission.
            self.shared
                .frame_pool
                .give(std::mem::take(&mut p.prepared.frames));
            self.replies.push((p.reply, results));
        }
        if self.shared.failure().is_none() {
            if let Err(cause) = self.write_out() {
                self.shared.fail(cause);
            }
        }
        // The syncer syncs, publishes and answers; a failure set by then turns every
        // outcome of this batch into `Failed`.
        let job = SyncJob {
            segment: self.tail.segment.clone(),
            end_offset: self.tail.offset,
            last_commit,
            replies: std::mem::take(&mut self.replies),
        };
        if self.inline_cooldown > 0 {
            self.inline_cooldown -= 1;
        } else if lone
            && self.shared.config.writer_syncs_when_idle
            && self.shared.sync_jobs_open.load(Ordering::Acquire) == 0
            && self.intake_empty()
        {
            // One small submission, every earlier job complete (so order holds) and nobody
            // waiting to be staged behind this sync: doing it here saves the appender a
            // wake-up. A larger batch goes to the syncer even then, since a pipelining
            // client's next submissions arrive during its sync and are staged and written
            // meanwhile (measured: syncing 270 KB batches here cut `bench log`'s synced
            // rate from about 6.7 to 4.7-5.9 million events/s).
            let stamp = self.shared.intake_stamp.load(Ordering::Acquire);
            let jobs = vec![job];
            let failure = syncer::settle(&self.shared, &jobs);
            // Appends that arrived during this sync (before its answer, so not this
            // appender's next one) waited for it to be staged.
            let crowded = self.shared.intake_stamp.load(Ordering::Acquire) != stamp;
            if failure.is_none() {
                // Counted before the answer, so an appender that saw it can see the count.
                self.shared
                    .stats
                    .batches_synced_by_writer
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.watch_intake = failure.is_none() && !crowded;
            if crowded {
                self.inline_cooldown = INLINE_COOLDOWN_BATCHES;
            }
            syncer::answer(jobs, failure);
            return;
        }
        self.shared.sync_jobs_open.fetch_add(1, Ordering::AcqRel);
        self.send(SyncMsg::Job(job));
    }

    /// Whether no append or command is waiting for the writer.
    fn intake_empty(&self) -> bool {
        let intake = self.shared.intake.lock();
        intake.queue.is_empty() && intake.commands.is_empty()
    }

    fn send(&self, msg: SyncMsg) {
        let tx = self
            .sync_tx
            .as_ref()
            .expect("the syncer runs while the writer does");
        tx.send(msg).expect("the syncer thread exited early");
    }

    /// Wait until every batch written so far is durable (or failed).
    fn drain_syncer(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        self.send(SyncMsg::Barrier(done));
        let _ = wait.recv();
    }

    /// Check transaction `t`'s conditions and, if they hold, stamp it into the buffer.
    fn stage(&mut self, p: &mut Prepared, t: usize) -> Result<Staged, String> {
        let span = p.txns[t].clone();
        let mut failed = Vec::new();
        for c in &p.conditions[span.conditions.clone()] {
            if !self.versions.holds(&c.key_bytes, c.expected) {
                failed.push(FailedCondition {
                    key: c.key.clone(),
                    expected: c.expected,
                    actual: self.versions.get(&c.key_bytes),
                });
            }
        }
        if !failed.is_empty() {
            return Ok(Staged::Conflict(failed));
        }
        let len = span.frames.len() as u64;
        let at = self.tail.offset + self.buf.len() as u64;
        if place(at, len, self.shared.config.segment_bytes) == Placement::Roll {
            // A roll refused a moment ago is not tried again at once: each try preallocates
            // a whole segment, briefly taking the disk's last free space from other writers.
            if let Some(refused) = &self.roll_refused {
                if refused.at.elapsed() < Duration::from_millis(ROLL_RETRY_MS) {
                    return Ok(refused.staged());
                }
            }
            self.seal()?;
            match self.roll() {
                Ok(()) => self.roll_refused = None,
                Err(CreateSegmentError::Unnamed(e)) => {
                    // Nothing of this transaction was staged, nothing of the new segment
                    // is left, and the tail is intact and synced: refuse this one and keep
                    // the log (appends that fit the tail go on; a roll is tried again).
                    let refused = RollRefused {
                        at: Instant::now(),
                        disk_full: matches!(
                            e.kind(),
                            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                        ),
                        cause: format!(
                            "creating the log segment at {} in {}: {e}",
                            self.tail.next_index,
                            self.shared.dir.display()
                        ),
                    };
                    let staged = refused.staged();
                    self.roll_refused = Some(refused);
                    return Ok(staged);
                }
                Err(CreateSegmentError::Named(e)) => {
                    return Err(format!(
                        "syncing {} after creating the log segment at {}: {e}",
                        self.shared.dir.display(),
                        self.tail.next_index
                    ))
                }
            }
        }
        let stride = self.shared.config.sparse_index_stride_records;
        let mut index = self.tail.next_index;
        for r in &p.records[span.records.clone()] {
            let frame_range = r.frame_start as usize..r.frame_end as usize;
            seal_frame(&mut p.frames[frame_range.clone()], index);
            self.make_room(frame_range.len() as u64)?;
            // The payload's flags byte sits just before its key.
            let deleted = p.frames[r.key_start as usize - 1] & RecordFlags::TOMBSTONE != 0;
            self.versions.set(
                &p.frames[r.key_start as usize..r.key_end as usize],
                index,
                deleted,
            );
            if self.since_sparse >= stride {
                let offset = self.tail.offset + self.buf.len() as u64;
                self.tail.segment.sparse.lock().push((index, offset));
                self.since_sparse = 0;
            }
            self.since_sparse += 1;
            let len = frame_range.len() as u64;
            self.buf.extend_from_slice(&p.frames[frame_range]);
            if len > self.tail.window {
                self.sync_here()?;
            }
            index = index.next();
        }
        let commit = index.prev();
        self.tail.next_index = index;
        Ok(Staged::Appended(commit))
    }

    /// Keep the bytes written but not synced within `unsynced_bytes_max` once a frame of
    /// `len` bytes is added: if the syncer has not synced far enough, write what is staged
    /// and sync here (at a frame boundary; a transaction cut there is a torn tail).
    fn make_room(&mut self, len: u64) -> Result<(), String> {
        if self.shared.config.sync != SyncMode::Data {
            return Ok(());
        }
        let window = self.tail.window;
        let end = self.tail.offset + self.buf.len() as u64 + len;
        if end <= self.synced_floor + window {
            return Ok(());
        }
        let synced = self.shared.synced_offset(self.tail.segment.first);
        self.synced_floor = self.synced_floor.max(synced);
        if end <= self.synced_floor + window {
            return Ok(());
        }
        self.sync_here()
    }

    /// Write what is staged and sync it on the writer thread.
    fn sync_here(&mut self) -> Result<(), String> {
        if self.shared.config.sync != SyncMode::Data {
            return Ok(());
        }
        self.write_out()?;
        syncer::sync(&self.shared, &self.tail.segment)?;
        self.synced_floor = self.tail.offset;
        Ok(())
    }

    /// Write the buffer at the tail (into the page cache; the syncer makes it durable).
    fn write_out(&mut self) -> Result<(), String> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let seg = &self.tail.segment;
        fail::fail_point!("log::write", |_| Err("injected write failure".to_owned()));
        seg.file
            .write_all_at(&self.buf, self.tail.offset)
            .map_err(|e| format!("write to {}: {e}", seg.path.display()))?;
        self.tail.offset += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Seal the tail segment: its bytes synced here, so a sync job only ever needs the
    /// segment its batch ended in. A failure here fails the log.
    fn seal(&mut self) -> Result<(), String> {
        self.write_out()?;
        if self.shared.config.sync == SyncMode::Data {
            syncer::sync(&self.shared, &self.tail.segment)?;
            self.synced_floor = self.tail.offset;
        }
        Ok(())
    }

    /// Start the next segment at the next index, after `seal`. A failure (a full disk,
    /// say) leaves the sealed tail as the tail: nothing is lost or in doubt.
    fn roll(&mut self) -> Result<(), CreateSegmentError> {
        let dir = &self.shared.dir;
        let first = self.tail.next_index;
        let config = &self.shared.config;
        let file = create_segment(
            &*self.shared.fs,
            dir,
            first,
            config.segment_bytes,
            config.header_unsynced_window(),
        )?;
        let path = dir.join(crate::segment::segment_file_name(first));
        let segment = Arc::new(SegmentHandle::new(first, path, file));
        self.shared.segments.write().push(segment.clone());
        self.tail = Tail {
            segment,
            offset: SEGMENT_HEADER_BYTES,
            next_index: first,
            window: config.unsynced_bytes_max,
        };
        self.since_sparse = u64::MAX / 2;
        self.synced_floor = SEGMENT_HEADER_BYTES;
        Ok(())
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Truncate { below, reply } => {
                let _ = reply.send(self.truncate(below));
            }
        }
    }

    /// Checkpoint the version table, then delete whole segments below `below`, oldest first.
    fn truncate(&mut self, below: Index) -> Result<Index, TruncateError> {
        // The checkpoint must not claim records that are not durable yet.
        self.drain_syncer();
        if let Some(cause) = self.shared.failure() {
            return Err(TruncateError::Failed { cause });
        }
        let doomed: Vec<Arc<SegmentHandle>> = {
            let segs = self.shared.segments.read();
            segs.windows(2)
                .take_while(|w| w[1].first <= below)
                .map(|w| w[0].clone())
                .collect()
        };
        if doomed.is_empty() {
            return Ok(self.shared.first_index());
        }
        let dir = &self.shared.dir;
        let durable = self.shared.durable_index();
        let fs = &*self.shared.fs;
        if let Err(e) = self.versions.write_checkpoint(fs, dir, durable) {
            let cause = format!("write version checkpoint in {}: {e}", dir.display());
            self.shared.fail(cause.clone());
            return Err(TruncateError::Failed { cause });
        }
        for seg in &doomed {
            // Readers holding the handle keep reading the unlinked file; new reads see
            // `Truncated` once the list is updated.
            {
                let mut segs = self.shared.segments.write();
                segs.remove(0);
                self.shared
                    .first
                    .store(segs[0].first.get(), Ordering::Release);
            }
            if let Err(e) = fs.remove(&seg.path) {
                let cause = format!("delete {}: {e}", seg.path.display());
                self.shared.fail(cause.clone());
                return Err(TruncateError::Failed { cause });
            }
        }
        if let Err(e) = fs.sync_dir(dir) {
            let cause = format!("sync {}: {e}", dir.display());
            self.shared.fail(cause.clone());
            return Err(TruncateError::Failed { cause });
        }
        Ok(self.shared.first_index())
    }
}

/// The window the writer keeps for a segment whose header declares `declared` (0: unknown,
/// so keep the configured one), under a configured window of `configured` (pure policy).
pub(crate) fn window_for(configured: u64, declared: u64) -> u64 {
    if declared == 0 {
        configured
    } else {
        declared.min(configured)
    }
}

enum Staged {
    Appended(Index),
    Conflict(Vec<FailedCondition>),
    /// The transaction needed a new segment that could not be created; nothing of it was
    /// written and the log goes on.
    NoSegment {
        cause: String,
        disk_full: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_rolls_only_when_full_and_never_leaves_a_segment_empty() {
        let h = SEGMENT_HEADER_BYTES;
        assert_eq!(place(h, 100, 1000), Placement::Here);
        assert_eq!(place(900, 100, 1000), Placement::Here);
        assert_eq!(place(901, 100, 1000), Placement::Roll);
        assert_eq!(
            place(h, 5000, 1000),
            Placement::Here,
            "oversized txn gets its own segment"
        );
    }
}
