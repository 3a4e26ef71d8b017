//! A rider: one iteration request served by the carousel (or by a dedicated iterator, for
//! comparison). It hands out chunks of whole frames and ends with the end frame.
//!
//! On the shared scan a rider reads one ring slot at a time and takes its group's chunk
//! whole (the same `Bytes`), trims a copy (a narrower cut or range than the chunk's), or
//! skips it. When the scanner has demoted it, the rider reads alone from exactly where it
//! was, one chunk at a time, with one RocksDB iterator kept on a reader thread of its own
//! while it stays demoted (`alone`), and rejoins the ring at a chunk that starts where it
//! stands (policy::demoted_decision). Its position on the circle only grows, so no item is
//! lost or repeated across the switches.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Serialize;
use spindle_core::{Index, Partition};

use super::alone::AloneReader;
use super::encode::{chunk_use, trim, ChunkUse, ScanPos};
use super::policy::{demoted_decision, DemotedDecision, RejoinView};
use super::{Inner, RiderShared, MODE_SHARED};
use crate::disk::DiskView;
use crate::error::IterError;
use crate::frame::{encode_end, EndFrame, END_FRAME_BYTES};
use crate::iterate::{Checked, IterRequest};

/// Counters of one rider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RiderStats {
    /// Version frames delivered.
    pub frames: u64,
    /// Frame bytes delivered, the end frame included.
    pub bytes: u64,
    /// Chunks delivered, the end frame's included.
    pub chunks: u64,
    /// Chunks handed on as the shared bytes (no copy).
    pub chunks_shared: u64,
    /// Shared chunks copied because part of them was above the cut or outside the range.
    pub chunks_trimmed: u64,
    /// Chunks read by the rider's own iterator (demoted, or dedicated).
    pub chunks_alone: u64,
    pub demotions: u64,
    pub rejoins: u64,
    /// RocksDB iterators opened to read alone: one per demotion (kept until the rider
    /// rejoins), one per large item it read itself, or the dedicated iteration's one.
    pub iterators_opened: u64,
    /// Items too large to share (`CarouselConfig::item_shared_bytes_max`) that the rider
    /// read itself.
    pub large_items: u64,
    /// Empty chunks returned after `CarouselConfig::idle_chunk_ms` without a frame for the
    /// rider (not in `chunks`).
    pub idle_chunks: u64,
}

/// One iteration served by a carousel: `next_chunk` until `None`. Dropping it leaves the
/// carousel at once.
pub struct Rider {
    inner: Arc<Inner>,
    shared: Arc<RiderShared>,
    driver: Driver,
    phase: Phase,
    stats: RiderStats,
    /// When `next_chunk` last returned a chunk (see `CarouselConfig::idle_chunk_ms`).
    returned_at: Instant,
}

impl std::fmt::Debug for Rider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rider")
            .field("id", &self.shared.id)
            .field("cut", &self.cut())
            .field("range", &self.range())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

enum Driver {
    Carousel(Ride),
    /// Chunks from a worker thread that runs an `Iteration`.
    Dedicated(Pieces),
}

/// Chunks from a worker thread that runs an `Iteration` (`spawn_fill`): (bytes, frames,
/// last). A piece is empty only if it is the last, or if the worker was given an idle bound
/// and read that long without a frame (a dedicated rider).
struct Pieces {
    rx: Receiver<Result<(Bytes, u64, bool), IterError>>,
    /// Held while the pieces are wanted: the worker stops once nobody holds it.
    _wanted: Arc<()>,
}

impl Pieces {
    /// Blocking: the next piece; `worker` names the thread in the error if it stopped.
    fn next(&self, worker: &str) -> Result<(Bytes, u64, bool), IterError> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(IterError::CarouselFailed {
                reason: format!("the {worker} thread stopped"),
            })
        })
    }
}

/// What a worker thread iterates.
enum Source {
    /// A whole iteration (a dedicated rider).
    Request(IterRequest),
    /// One item, by its prefix, with a rider's filters and cut, and no end frame.
    Item(Checked, Vec<u8>),
}

/// A carousel rider's place on the circle.
struct Ride {
    /// Everything in `[boarding start, pos)` was delivered; `None` until admitted.
    pos: Option<ScanPos>,
    /// Where its revolution ends.
    target: ScanPos,
    group: u64,
    /// While demoted: the reader thread that keeps its iterator across chunks.
    alone: Option<AloneReader>,
    /// An item too large to share being read by a worker thread of its own: its pieces
    /// come before anything else.
    large: Option<Pieces>,
    large_items: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// The revolution is complete: the end frame is next.
    Ending,
    Done,
}

/// What one step produced.
enum Step {
    Chunk {
        bytes: Bytes,
        frames: u64,
        how: How,
    },
    /// Progress without frames (a skipped chunk, boarding, a mode switch).
    Nothing,
    /// The revolution is complete.
    End,
}

#[derive(Clone, Copy)]
enum How {
    Shared,
    Trimmed,
    Alone,
}

impl Rider {
    pub(crate) fn carousel(inner: Arc<Inner>, shared: Arc<RiderShared>) -> Rider {
        let ride = Ride {
            pos: None,
            target: ScanPos::default(),
            group: 0,
            alone: None,
            large: None,
            large_items: 0,
        };
        Rider {
            inner,
            shared,
            driver: Driver::Carousel(ride),
            phase: Phase::Running,
            stats: RiderStats::default(),
            returned_at: Instant::now(),
        }
    }

    /// A rider fed by a worker thread running a dedicated `Iteration` of `req` (whose cut
    /// is already fixed).
    pub(crate) fn dedicated(
        inner: Arc<Inner>,
        shared: Arc<RiderShared>,
        req: IterRequest,
    ) -> Result<Rider, IterError> {
        let spawned = spawn_fill(
            inner.view.clone(),
            Source::Request(req),
            inner.config.chunk_bytes,
            Some(Duration::from_millis(inner.config.idle_chunk_ms)),
            shared.clone(),
            "dedicated-rider",
        );
        let rx = match spawned {
            Ok(rx) => rx,
            Err(e) => {
                inner.leave(&shared);
                return Err(e);
            }
        };
        Ok(Rider {
            inner,
            shared,
            driver: Driver::Dedicated(rx),
            phase: Phase::Running,
            stats: RiderStats::default(),
            returned_at: Instant::now(),
        })
    }

    /// The id this rider has in `CarouselStatus`.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The cut: the consumer continues by tailing the log from `cut + 1`.
    pub fn cut(&self) -> Index {
        self.shared.checked.cut
    }

    /// The served range: the overlap of the request and the view.
    pub fn range(&self) -> Partition {
        self.shared.checked.range
    }

    pub fn stats(&self) -> RiderStats {
        let mut stats = self.stats;
        stats.demotions = self.shared.demotions.load(Ordering::Relaxed);
        stats.rejoins = self.shared.rejoins.load(Ordering::Relaxed);
        stats.iterators_opened = self.shared.iterators_opened.load(Ordering::Relaxed);
        if let Driver::Carousel(ride) = &self.driver {
            stats.large_items = ride.large_items;
        }
        stats
    }

    /// Blocking: the next chunk of whole frames in the docs/iteration.md encoding. The
    /// last chunk ends with the end frame (cut, range, frames); then `None`. After an
    /// error, `None`. A chunk may be empty: one comes after `idle_chunk_ms` without a frame
    /// for this rider, so that its consumer knows it is alive.
    pub fn next_chunk(&mut self) -> Option<Result<Bytes, IterError>> {
        let chunk = self.next_chunk_inner();
        self.returned_at = Instant::now();
        chunk
    }

    fn next_chunk_inner(&mut self) -> Option<Result<Bytes, IterError>> {
        let idle_max = Duration::from_millis(self.inner.config.idle_chunk_ms);
        loop {
            match self.phase {
                Phase::Done => return None,
                Phase::Ending => {
                    self.phase = Phase::Done;
                    self.inner.leave(&self.shared);
                    let mut buf = Vec::with_capacity(END_FRAME_BYTES);
                    let end = EndFrame {
                        cut: self.cut(),
                        range: self.range(),
                        frames: self.stats.frames,
                    };
                    encode_end(&mut buf, &end);
                    self.count(buf.len(), 0);
                    return Some(Ok(Bytes::from(buf)));
                }
                Phase::Running => {}
            }
            let step = match &mut self.driver {
                Driver::Carousel(ride) => ride.step(&self.inner, &self.shared),
                Driver::Dedicated(pieces) => {
                    let got = pieces.next("dedicated iterator's");
                    match got {
                        Ok((bytes, frames, last)) => {
                            if last {
                                self.phase = Phase::Done;
                                self.inner.leave(&self.shared);
                            }
                            if bytes.is_empty() && !last {
                                self.stats.idle_chunks += 1;
                            } else {
                                self.stats.chunks_alone += 1;
                            }
                            self.stats.frames += frames;
                            self.count(bytes.len(), frames);
                            return Some(Ok(bytes));
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            match step {
                Ok(Step::Chunk { bytes, frames, how }) => {
                    match how {
                        How::Shared => self.stats.chunks_shared += 1,
                        How::Trimmed => self.stats.chunks_trimmed += 1,
                        How::Alone => self.stats.chunks_alone += 1,
                    }
                    self.stats.frames += frames;
                    self.count(bytes.len(), frames);
                    return Some(Ok(bytes));
                }
                Ok(Step::Nothing) => {
                    if self.returned_at.elapsed() >= idle_max {
                        self.stats.idle_chunks += 1;
                        return Some(Ok(Bytes::new()));
                    }
                }
                Ok(Step::End) => self.phase = Phase::Ending,
                Err(e) => {
                    self.phase = Phase::Done;
                    self.inner.leave(&self.shared);
                    return Some(Err(e));
                }
            }
        }
    }

    fn count(&mut self, bytes: usize, frames: u64) {
        self.stats.chunks += 1;
        self.stats.bytes += bytes as u64;
        self.shared.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.shared.frames.fetch_add(frames, Ordering::Relaxed);
    }
}

impl Drop for Rider {
    fn drop(&mut self) {
        if self.phase != Phase::Done {
            self.phase = Phase::Done;
            self.inner.leave(&self.shared);
        }
    }
}

impl Ride {
    fn step(&mut self, inner: &Inner, rider: &Arc<RiderShared>) -> Result<Step, IterError> {
        if let Some(e) = rider.failure() {
            return Err(e);
        }
        if let Some(pieces) = &self.large {
            let (bytes, frames, last) = pieces.next("large item's")?;
            if last {
                self.large = None;
            }
            return Ok(if frames == 0 {
                Step::Nothing
            } else {
                Step::Chunk {
                    bytes,
                    frames,
                    how: How::Alone,
                }
            });
        }
        let Some(pos) = &self.pos else {
            let boarding = await_boarding(rider)?;
            self.pos = Some(boarding.start);
            self.target = boarding.target;
            self.group = boarding.group;
            return Ok(Step::Nothing);
        };
        if *pos >= self.target {
            self.alone = None;
            return Ok(Step::End);
        }
        if rider.mode() == MODE_SHARED {
            self.ride_shared(inner, rider)
        } else {
            self.ride_alone(inner, rider)
        }
    }

    /// Take the next ring slot and this rider's part of its group's chunk.
    fn ride_shared(&mut self, inner: &Inner, rider: &Arc<RiderShared>) -> Result<Step, IterError> {
        let event = {
            let mut slot = rider.slot.lock();
            let Some(consumer) = slot.as_mut() else {
                // Demoted since the mode was read: read alone from here.
                return Ok(Step::Nothing);
            };
            let batch = consumer
                .wait_batch()
                .map_err(|closed| IterError::CarouselFailed {
                    reason: closed.to_string(),
                })?;
            let event = batch
                .with_event(0, |slot| slot.lock().clone())
                .ok_or_else(|| IterError::CarouselFailed {
                    reason: "the scanner released a chunk before this rider read it".into(),
                })?;
            let end = batch.end();
            drop(batch);
            rider.position.store(end, Ordering::SeqCst);
            event
        };
        inner.nudge();
        if let Some(reason) = &event.failure {
            return Err(IterError::CarouselFailed {
                reason: reason.clone(),
            });
        }
        let pos = self.pos.as_mut().expect("riding after boarding");
        assert_eq!(event.start, *pos, "a rider's slots must be contiguous");
        *pos = event.end.clone();
        if let Some(prefix) = &event.large_item {
            self.read_large(inner, rider, prefix)?;
            return Ok(Step::Nothing);
        }
        let c = &rider.checked;
        let chunk = event
            .chunks
            .iter()
            .find(|chunk| chunk.group == self.group)
            .expect("the scanner encodes the group of every rider aboard");
        assert!(
            chunk.meta.cut >= c.cut && (!c.latest_only || chunk.meta.cut == c.cut),
            "a chunk encoded to {} cannot serve cut {}",
            chunk.meta.cut,
            c.cut
        );
        Ok(match chunk_use(&chunk.meta, c.range, c.cut) {
            ChunkUse::Skip => Step::Nothing,
            ChunkUse::Whole => Step::Chunk {
                bytes: chunk.bytes.clone(),
                frames: chunk.meta.frames,
                how: How::Shared,
            },
            ChunkUse::Trim => {
                let (buf, frames) =
                    trim(&chunk.bytes, c.range, c.cut).map_err(|e| IterError::CarouselFailed {
                        reason: format!("a shared chunk did not decode: {e}"),
                    })?;
                if frames == 0 {
                    Step::Nothing
                } else {
                    Step::Chunk {
                        bytes: Bytes::from(buf),
                        frames,
                        how: How::Trimmed,
                    }
                }
            }
        })
    }

    /// Demoted: rejoin if the policy says so, else read one chunk alone.
    fn ride_alone(&mut self, inner: &Inner, rider: &Arc<RiderShared>) -> Result<Step, IterError> {
        let pos = self.pos.clone().expect("riding after boarding");
        let (view, ahead_start) = self.rejoin_view(inner, &pos);
        let bound = match demoted_decision(view, inner.config.rider_lag_chunks_max) {
            DemotedDecision::Rejoin { seq } => {
                if rejoin(inner, rider, seq) {
                    self.alone = None;
                    return Ok(Step::Nothing);
                }
                self.target.clone()
            }
            DemotedDecision::CatchUp { .. } => ahead_start.expect("an ahead chunk has a start"),
            DemotedDecision::Alone => self.target.clone(),
        };
        let bound = bound.min(self.target.clone());
        let reader = match &mut self.alone {
            Some(reader) => reader,
            None => self.alone.insert(AloneReader::start(
                inner.view.clone(),
                rider.clone(),
                (inner.config.chunk_bytes, inner.config.item_shared_bytes_max),
            )?),
        };
        let chunk = reader.read(pos.clone(), bound)?;
        assert!(chunk.next > pos, "reading alone must advance");
        self.pos = Some(chunk.next);
        if let Some(prefix) = &chunk.large_item {
            self.read_large(inner, rider, prefix)?;
            return Ok(Step::Nothing);
        }
        Ok(if chunk.frames == 0 {
            Step::Nothing
        } else {
            Step::Chunk {
                bytes: Bytes::from(chunk.buf),
                frames: chunk.frames,
                how: How::Alone,
            }
        })
    }

    /// Start reading the item `prefix`, too large to share, on a worker thread (its pieces
    /// are the rider's next chunks), unless the rider wants nothing of it.
    fn read_large(
        &mut self,
        inner: &Inner,
        rider: &Arc<RiderShared>,
        prefix: &[u8],
    ) -> Result<(), IterError> {
        let c = &rider.checked;
        if !c.wants_item(prefix) {
            return Ok(());
        }
        self.large_items += 1;
        self.large = Some(spawn_fill(
            inner.view.clone(),
            Source::Item(c.clone(), prefix.to_vec()),
            inner.config.chunk_bytes,
            None,
            rider.clone(),
            "large-item-rider",
        )?);
        Ok(())
    }

    /// What the policy needs: the ring's bounds and the chunks of this rider's group that
    /// start at or after its position (and the start of the first one after it).
    fn rejoin_view(&self, inner: &Inner, pos: &ScanPos) -> (RejoinView, Option<ScanPos>) {
        let st = inner.state.lock();
        let mut view = RejoinView {
            cursor: inner.ring.cursor(),
            oldest_joinable: inner.ring.oldest_joinable(),
            aligned: None,
            ahead: None,
        };
        let mut ahead_start = None;
        let oldest = view.oldest_joinable.max(st.released_below);
        for e in st.recent.iter() {
            if e.seq < oldest || !e.groups.contains(&self.group) {
                continue;
            }
            if e.start == *pos && view.aligned.is_none() {
                view.aligned = Some(e.seq);
            } else if e.start > *pos && e.start < self.target && view.ahead.is_none() {
                view.ahead = Some(e.seq);
                ahead_start = Some(e.start.clone());
            }
        }
        (view, ahead_start)
    }
}

/// Stored bytes a worker reads (times `chunk_bytes`) between checks that its rider still
/// wants its pieces, even when its filter keeps few versions (a latest-only rider over a
/// long history, a `from` near the head): one whose rider went away stops within that.
const WORKER_SCAN_CHUNKS_MAX: u64 = 16;

/// Run an iteration of `source` on a thread of its own, which hands out chunks of about
/// `chunk_bytes`, two in flight (it reads the next while the caller sends one).
fn spawn_fill(
    view: Arc<DiskView>,
    source: Source,
    chunk_bytes: usize,
    idle: Option<Duration>,
    counters: Arc<RiderShared>,
    name: &str,
) -> Result<Pieces, IterError> {
    let (tx, rx) = sync_channel(2);
    let wanted = Arc::new(());
    let still_wanted = Arc::downgrade(&wanted);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let opened = match &source {
                Source::Request(req) => view.iterate(req),
                Source::Item(checked, prefix) => Ok(view.iterate_item(checked, prefix)),
            };
            let mut it = match opened {
                Ok(it) => {
                    counters.iterators_opened.fetch_add(1, Ordering::Relaxed);
                    it
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let scan_max = WORKER_SCAN_CHUNKS_MAX.saturating_mul(chunk_bytes as u64);
            loop {
                let mut buf = Vec::with_capacity(super::chunk_capacity_bytes(chunk_bytes));
                let before = it.stats().frames;
                let mut done = false;
                let started = Instant::now();
                while !done && buf.len() < chunk_bytes {
                    if still_wanted.strong_count() == 0 {
                        return;
                    }
                    let room = chunk_bytes - buf.len();
                    match it.fill_scanning(&mut buf, room, scan_max) {
                        Ok(d) => done = d,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                    // A sparse filter may read long without a frame: after `idle` (checked
                    // after each bounded read, so every chunk moves on), send what there
                    // is, perhaps nothing, so that the consumer hears from it.
                    if idle.is_some_and(|idle| started.elapsed() >= idle) {
                        break;
                    }
                }
                let frames = it.stats().frames - before;
                if tx.send(Ok((Bytes::from(buf), frames, done))).is_err() || done {
                    return;
                }
            }
        })
        .map_err(|e| IterError::CarouselFailed {
            reason: format!("cannot start a {name} thread: {e}"),
        })?;
    Ok(Pieces {
        rx,
        _wanted: wanted,
    })
}

/// Wait until the scanner has admitted the rider.
fn await_boarding(rider: &RiderShared) -> Result<super::Boarding, IterError> {
    let mut boarding = rider.boarding.lock();
    loop {
        if let Some(b) = boarding.as_ref() {
            return Ok(b.clone());
        }
        if let Some(e) = rider.failure() {
            return Err(e);
        }
        rider.admitted.wait(&mut boarding);
    }
}

/// Join the ring at `seq`; `false` if its slot was rewritten meanwhile. Under the state
/// lock, so the scanner sees the rider either demoted or riding, and wakes if it waited for
/// a shared rider.
fn rejoin(inner: &Inner, rider: &RiderShared, seq: u64) -> bool {
    let st = inner.state.lock();
    if seq < st.released_below {
        return false;
    }
    let Ok(mut consumer) = inner.ring.join_at(&format!("rider {}", rider.id), seq) else {
        return false;
    };
    consumer.set_batch_events_max(1);
    *rider.slot.lock() = Some(consumer);
    rider.position.store(seq, Ordering::SeqCst);
    rider.set_mode(MODE_SHARED);
    rider.rejoins.fetch_add(1, Ordering::Relaxed);
    inner.wake.notify_all();
    true
}
