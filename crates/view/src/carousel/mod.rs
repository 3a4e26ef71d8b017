//! The Carousel (DESIGN.md §5, docs/iteration.md "Carousel"): one scanner thread per Disk
//! View walks the view's key space in a circle and hands chunks of frames to every rider
//! aboard through a ring (`spindle-ring`), so one disk scan serves many iterations.
//!
//! Riders board at the next chunk boundary (an item boundary) with their cut fixed at
//! boarding, and leave after one revolution. A chunk is encoded once per filter group and
//! the same `Bytes` goes to every rider of the group. The scanner stays within
//! `rider_lag_chunks_max` chunks of every rider; a rider at that bound that holds back one
//! keeping pace is moved onto its own iterator (kept across chunks on a reader thread of
//! its own, `alone`) from exactly where it was, and rejoins the ring when it catches up; it
//! is never ejected (`policy`). The scanner runs only while someone rides the shared scan,
//! and stops when the last rider leaves.
//!
//! Locks: `lifecycle` (start and stop of the scanner thread) before `state` before a
//! rider's `slot`. The scanner only `try_lock`s a slot: a rider holds its slot while it
//! takes a chunk (and while it waits for one at the head of the ring, where it is never
//! demoted), so the scanner never waits for a rider's lock.

mod alone;
mod encode;
pub mod policy;
mod rider;
mod scanner;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;
use spindle_core::{Index, Partition};
use spindle_ring::{Consumer, Producer, Ring, RingBuilder};

use crate::disk::DiskView;
use crate::error::IterError;
use crate::iterate::{Checked, IterRequest};
use encode::{GroupKey, ScanPos};
use scanner::Event;

pub use rider::{Rider, RiderStats};

/// Default frame bytes per shared chunk. Each chunk costs every rider a wakeup and a send,
/// so larger chunks make each rider cheaper (docs/benchmarks/carousel.md, run 6).
pub const CHUNK_BYTES_DEFAULT: usize = 1 << 20;
/// Default ring size: chunks in flight between the scanner and its slowest rider.
pub const RING_SLOTS_DEFAULT: usize = 128;
/// Default demotion bound.
pub const RIDER_LAG_CHUNKS_MAX_DEFAULT: u64 = 64;
/// Default bound on distinct filter groups.
pub const GROUPS_MAX_DEFAULT: usize = 16;
/// Default bound on one item's stored bytes in a shared chunk.
pub const ITEM_SHARED_BYTES_MAX_DEFAULT: usize = 4 << 20;
/// Default `idle_chunk_ms`.
pub const IDLE_CHUNK_MS_DEFAULT: u64 = 1000;

/// Largest buffer reserved up front for one chunk: a chunk may pass `chunk_bytes` by one
/// item, and a huge `chunk_bytes` must not reserve memory no chunk will use.
const CHUNK_PREALLOC_BYTES_MAX: usize = 1 << 20;

/// Bytes to reserve for a chunk of about `chunk_bytes`: a chunk closes after the item that
/// passes `chunk_bytes`, so the slack holds a typical last item without a reallocation (a
/// copy of the whole chunk).
fn chunk_capacity_bytes(chunk_bytes: usize) -> usize {
    chunk_bytes.min(CHUNK_PREALLOC_BYTES_MAX) + (64 << 10)
}

/// The carousel's bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CarouselConfig {
    /// Frame bytes per shared chunk (a chunk closes at the first item boundary past it, or
    /// after as many stored bytes were read).
    pub chunk_bytes: usize,
    /// Chunks the ring holds (a power of two, at least 2). Memory: up to
    /// `ring_slots × groups × chunk_bytes`.
    pub ring_slots: usize,
    /// The scanner runs at most this many chunks ahead of any rider; a rider that far
    /// behind while another keeps pace is demoted to its own iterator (2 ..= ring_slots − 1,
    /// so a ring slot is always free when the scanner publishes; see `policy`).
    pub rider_lag_chunks_max: u64,
    /// Distinct filter groups the scanner encodes for at once (each adds a chunk per ring
    /// slot); boarding with one more filter is refused (`CarouselGroupsFull`). Riders with
    /// an equal filter share a group; dedicated riders use none.
    pub groups_max: usize,
    /// An item whose stored versions take more bytes than this is not put in a shared
    /// chunk: the scanner passes over it in a chunk of its own that holds no frames, and
    /// each rider reads that item with an iterator of its own, in pieces of about
    /// `chunk_bytes`. So a chunk holds at most about `chunk_bytes` plus this many bytes
    /// however many versions one item has (every version is kept), and the scanner never
    /// buffers more of one item than this.
    pub item_shared_bytes_max: usize,
    /// A rider that has passed over this long without a frame for it (the scan is in a
    /// part of the view outside its range, or its filter keeps nothing there) returns an
    /// empty chunk, so that a remote consumer hears from it well within its wait for the
    /// next message (a boot from a narrow range of a large view would otherwise look lost).
    pub idle_chunk_ms: u64,
}

impl Default for CarouselConfig {
    fn default() -> Self {
        CarouselConfig {
            chunk_bytes: CHUNK_BYTES_DEFAULT,
            ring_slots: RING_SLOTS_DEFAULT,
            rider_lag_chunks_max: RIDER_LAG_CHUNKS_MAX_DEFAULT,
            groups_max: GROUPS_MAX_DEFAULT,
            item_shared_bytes_max: ITEM_SHARED_BYTES_MAX_DEFAULT,
            idle_chunk_ms: IDLE_CHUNK_MS_DEFAULT,
        }
    }
}

impl CarouselConfig {
    /// Refuse bounds that cannot work, saying which and why.
    pub fn check(&self) -> Result<(), IterError> {
        let refuse = |reason: String| Err(IterError::CarouselConfig { reason });
        if self.chunk_bytes == 0 {
            return refuse("chunk_bytes is 0; use at least 1 (default 1 MiB)".into());
        }
        if self.ring_slots < 2 || !self.ring_slots.is_power_of_two() {
            return refuse(format!(
                "ring_slots {} is not a power of two of at least 2",
                self.ring_slots
            ));
        }
        if self.groups_max == 0 {
            return refuse("groups_max is 0; use at least 1".into());
        }
        if self.item_shared_bytes_max == 0 {
            return refuse("item_shared_bytes_max is 0; use at least 1 (default 4 MiB)".into());
        }
        let slots = self.ring_slots as u64;
        if self.rider_lag_chunks_max < 2 || self.rider_lag_chunks_max >= slots {
            return refuse(format!(
                "rider_lag_chunks_max {} must be between 2 and ring_slots - 1 = {} (raise \
                 ring_slots for a larger bound)",
                self.rider_lag_chunks_max,
                slots - 1
            ));
        }
        Ok(())
    }
}

/// How a rider is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RiderMode {
    /// On the shared scan (or waiting to board it at the next chunk boundary).
    Shared,
    /// Moved onto its own iterator after falling behind; may rejoin.
    Demoted,
    /// A dedicated iterator from the start (`Carousel::dedicated`).
    Dedicated,
}

/// One rider in `CarouselStatus`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RiderStatus {
    pub id: u64,
    pub cut: Index,
    pub range: Partition,
    pub mode: RiderMode,
    /// Version frames delivered so far.
    pub frames: u64,
    /// Frame bytes delivered so far.
    pub bytes: u64,
    pub demotions: u64,
    pub rejoins: u64,
    /// Where in the hash space the rider boarded the shared scan, and in which lap (absent
    /// until the scanner admits it, and for dedicated riders). It leaves at the same place
    /// one lap later.
    pub boarded_at: Option<u64>,
    pub boarded_lap: Option<u64>,
}

/// A carousel at one moment, for the status page and metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CarouselStatus {
    /// Whether the scanner thread is running.
    pub running: bool,
    /// Revolutions the scanner completed.
    pub laps: u64,
    /// Chunks encoded (one per filter group per ring slot).
    pub chunks_encoded: u64,
    /// Items the scanner passed over as too large to share (`item_shared_bytes_max`), once
    /// per lap: each rider read them itself.
    pub large_items: u64,
    /// Ring slots published.
    pub ring_cursor: u64,
    pub ring_slots: u64,
    /// Distinct filter groups the scanner encodes for.
    pub groups: usize,
    /// The Disk View's range `[lo, hi)`: the circle the scan goes round.
    pub range: [u64; 2],
    /// Where the scan is: the partition hash of the last chunk's end, and its lap.
    pub scan_at: u64,
    pub scan_lap: u64,
    pub riders: Vec<RiderStatus>,
}

/// The shared scan of one Disk View. `Send + Sync`; riders keep it alive.
pub struct Carousel {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Carousel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Carousel")
            .field("view", &self.inner.view)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// One published chunk set. The scanner empties a slot once every rider aboard has passed
/// it (`scanner::release_passed`), so a chunk's memory is freed, and reused, while it is
/// still in the cache instead of a ring's length later.
pub(crate) type Slot = Mutex<Option<Arc<Event>>>;

pub(crate) struct Inner {
    view: Arc<DiskView>,
    config: CarouselConfig,
    ring: Ring<Slot>,
    state: Mutex<State>,
    /// The scanner waits here while nobody rides the shared scan, or for the pack to read.
    wake: Condvar,
    /// The scanner is deciding or waiting: riders that read a chunk must wake it.
    scanner_waiting: AtomicBool,
    /// The scanner thread; held while it is started or stopped.
    lifecycle: Mutex<Option<JoinHandle<()>>>,
    running: AtomicBool,
    laps: AtomicU64,
    chunks_encoded: AtomicU64,
    large_items: AtomicU64,
}

pub(crate) struct State {
    /// The ring's one producer: the scanner thread holds it while it runs.
    producer: Option<Producer<Slot>>,
    /// Where the scan continues (kept across scanner runs, so the circle goes on).
    pos: ScanPos,
    riders: BTreeMap<u64, Arc<RiderShared>>,
    next_rider_id: u64,
    groups: BTreeMap<GroupKey, u64>,
    next_group_id: u64,
    /// Start and groups of the chunks still in the ring, oldest first: where a demoted
    /// rider may rejoin.
    recent: VecDeque<EventMeta>,
    /// Ring slots below this sequence were emptied (every rider aboard had passed them):
    /// nobody may join the ring there.
    released_below: u64,
    /// Set when the last rider leaves: the scanner exits at its next boundary.
    stop: bool,
    /// A scanner thread runs and will admit riders: set when one is started, cleared under
    /// this lock by the scanner when it decides to exit (stopped, or failing every rider
    /// aboard), so a rider boarding after that decision starts a new one.
    scanner_live: bool,
}

#[derive(Debug)]
pub(crate) struct EventMeta {
    seq: u64,
    start: ScanPos,
    groups: Vec<u64>,
}

const MODE_BOARDING: u8 = 0;
const MODE_SHARED: u8 = 1;
const MODE_DEMOTED: u8 = 2;
const MODE_DEDICATED: u8 = 3;

/// Where a rider boarded and where it leaves.
#[derive(Clone, Debug)]
pub(crate) struct Boarding {
    start: ScanPos,
    target: ScanPos,
    group: u64,
}

/// What the scanner, the status page and the rider's own thread share about a rider.
pub(crate) struct RiderShared {
    id: u64,
    checked: Checked,
    group_key: GroupKey,
    mode: AtomicU8,
    /// Set by the scanner when it admits the rider.
    boarding: Mutex<Option<Boarding>>,
    admitted: Condvar,
    /// The rider's place in the ring while it rides the shared scan.
    slot: Mutex<Option<Consumer<Slot>>>,
    /// The next ring sequence the rider reads (its lag is `cursor - position`).
    position: AtomicU64,
    /// Why the shared scan failed, once it has.
    failure: Mutex<Option<String>>,
    frames: AtomicU64,
    bytes: AtomicU64,
    demotions: AtomicU64,
    rejoins: AtomicU64,
    iterators_opened: AtomicU64,
}

impl RiderShared {
    fn new(id: u64, checked: Checked, mode: u8) -> Self {
        RiderShared {
            id,
            group_key: GroupKey::of(&checked),
            checked,
            mode: AtomicU8::new(mode),
            boarding: Mutex::new(None),
            admitted: Condvar::new(),
            slot: Mutex::new(None),
            position: AtomicU64::new(0),
            failure: Mutex::new(None),
            frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            demotions: AtomicU64::new(0),
            rejoins: AtomicU64::new(0),
            iterators_opened: AtomicU64::new(0),
        }
    }

    fn mode(&self) -> u8 {
        self.mode.load(Ordering::Acquire)
    }

    fn set_mode(&self, mode: u8) {
        self.mode.store(mode, Ordering::Release);
    }

    /// Whether the rider needs the scanner (a dedicated rider does not).
    fn rides_carousel(&self) -> bool {
        self.mode() != MODE_DEDICATED
    }

    fn fail(&self, reason: &str) {
        self.failure.lock().get_or_insert_with(|| reason.to_owned());
        drop(self.boarding.lock());
        self.admitted.notify_all();
    }

    fn failure(&self) -> Option<IterError> {
        self.failure
            .lock()
            .as_ref()
            .map(|reason| IterError::CarouselFailed {
                reason: reason.clone(),
            })
    }

    fn status(&self) -> RiderStatus {
        let mode = match self.mode() {
            MODE_DEMOTED => RiderMode::Demoted,
            MODE_DEDICATED => RiderMode::Dedicated,
            _ => RiderMode::Shared,
        };
        let boarded = self.boarding.lock().clone();
        RiderStatus {
            id: self.id,
            cut: self.checked.cut,
            range: self.checked.range,
            mode,
            frames: self.frames.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            demotions: self.demotions.load(Ordering::Relaxed),
            rejoins: self.rejoins.load(Ordering::Relaxed),
            boarded_at: boarded
                .as_ref()
                .map(|b| b.start.hash_or(self.checked.range.lo())),
            boarded_lap: boarded.map(|b| b.start.lap),
        }
    }
}

impl Carousel {
    /// A carousel over `view`. Panics if `config` does not pass `CarouselConfig::check`
    /// (use `try_new` for configuration that comes from a user).
    pub fn new(view: Arc<DiskView>, config: CarouselConfig) -> Self {
        match Self::try_new(view, config) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// A carousel over `view`, or why its configuration cannot work.
    pub fn try_new(view: Arc<DiskView>, config: CarouselConfig) -> Result<Self, IterError> {
        config.check()?;
        let (producer, ring) = RingBuilder::new(config.ring_slots)
            .name(format!(
                "carousel [{}, {})",
                view.partition().lo(),
                view.partition().hi()
            ))
            .build::<Slot>()
            .map_err(|e| IterError::CarouselConfig {
                reason: e.to_string(),
            })?;
        let state = State {
            producer: Some(producer),
            pos: ScanPos::default(),
            riders: BTreeMap::new(),
            next_rider_id: 1,
            groups: BTreeMap::new(),
            next_group_id: 1,
            recent: VecDeque::new(),
            released_below: 0,
            stop: false,
            scanner_live: false,
        };
        let inner = Inner {
            view,
            config,
            ring,
            state: Mutex::new(state),
            wake: Condvar::new(),
            scanner_waiting: AtomicBool::new(false),
            lifecycle: Mutex::new(None),
            running: AtomicBool::new(false),
            laps: AtomicU64::new(0),
            chunks_encoded: AtomicU64::new(0),
            large_items: AtomicU64::new(0),
        };
        Ok(Carousel {
            inner: Arc::new(inner),
        })
    }

    pub fn view(&self) -> &Arc<DiskView> {
        &self.inner.view
    }

    pub fn config(&self) -> &CarouselConfig {
        &self.inner.config
    }

    /// Check the request (`IterRequest::check`: refusals before any data), fix the cut
    /// (the view's applied index now, or `req.to`) and board the shared scan at the next
    /// item boundary. Starts the scanner thread if none runs.
    pub fn board(&self, req: &IterRequest) -> Result<Rider, IterError> {
        let mut riders = self.board_all(std::slice::from_ref(req))?;
        Ok(riders.pop().expect("one rider per request"))
    }

    /// Board several riders at the same chunk boundary: riders with equal filters then
    /// share every chunk of their revolution. All requests are checked first; if one is
    /// refused, none boards.
    pub fn board_all(&self, reqs: &[IterRequest]) -> Result<Vec<Rider>, IterError> {
        let view = &self.inner.view;
        let applied = view.applied_index();
        let checked = reqs
            .iter()
            .map(|req| req.check(view.partition(), applied))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lifecycle = self.inner.lifecycle.lock();
        let (shared, start): (Vec<Arc<RiderShared>>, bool) = {
            let mut st = self.inner.state.lock();
            let groups = groups_after_boarding(&st, &checked);
            if groups > self.inner.config.groups_max {
                return Err(IterError::CarouselGroupsFull {
                    groups: self.inner.config.groups_max,
                });
            }
            let shared = checked
                .into_iter()
                .map(|checked| {
                    let id = st.next_rider_id;
                    st.next_rider_id += 1;
                    let shared = Arc::new(RiderShared::new(id, checked, MODE_BOARDING));
                    st.riders.insert(id, shared.clone());
                    shared
                })
                .collect();
            st.stop = false;
            // A scanner that decided to exit (or panicked) admits nobody: start another.
            let start = !st.scanner_live || lifecycle.as_ref().is_none_or(JoinHandle::is_finished);
            st.scanner_live = true;
            self.inner.wake.notify_all();
            (shared, start)
        };
        if start {
            if let Some(old) = lifecycle.take() {
                join_scanner(old);
            }
            self.inner.running.store(true, Ordering::Release);
            let inner = self.inner.clone();
            let handle = std::thread::Builder::new()
                .name("carousel-scanner".into())
                .spawn(move || scanner::run(&inner))
                .map_err(|e| IterError::CarouselFailed {
                    reason: format!("cannot start the scanner thread: {e}"),
                });
            match handle {
                Ok(h) => *lifecycle = Some(h),
                Err(e) => {
                    self.inner.running.store(false, Ordering::Release);
                    let mut st = self.inner.state.lock();
                    st.scanner_live = false;
                    for rider in &shared {
                        st.riders.remove(&rider.id);
                    }
                    return Err(e);
                }
            }
        }
        drop(lifecycle);
        Ok(shared
            .into_iter()
            .map(|s| Rider::carousel(self.inner.clone(), s))
            .collect())
    }

    /// The same answer from a dedicated iterator (no carousel), for comparison. It shows
    /// in `status` with mode `dedicated`.
    pub fn dedicated(&self, req: &IterRequest) -> Result<Rider, IterError> {
        let view = &self.inner.view;
        let checked = req.check(view.partition(), view.applied_index())?;
        let shared = {
            let mut st = self.inner.state.lock();
            let id = st.next_rider_id;
            st.next_rider_id += 1;
            let shared = Arc::new(RiderShared::new(id, checked, MODE_DEDICATED));
            st.riders.insert(id, shared.clone());
            shared
        };
        // The worker iterates with the cut fixed here, whatever the view applies meanwhile.
        let mut req = req.clone();
        req.to = Some(shared.checked.cut);
        Rider::dedicated(self.inner.clone(), shared, req)
    }

    pub fn status(&self) -> CarouselStatus {
        let range = self.inner.view.partition();
        let st = self.inner.state.lock();
        CarouselStatus {
            running: self.inner.running.load(Ordering::Acquire),
            laps: self.inner.laps.load(Ordering::Relaxed),
            chunks_encoded: self.inner.chunks_encoded.load(Ordering::Relaxed),
            large_items: self.inner.large_items.load(Ordering::Relaxed),
            ring_cursor: self.inner.ring.cursor(),
            ring_slots: self.inner.ring.capacity(),
            groups: st.groups.len(),
            range: [range.lo(), range.hi()],
            scan_at: st.pos.hash_or(range.lo()),
            scan_lap: st.pos.lap,
            riders: st.riders.values().map(|r| r.status()).collect(),
        }
    }
}

impl Inner {
    /// A rider read a chunk: if the scanner is deciding or waiting for the pack, wake it.
    /// (The rider stored its position first; the scanner sets the flag before it reads
    /// positions, both SeqCst, so one of them sees the other.)
    fn nudge(&self) {
        if self.scanner_waiting.load(Ordering::SeqCst) {
            let _st = self.state.lock();
            self.wake.notify_all();
        }
    }

    /// A rider leaves: it stops gating the scanner, leaves the status list, and if it was
    /// the last rider of the carousel the scanner is stopped (and joined) before this
    /// returns.
    fn leave(&self, rider: &RiderShared) {
        drop(rider.slot.lock().take());
        let mut lifecycle = self.lifecycle.lock();
        let last = {
            let mut st = self.state.lock();
            st.riders.remove(&rider.id);
            let last = !st.riders.values().any(|r| r.rides_carousel());
            st.stop |= last;
            // A waiting scanner may have waited for this rider.
            self.wake.notify_all();
            last
        };
        if last && rider.rides_carousel() {
            if let Some(handle) = lifecycle.take() {
                join_scanner(handle);
            }
        }
        // Admitted between the first take and the removal: drop that place too.
        drop(rider.slot.lock().take());
    }
}

/// Distinct filter groups of the riders on (or waiting for, or demoted from) the shared
/// scan once `boarding` joins them.
fn groups_after_boarding(st: &State, boarding: &[Checked]) -> usize {
    let mut keys: std::collections::BTreeSet<GroupKey> = st
        .riders
        .values()
        .filter(|r| r.rides_carousel())
        .map(|r| r.group_key.clone())
        .collect();
    keys.extend(boarding.iter().map(GroupKey::of));
    keys.len()
}

fn join_scanner(handle: JoinHandle<()>) {
    if handle.join().is_err() {
        tracing::error!("the carousel scanner thread panicked");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carousel_is_shared_across_threads_and_a_rider_moves_to_one() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Carousel>();
        send::<Rider>();
    }

    #[test]
    fn the_default_configuration_is_valid() {
        CarouselConfig::default().check().unwrap();
        let c = CarouselConfig::default();
        assert!(c.rider_lag_chunks_max < c.ring_slots as u64);
    }
}
