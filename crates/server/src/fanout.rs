//! Log-tail fan-out (DESIGN.md §9): one tailer reads the log and publishes each batch of
//! records once into a ring; every view follower is a consumer of that ring, so N views
//! cost one log read and one decode, not N, and a slow view holds the tailer back (ring
//! backpressure) instead of making it buffer without bound.
//!
//! A follower may join late (a Memory View after its boot): it joins the ring first, then
//! reads from the log whatever lies between its applied index and the first batch it will
//! see, so nothing published before it joined is missed. Records at or below a view's
//! applied index are skipped by the view's `apply`.

//!
//! Fault model: a read error is classified (`recovery`). An I/O error may be transient and
//! is retried with backoff, at most `TAIL_RETRIES_MAX` times in a row; a corrupt frame, a
//! truncated position or a closed log are permanent. When the tailer gives up, it records
//! why in `TailerHealth`: status and metrics show it, and every read waiting for an applied
//! index fails at once with the reason instead of timing out. Appends go on being
//! acknowledged (they are durable in the log); the views catch up after a restart.
//!
//! Shutdown: when `stop` turns true the tailer keeps publishing up to the durable index of
//! that moment (so the views reach it), then stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use spindle_core::{Index, Record};
use spindle_log::{ReadError, Tail};

use crate::node_log::NodeLog;
use spindle_ring::{Producer, Ring, RingBuilder, WaitStrategy};
use spindle_view::follow::Applier;
use spindle_view::ViewError;
use tokio::sync::watch;

/// One published batch: whole transactions, in log order.
pub type Slot = Option<Arc<[Record]>>;

/// Batches the tail ring holds (a power of two).
pub const TAIL_RING_SLOTS: usize = 256;
/// Records the tailer asks the log for per read (reads end on a commit).
pub const TAIL_BATCH_RECORDS_MAX: usize = 4096;
/// Attempts after a transient read error, in a row, before the tailer gives up.
pub const TAIL_RETRIES_MAX: u32 = 6;
/// Pause before the first retry; it doubles with every further attempt.
pub const TAIL_RETRY_MS_FIRST: u64 = 20;
/// Longest pause between two attempts.
pub const TAIL_RETRY_MS_MAX: u64 = 1_000;

/// The tailer thread; it ends with the error that stopped it, if any.
pub type Tailer = JoinHandle<Result<(), ReadError>>;

/// Whether the log tailer still feeds the views; shared by the tailer, status and readers.
#[derive(Debug)]
pub struct TailerHealth {
    /// Why the tailer stopped for good (`None` while it runs or after a clean stop).
    failed: watch::Sender<Option<String>>,
    /// Read errors the tailer met, retried or not.
    pub errors: AtomicU64,
    /// Reads it attempted again after a transient error.
    pub retries: AtomicU64,
}

impl Default for TailerHealth {
    fn default() -> Self {
        TailerHealth {
            failed: watch::Sender::new(None),
            errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
        }
    }
}

impl TailerHealth {
    /// Why the tailer stopped for good, if it has.
    pub fn failure(&self) -> Option<String> {
        self.failed.borrow().clone()
    }

    /// A receiver that holds the failure once there is one.
    pub fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.failed.subscribe()
    }

    fn fail(&self, reason: String) {
        tracing::error!("the log tailer stopped; every view is stalled: {reason}");
        self.failed.send_replace(Some(reason));
    }
}

/// What to do about a read error (a pure policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Read again after this pause.
    Retry { after: Duration },
    /// The error is permanent, or transient ones kept coming: stop.
    GiveUp,
}

/// The recovery for `error` met on the `attempt`-th read in a row that failed (1-based).
pub fn recovery(error: &ReadError, attempt: u32) -> Recovery {
    match error {
        ReadError::Io { .. } if attempt <= TAIL_RETRIES_MAX => {
            let shift = (attempt - 1).min(16);
            let ms = TAIL_RETRY_MS_FIRST
                .saturating_mul(1 << shift)
                .min(TAIL_RETRY_MS_MAX);
            Recovery::Retry {
                after: Duration::from_millis(ms),
            }
        }
        ReadError::Io { .. }
        | ReadError::Corrupt { .. }
        | ReadError::Truncated { .. }
        | ReadError::Closed => Recovery::GiveUp,
    }
}

/// Start the tailer thread from `from`. When `stop` turns true it publishes up to the
/// durable index of that moment and stops; dropping its producer then closes the ring, and
/// followers return once they have drained it.
pub fn start(
    log: NodeLog,
    from: Index,
    stop: watch::Receiver<bool>,
    health: Arc<TailerHealth>,
) -> std::io::Result<(Ring<Slot>, Tailer)> {
    let (producer, ring) = RingBuilder::new(TAIL_RING_SLOTS)
        .name("log-tail")
        .wait(WaitStrategy::Blocking)
        .build::<Slot>()
        .expect("TAIL_RING_SLOTS is a power of two");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = std::thread::Builder::new()
        .name("log-tailer".into())
        .spawn(move || rt.block_on(tail_into(log, from, producer, stop, &health)))?;
    Ok((ring, handle))
}

/// An error injected by the `fanout::read` failpoint (`return(io)` or `return(corrupt)`).
fn injected() -> Option<ReadError> {
    fail::fail_point!("fanout::read", |arg| Some(match arg.as_deref() {
        Some("corrupt") => ReadError::Corrupt {
            file: "injected".into(),
            offset: 0,
            reason: "injected by the fanout::read failpoint".into(),
        },
        _ => ReadError::Io {
            file: "injected".into(),
            source: Arc::new(std::io::Error::other(
                "injected by the fanout::read failpoint"
            )),
        },
    }));
    None
}

async fn tail_into(
    log: NodeLog,
    from: Index,
    mut producer: Producer<Slot>,
    mut stop: watch::Receiver<bool>,
    health: &TailerHealth,
) -> Result<(), ReadError> {
    let mut tail = Tail::new(log.clone(), from, TAIL_BATCH_RECORDS_MAX);
    let mut failed_reads = 0u32;
    // Set when stopping: publish up to this index, then stop.
    let mut drain_to: Option<Index> = None;
    loop {
        if drain_to.is_none() && *stop.borrow_and_update() {
            drain_to = Some(log.durable_index());
        }
        if let Some(target) = drain_to {
            if tail.position() > target {
                return Ok(());
            }
        } else {
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        drain_to = Some(log.durable_index());
                    }
                    continue;
                }
                ready = log.wait_for(tail.position()) => {
                    if let Err(e) = ready {
                        health.fail(e.to_string());
                        return Err(e);
                    }
                }
            }
        }
        let batch = match injected() {
            Some(e) => Err(e),
            None => tail.next_batch().await,
        };
        match batch {
            Ok(records) => {
                failed_reads = 0;
                let records: Arc<[Record]> = records.into();
                let mut claim = producer.claim(1);
                claim.with_slot(0, |slot| *slot = Some(records));
                claim.publish();
            }
            Err(e) => {
                failed_reads += 1;
                health.errors.fetch_add(1, Ordering::Relaxed);
                match recovery(&e, failed_reads) {
                    Recovery::GiveUp => {
                        let next = tail.position();
                        health.fail(if failed_reads > 1 {
                            format!(
                                "reading index {next}: {e} (gave up after {failed_reads} attempts)"
                            )
                        } else {
                            format!("reading index {next}: {e}")
                        });
                        return Err(e);
                    }
                    Recovery::Retry { after } => {
                        tracing::warn!(
                            "log tailer: {e}; reading again in {} ms (attempt {failed_reads} \
                             of {TAIL_RETRIES_MAX})",
                            after.as_millis()
                        );
                        health.retries.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(after).await;
                    }
                }
            }
        }
    }
}

/// Pause between two attempts to write to a view whose disk is full. RocksDB itself looks
/// for free space every 5 s, so polling faster would only repeat its refusal.
pub const DISK_FULL_RETRY_MS: u64 = 1_000;

/// What a follower tells its view's owner besides progress: a pause and its end.
pub trait FollowEvents {
    /// A new applied index.
    fn applied(&self, index: Index);
    /// The view cannot write (`reason`) and the follower retries.
    fn paused(&self, reason: String);
    /// A write succeeded after a pause.
    fn resumed(&self);
}

/// A bare closure hears applied indexes only (pauses are logged, not reported).
impl<F: Fn(Index)> FollowEvents for F {
    fn applied(&self, index: Index) {
        self(index)
    }
    fn paused(&self, _reason: String) {}
    fn resumed(&self) {}
}

/// Feed `view` from the ring until it closes. `events` hears every new applied index and
/// every pause. The consumer joins before the log catch-up, so no batch can fall between
/// the two.
///
/// A full disk does not stop the follower: the same records are applied again every
/// `DISK_FULL_RETRY_MS` until the write succeeds (the tailer waits meanwhile — ring
/// backpressure — and appends stay acknowledged in the log), or until the ring closes
/// because the node stops. Every other error stops it.
pub fn follow<V: Applier + ?Sized>(
    name: &str,
    view: &V,
    log: &NodeLog,
    ring: &Ring<Slot>,
    events: &impl FollowEvents,
) -> Result<(), ViewError> {
    let mut consumer = ring.join(name);
    let apply = |records: &[Record]| apply_retrying(view, records, ring, events);
    catch_up(view, log, log.durable_index(), &apply)?;
    events.applied(view.applied_index());
    loop {
        let Ok(batch) = consumer.wait_batch() else {
            return Ok(());
        };
        for (_, slot) in batch.iter() {
            let records = slot.as_ref().expect("published slots hold a batch");
            let first = records
                .first()
                .expect("the log never yields an empty batch");
            if first.index > view.applied_index().next() {
                catch_up(view, log, first.index.prev(), &apply)?;
            }
            apply(records)?;
        }
        drop(batch);
        events.applied(view.applied_index());
    }
}

/// `view.apply(records)`, again and again while the view's disk is full.
fn apply_retrying<V: Applier + ?Sized>(
    view: &V,
    records: &[Record],
    ring: &Ring<Slot>,
    events: &impl FollowEvents,
) -> Result<(), ViewError> {
    let mut paused = false;
    loop {
        match view.apply(records) {
            Ok(_) => {
                if paused {
                    tracing::info!("the view writes again at index {}", view.applied_index());
                    events.resumed();
                }
                return Ok(());
            }
            Err(e) if e.is_disk_full() && !ring.is_closed() => {
                if !paused {
                    tracing::warn!("{e}; retrying every {DISK_FULL_RETRY_MS} ms");
                    events.paused(format!(
                        "the disk is full ({e}); retrying every {DISK_FULL_RETRY_MS} ms"
                    ));
                    paused = true;
                }
                // What was written before the failure stays applied; `events.applied`
                // waits for the batch's end (for a booted view it means "caught up").
                std::thread::sleep(Duration::from_millis(DISK_FULL_RETRY_MS));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Apply records from the log until the view has applied `target` (or the log ends).
fn catch_up<V: Applier + ?Sized>(
    view: &V,
    log: &NodeLog,
    target: Index,
    apply: &impl Fn(&[Record]) -> Result<(), ViewError>,
) -> Result<(), ViewError> {
    while view.applied_index() < target {
        let next = view.applied_index().next();
        let records = log
            .read(next, TAIL_BATCH_RECORDS_MAX)
            .map_err(|e| match e {
                ReadError::Truncated { first } => ViewError::LogTruncated { next, first },
                other => ViewError::Log(other),
            })?;
        if records.is_empty() {
            return Ok(());
        }
        apply(&records)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> ReadError {
        ReadError::Io {
            file: "f".into(),
            source: Arc::new(std::io::Error::other("eio")),
        }
    }

    #[test]
    fn transient_errors_are_retried_with_growing_pauses_then_given_up() {
        let mut last = Duration::ZERO;
        for attempt in 1..=TAIL_RETRIES_MAX {
            let Recovery::Retry { after } = recovery(&io(), attempt) else {
                panic!("attempt {attempt} of an I/O error was not retried");
            };
            assert!(after >= last && after <= Duration::from_millis(TAIL_RETRY_MS_MAX));
            last = after;
        }
        assert_eq!(recovery(&io(), TAIL_RETRIES_MAX + 1), Recovery::GiveUp);
        assert_eq!(recovery(&io(), u32::MAX), Recovery::GiveUp);
    }

    #[test]
    fn corruption_truncation_and_a_closed_log_are_permanent() {
        let permanent = [
            ReadError::Truncated {
                first: Index::new(9),
            },
            ReadError::Corrupt {
                file: "f".into(),
                offset: 3,
                reason: "crc".into(),
            },
            ReadError::Closed,
        ];
        for e in permanent {
            assert_eq!(recovery(&e, 1), Recovery::GiveUp, "{e}");
        }
    }
}
