//! The syncer thread: the second stage of group commit.
//!
//! The writer stages a batch and writes it into the page cache, then hands the syncer a job
//! (the segment, the batch's last commit index, the outcomes to deliver) and goes straight on
//! to stage the next batch. The syncer takes every job queued, fdatasyncs each distinct
//! segment once, publishes the new durable index, and only then answers the appenders. So the
//! sync of batch N overlaps the staging and writing of batch N+1, and no append is answered
//! before its bytes are synced. Jobs are handled in order, so the durable index only grows.
//!
//! A failed sync is sticky: the log is marked failed, and this job and every later one are
//! answered `Failed` (their outcome is unknown) instead of being acknowledged.

use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use spindle_core::Index;

use crate::config::SyncMode;
use crate::error::AppendError;
use crate::file_log::{SegmentHandle, Shared};
use crate::intake::Reply;

/// Outcomes waiting for a sync.
pub(crate) type Replies = Vec<(Reply, Vec<Result<Index, AppendError>>)>;

/// One written batch waiting for its sync.
pub(crate) struct SyncJob {
    /// The segment the batch ended in (earlier segments were synced when they were sealed).
    pub segment: Arc<SegmentHandle>,
    /// The batch's last commit index, `ZERO` if it committed nothing (all conflicts).
    pub last_commit: Index,
    /// Where the written bytes end in `segment`.
    pub end_offset: u64,
    pub replies: Replies,
}

/// Work for the syncer.
pub(crate) enum SyncMsg {
    Job(SyncJob),
    /// Answered once every earlier job is durable (or failed).
    Barrier(std::sync::mpsc::Sender<()>),
}

/// Run until the writer hangs up, then finish what is queued.
pub(crate) fn run(shared: Arc<Shared>, rx: Receiver<SyncMsg>) {
    let mut jobs = Vec::new();
    let mut barriers = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                SyncMsg::Job(job) => jobs.push(job),
                SyncMsg::Barrier(done) => barriers.push(done),
            }
            next = rx.try_recv().ok();
        }
        let n = jobs.len() as u64;
        complete(&shared, std::mem::take(&mut jobs));
        shared.sync_jobs_open.fetch_sub(n, Ordering::AcqRel);
        for done in barriers.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Sync every segment the jobs touched, publish, answer. Jobs must come in the order they
/// were written, after every earlier job has completed.
fn complete(shared: &Shared, jobs: Vec<SyncJob>) {
    let failure = settle(shared, &jobs);
    answer(jobs, failure);
}

/// The first half of `complete`: sync every segment the jobs touched and publish the new
/// durable index. Returns the log's failure, if it has one (then nothing was published).
pub(crate) fn settle(shared: &Shared, jobs: &[SyncJob]) -> Option<String> {
    if jobs.is_empty() {
        return shared.failure();
    }
    if shared.failure().is_none() && shared.config.sync == SyncMode::Data {
        let mut last: Option<&Arc<SegmentHandle>> = None;
        for job in jobs {
            if last.is_some_and(|s| Arc::ptr_eq(s, &job.segment)) {
                continue;
            }
            last = Some(&job.segment);
            if let Err(cause) = sync(shared, &job.segment) {
                shared.fail(cause);
                break;
            }
        }
    }
    shared
        .stats
        .batches
        .fetch_add(jobs.len() as u64, Ordering::Relaxed);
    let failure = shared.failure();
    if failure.is_none() {
        if let Some(job) = jobs.last() {
            shared.note_synced(job.segment.first, job.end_offset);
        }
        let durable = jobs
            .iter()
            .map(|j| j.last_commit)
            .max()
            .unwrap_or(Index::ZERO);
        let before = shared.durable_index();
        if durable > before {
            shared
                .stats
                .records
                .fetch_add(durable.get() - before.get(), Ordering::Relaxed);
            shared.publish_durable(durable);
        }
    }
    failure
}

/// The second half of `complete`: answer every appender of the jobs; with a failure, every
/// outcome that would have been a success is `Failed` instead, and so is every conflict:
/// its conditions were checked against versions staged by batches that may never have
/// become durable, so the versions it names may not exist.
pub(crate) fn answer(jobs: Vec<SyncJob>, failure: Option<String>) {
    for job in jobs {
        for (reply, mut results) in job.replies {
            if let Some(cause) = &failure {
                for r in &mut results {
                    if matches!(r, Ok(_) | Err(AppendError::Conflict { .. })) {
                        *r = Err(AppendError::Failed {
                            cause: cause.clone(),
                        });
                    }
                }
            }
            reply.send(results);
        }
    }
}

/// fdatasync `seg`. The writer thread (sealing a segment, or keeping the unsynced window)
/// and the syncer thread may sync the same segment at once, and Linux reports a write-back
/// error to only one sync per open file: the other returns success although pages it waited
/// for never reached the disk. So a failure is recorded before this sync counts as ended,
/// and a success counts only once every sync that began before it returned has ended
/// without a failure being recorded.
pub(crate) fn sync(shared: &Shared, seg: &SegmentHandle) -> Result<(), String> {
    let ticket = {
        let mut syncs = shared.syncs_running.lock();
        syncs.began += 1;
        let ticket = syncs.began;
        syncs.running.insert(ticket);
        ticket
    };
    let result = sync_data(shared, seg);
    if let Err(cause) = &result {
        shared.fail(cause.clone());
    }
    let mut syncs = shared.syncs_running.lock();
    syncs.running.remove(&ticket);
    shared.sync_ended.notify_all();
    let overlapped_up_to = syncs.began;
    if syncs.running.range(..=overlapped_up_to).next().is_some() {
        shared.stats.sync_overlaps.fetch_add(1, Ordering::Relaxed);
        while syncs.running.range(..=overlapped_up_to).next().is_some() {
            shared.sync_ended.wait(&mut syncs);
        }
    }
    drop(syncs);
    result?;
    match shared.failure() {
        Some(cause) => Err(cause),
        None => Ok(()),
    }
}

fn sync_data(shared: &Shared, seg: &SegmentHandle) -> Result<(), String> {
    fail::fail_point!(
        "log::sync",
        |_| Err("injected fdatasync failure".to_owned())
    );
    let started = std::time::Instant::now();
    seg.file
        .sync_data()
        .map_err(|e| format!("fdatasync {}: {e}", seg.path.display()))?;
    shared.stats.sync_latency.record(started.elapsed());
    shared.stats.syncs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
