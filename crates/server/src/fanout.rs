//! Log-tail fan-out (DESIGN.md §9): one tailer reads the log and publishes each batch of
//! records once into a ring; every view follower is a consumer of that ring, so N views
//! cost one log read and one decode, not N, and a slow view holds the tailer back (ring
//! backpressure) instead of making it buffer without bound.
//!
//! A follower may join late (a Memory View after its boot): it joins the ring first, then
//! reads from the log whatever lies between its applied index and the first batch it will
//! see, so nothing published before it joined is missed. Records at or below a view's
//! applied index are skipped by the view's `apply`.

use std::sync::Arc;
use std::thread::JoinHandle;

use spindle_core::{Index, Record};
use spindle_log::{FileLog, ReadError, Tail};
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

/// The tailer thread; it ends with the error that stopped it, if any.
pub type Tailer = JoinHandle<Result<(), ReadError>>;

/// Start the tailer thread from `from`. It stops when `stop` turns true; dropping its
/// producer then closes the ring, and followers return once they have drained it.
pub fn start(
    log: Arc<FileLog>,
    from: Index,
    stop: watch::Receiver<bool>,
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
        .spawn(move || tail_into(&rt, log, from, producer, stop))?;
    Ok((ring, handle))
}

fn tail_into(
    rt: &tokio::runtime::Runtime,
    log: Arc<FileLog>,
    from: Index,
    mut producer: Producer<Slot>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ReadError> {
    rt.block_on(async move {
        let mut tail = Tail::new(log, from, TAIL_BATCH_RECORDS_MAX);
        loop {
            if *stop.borrow_and_update() {
                return Ok(());
            }
            tokio::select! {
                changed = stop.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                batch = tail.next_batch() => {
                    let records: Arc<[Record]> = batch?.into();
                    let mut claim = producer.claim(1);
                    claim.with_slot(0, |slot| *slot = Some(records));
                    claim.publish();
                }
            }
        }
    })
}

/// Feed `view` from the ring until it closes. `on_applied` hears every new applied index.
/// The consumer joins before the log catch-up, so no batch can fall between the two.
pub fn follow<V: Applier + ?Sized>(
    name: &str,
    view: &V,
    log: &FileLog,
    ring: &Ring<Slot>,
    on_applied: impl Fn(Index),
) -> Result<(), ViewError> {
    let mut consumer = ring.join(name);
    catch_up(view, log, log.durable_index())?;
    on_applied(view.applied_index());
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
                catch_up(view, log, first.index.prev())?;
            }
            view.apply(records)?;
        }
        drop(batch);
        on_applied(view.applied_index());
    }
}

/// Apply records from the log until the view has applied `target` (or the log ends).
fn catch_up<V: Applier + ?Sized>(view: &V, log: &FileLog, target: Index) -> Result<(), ViewError> {
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
        view.apply(&records)?;
    }
    Ok(())
}
