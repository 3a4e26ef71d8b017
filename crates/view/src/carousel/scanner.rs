//! The carousel's scanner thread: at each chunk boundary it admits boarding riders, paces
//! itself to its riders (waits for the pack, or demotes a rider that holds back one that
//! keeps pace: policy::shared_decision), and plans the next chunk (filter
//! groups, their cuts, and where the chunk must end so that every rider's revolution ends
//! on a boundary); then it reads whole items from RocksDB, encodes one chunk per group and
//! publishes them in one ring slot.
//!
//! Consistency: a RocksDB iterator sees the database as of its creation (or last refresh).
//! The iterator is refreshed whenever a group's cut is above the applied index it is known
//! to see, and at every lap start (so it never pins old table files for long).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use rocksdb::{DBRawIteratorWithThreadMode, DB};
use spindle_core::{Index, ItemKind};
use spindle_ring::Producer;

use super::encode::{skip_item, ChunkBuilder, ChunkMeta, Filter, ItemBuf, ScanPos};
use super::policy::{shared_decision, SharedDecision};
use super::{Boarding, EventMeta, Inner, RiderShared, Slot, State};
use super::{MODE_BOARDING, MODE_DEMOTED, MODE_SHARED};
use crate::error::IterError;
use crate::iterate::{scan_options, Kinds};
use crate::keys;

/// One ring slot: the chunks of one stretch `[start, end)` of the circle, one per group.
#[derive(Debug)]
pub(crate) struct Event {
    pub start: ScanPos,
    pub end: ScanPos,
    pub chunks: Vec<GroupChunk>,
    /// The stretch is one item too large to share (`item_shared_bytes_max`), given by its
    /// prefix: `chunks` is empty and every rider reads the item itself.
    pub large_item: Option<Vec<u8>>,
    /// The scan failed here: riders that read this slot stop with this error.
    pub failure: Option<String>,
}

/// One group's frames of an event.
#[derive(Debug)]
pub(crate) struct GroupChunk {
    pub group: u64,
    pub bytes: Bytes,
    pub meta: ChunkMeta,
}

/// What the next chunk must hold and where it must end.
#[derive(Debug)]
struct Plan {
    start: ScanPos,
    /// A rider's revolution ends here in this lap: the chunk ends before this item prefix.
    stop: Option<Vec<u8>>,
    groups: Vec<(u64, Filter)>,
    cut_max: Index,
    kinds: Kinds,
}

/// The thread's body: scan until told to stop; on an error, fail every rider aboard.
pub(crate) fn run(inner: &Arc<Inner>) {
    let mut producer = inner
        .state
        .lock()
        .producer
        .take()
        .expect("one scanner runs at a time");
    // A panic (a broken invariant) fails the riders as an error does, so none is left
    // waiting for a scanner that is gone, and the producer goes back for the next one.
    let scanned =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scan(inner, &mut producer)))
            .unwrap_or_else(|_| {
                Err(IterError::CarouselFailed {
                    reason: "the carousel's scanner thread panicked".into(),
                })
            });
    match scanned {
        // The last rider left: nobody reads the ring's chunks again (a rider boarding
        // later starts at the cursor), so they are freed now, not when a scan next runs.
        Ok(()) => {
            let released = release_all(&mut inner.state.lock(), &producer);
            drop(released);
        }
        Err(e) => {
            tracing::error!(view = %inner.view.dir().display(), "carousel scan failed: {e}");
            fail_all(inner, &mut producer, &e.to_string());
            fail::fail_point!("carousel::scanner_failed");
        }
    }
    inner.state.lock().producer = Some(producer);
    inner.running.store(false, Ordering::Release);
}

fn scan(inner: &Inner, producer: &mut Producer<Slot>) -> Result<(), IterError> {
    let view = &*inner.view;
    let mut it = view.db().raw_iterator_opt(scan_options(view.partition()));
    // The applied index the iterator is known to see, and where it stands.
    let mut seen = Index::ZERO;
    let mut at: Option<ScanPos> = None;
    let mut item = ItemBuf::default();
    // The item found too large to share where the last chunk ended, if it did.
    let mut large: Option<Vec<u8>> = None;
    while let Some(plan) = boundary(inner, producer.cursor()) {
        if plan.cut_max > seen || plan.start.key.is_empty() || at.as_ref() != Some(&plan.start) {
            seen = view.applied_index();
            it.refresh().map_err(crate::disk::db_err(view.dir()))?;
            if plan.start.key.is_empty() {
                it.seek(keys::hash_floor(view.partition().lo()));
            } else {
                it.seek(&plan.start.key);
            }
        }
        let known_large = large.take().filter(|p| *p == plan.start.key);
        let event = match known_large {
            Some(prefix) => large_item_event(inner, &mut it, &plan, prefix)?,
            None => scan_chunk(inner, &mut it, &mut item, &plan, &mut large)?,
        };
        at = Some(event.end.clone());
        publish(inner, producer, event);
    }
    Ok(())
}

/// Admit, demote, and plan the next chunk; waits while nobody rides the shared scan or
/// while the pack is at the lag bound. `None`: the last rider left, stop.
fn boundary(inner: &Inner, cursor: u64) -> Option<Plan> {
    let mut st = inner.state.lock();
    loop {
        // Before reading positions: a rider that reads from now on wakes us (`nudge`).
        inner.scanner_waiting.store(true, Ordering::SeqCst);
        if st.stop {
            inner.scanner_waiting.store(false, Ordering::SeqCst);
            st.scanner_live = false;
            return None;
        }
        admit(inner, &mut st, cursor);
        if pace(inner, &st, cursor) {
            inner.scanner_waiting.store(false, Ordering::SeqCst);
            return Some(plan(&mut st));
        }
        inner.wake.wait(&mut st);
    }
}

/// Apply `policy::shared_decision` to every rider of the shared scan. `true`: publish now;
/// `false`: wait (nobody rides the shared scan, the pack is at the bound, or a rider to
/// demote is taking a chunk right now and will wake us).
fn pace(inner: &Inner, st: &State, cursor: u64) -> bool {
    let max = inner.config.rider_lag_chunks_max;
    let lags: Vec<(&RiderShared, u64)> = st
        .riders
        .values()
        .filter(|r| r.mode() == MODE_SHARED)
        .map(|r| {
            let lag = cursor.saturating_sub(r.position.load(Ordering::SeqCst));
            (&**r, lag)
        })
        .collect();
    let Some(leader) = lags.iter().map(|(_, lag)| *lag).min() else {
        return false;
    };
    let mut publish = true;
    for (rider, lag) in lags {
        match shared_decision(lag, leader, max) {
            SharedDecision::Ride => {}
            SharedDecision::Wait => publish = false,
            SharedDecision::Demote => publish &= demote(rider),
        }
    }
    publish
}

/// Move a rider onto its own iterator. `false` if it is taking a chunk right now (its slot
/// is locked): it will have read one when it wakes us.
fn demote(rider: &RiderShared) -> bool {
    let Some(mut slot) = rider.slot.try_lock() else {
        return false;
    };
    if slot.take().is_some() {
        rider.set_mode(MODE_DEMOTED);
        rider.demotions.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Board every waiting rider at the next chunk: it joins the ring at the cursor.
fn admit(inner: &Inner, st: &mut State, cursor: u64) {
    let boarding: Vec<_> = st
        .riders
        .values()
        .filter(|r| r.mode() == MODE_BOARDING)
        .cloned()
        .collect();
    for rider in boarding {
        let next_group_id = &mut st.next_group_id;
        let group = *st.groups.entry(rider.group_key.clone()).or_insert_with(|| {
            *next_group_id += 1;
            *next_group_id - 1
        });
        let mut consumer = inner
            .ring
            .join_at(&format!("rider {}", rider.id), cursor)
            .expect("the scanner joins riders at its own cursor, which no claim has passed");
        consumer.set_batch_events_max(1);
        *rider.slot.lock() = Some(consumer);
        rider.position.store(cursor, Ordering::SeqCst);
        rider.set_mode(MODE_SHARED);
        *rider.boarding.lock() = Some(Boarding {
            start: st.pos.clone(),
            target: st.pos.one_lap_later(),
            group,
        });
        rider.admitted.notify_all();
    }
}

fn plan(st: &mut State) -> Plan {
    let mut groups: Vec<(u64, super::encode::GroupKey, Index)> = Vec::new();
    let mut stop: Option<Vec<u8>> = None;
    for rider in st.riders.values() {
        if !matches!(rider.mode(), MODE_SHARED | MODE_DEMOTED) {
            continue;
        }
        let Some(b) = rider.boarding.lock().clone() else {
            continue;
        };
        if b.target.lap == st.pos.lap
            && b.target.key > st.pos.key
            && stop.as_ref().is_none_or(|s| b.target.key < *s)
        {
            stop = Some(b.target.key.clone());
        }
        let cut = rider.checked.cut;
        match groups.iter_mut().find(|(id, _, _)| *id == b.group) {
            Some(g) => g.2 = g.2.max(cut),
            None => groups.push((b.group, rider.group_key.clone(), cut)),
        }
    }
    st.groups
        .retain(|_, id| groups.iter().any(|(used, _, _)| used == id));
    let mut kinds = Kinds {
        nodes: false,
        edges: false,
    };
    let mut cut_max = Index::ZERO;
    let groups = groups
        .into_iter()
        .map(|(id, key, cut)| {
            let filter = key.filter(cut);
            kinds.nodes |= filter.kinds.nodes;
            kinds.edges |= filter.kinds.edges;
            cut_max = cut_max.max(filter.cut);
            (id, filter)
        })
        .collect();
    Plan {
        start: st.pos.clone(),
        stop,
        groups,
        cut_max,
        kinds,
    }
}

/// Read whole items from `plan.start` until a chunk is full, a rider's revolution ends, or
/// the lap ends; encode them once per group. An item too large to share ends the chunk
/// before it (its prefix is left in `large`, for the next chunk to pass over it at once),
/// or, first in the chunk, is passed over in a chunk of its own (`large_item_event`).
fn scan_chunk(
    inner: &Inner,
    it: &mut DBRawIteratorWithThreadMode<'_, DB>,
    item: &mut ItemBuf,
    plan: &Plan,
    large: &mut Option<Vec<u8>>,
) -> Result<Event, IterError> {
    let view = &*inner.view;
    let chunk_bytes = inner.config.chunk_bytes;
    let mut builders: Vec<ChunkBuilder> = plan
        .groups
        .iter()
        .map(|(_, f)| ChunkBuilder::new(f.clone(), super::chunk_capacity_bytes(chunk_bytes)))
        .collect();
    let (mut raw_bytes, mut items) = (0usize, 0u64);
    let mut marks = Vec::with_capacity(builders.len());
    let end = loop {
        let Some(key) = it.key() else {
            it.status().map_err(crate::disk::db_err(view.dir()))?;
            break plan.start.lap_end();
        };
        let parts = keys::split_key(key).ok_or_else(|| view.corrupt(format!("bad key {key:?}")))?;
        let full = raw_bytes >= chunk_bytes || builders.iter().any(|b| b.buf.len() >= chunk_bytes);
        let at_stop = plan.stop.as_deref().is_some_and(|s| parts.prefix >= s);
        if at_stop || (items > 0 && full) {
            break ScanPos {
                lap: plan.start.lap,
                key: parts.prefix.to_vec(),
            };
        }
        if !plan.kinds.allows(parts.kind) {
            let (hash, kind) = (parts.hash, parts.kind);
            if !skip_kind(it, hash, kind) {
                break plan.start.lap_end();
            }
            continue;
        }
        item.start(&parts, view)?;
        marks.clear();
        marks.extend(builders.iter_mut().map(ChunkBuilder::mark));
        let shared_max = inner.config.item_shared_bytes_max;
        if !item.read_into(it, view, &mut builders, shared_max)? {
            for (b, mark) in builders.iter_mut().zip(marks.drain(..)) {
                b.rollback(mark);
            }
            let prefix = std::mem::take(&mut item.prefix);
            if items == 0 {
                return large_item_event(inner, it, plan, prefix);
            }
            // The iterator stands inside the item: the next chunk starts at it.
            let end = ScanPos {
                lap: plan.start.lap,
                key: prefix.clone(),
            };
            *large = Some(prefix);
            break end;
        }
        raw_bytes += item.raw_bytes;
        items += 1;
    };
    let chunks = plan
        .groups
        .iter()
        .zip(builders)
        .map(|((group, _), b)| {
            let (bytes, meta) = b.finish();
            GroupChunk {
                group: *group,
                bytes,
                meta,
            }
        })
        .collect::<Vec<_>>();
    inner
        .chunks_encoded
        .fetch_add(chunks.len() as u64, Ordering::Relaxed);
    Ok(Event {
        start: plan.start.clone(),
        end,
        chunks,
        large_item: None,
        failure: None,
    })
}

/// The chunk of one item too large to share, which starts at `plan.start`: no frames, the
/// item's prefix for every rider to read it itself, and the iterator moved past the item.
fn large_item_event(
    inner: &Inner,
    it: &mut DBRawIteratorWithThreadMode<'_, DB>,
    plan: &Plan,
    prefix: Vec<u8>,
) -> Result<Event, IterError> {
    let next = skip_item(it, &inner.view, &prefix)?;
    let end = match (next, plan.stop.as_deref()) {
        // Nothing lies between the item and a rider's stop (positions are item prefixes).
        (Some(next), Some(stop)) if next.as_slice() > stop => ScanPos {
            lap: plan.start.lap,
            key: stop.to_vec(),
        },
        (Some(next), _) => ScanPos {
            lap: plan.start.lap,
            key: next,
        },
        (None, _) => plan.start.lap_end(),
    };
    inner.large_items.fetch_add(1, Ordering::Relaxed);
    Ok(Event {
        start: plan.start.clone(),
        end,
        chunks: Vec::new(),
        large_item: Some(prefix),
        failure: None,
    })
}

/// Seek past every key of `kind` at `hash` (no group wants that kind). `false`: that was
/// the end of the hash space.
pub(crate) fn skip_kind(
    it: &mut DBRawIteratorWithThreadMode<'_, DB>,
    hash: u32,
    kind: ItemKind,
) -> bool {
    let mut target = hash.to_be_bytes().to_vec();
    if kind == ItemKind::Node {
        target.push(ItemKind::Edge as u8);
    } else if let Some(next) = hash.checked_add(1) {
        target = next.to_be_bytes().to_vec();
    } else {
        return false;
    }
    it.seek(target);
    true
}

/// Put the event in the next ring slot (every rider lags less than the bound, which is
/// below the ring's size, so the claim never waits) and remember where it starts, for rejoining riders.
fn publish(inner: &Inner, producer: &mut Producer<Slot>, event: Event) {
    let meta = EventMeta {
        seq: producer.cursor(),
        start: event.start.clone(),
        groups: event.chunks.iter().map(|c| c.group).collect(),
    };
    let wrapped = event.end.lap > event.start.lap;
    let end = event.end.clone();
    let mut claim = producer.claim(1);
    claim.with_slot(0, |slot| *slot.get_mut() = Some(Arc::new(event)));
    claim.publish();
    let mut st = inner.state.lock();
    st.pos = end;
    st.recent.push_back(meta);
    while st.recent.len() > inner.config.ring_slots {
        st.recent.pop_front();
    }
    let released = release_passed(&mut st, producer, inner.config.rider_lag_chunks_max);
    drop(st);
    // Freed after the state lock, which riders and boarding contend for.
    drop(released);
    if wrapped {
        inner.laps.fetch_add(1, Ordering::Relaxed);
    }
}

/// Empty the ring slots that every rider aboard has read (a rider's position is the next
/// sequence it reads, stored after it let go of the slot), so that their chunks are freed
/// as soon as the last rider has sent them; the emptied events are returned, for the caller
/// to drop after the state lock. While a rider is demoted, the last
/// `rejoin_lag_chunks_max` slots stay: that is where `policy::demoted_decision` lets it
/// rejoin. Demoted riders rejoin
/// only above what was emptied. Under the state lock, like boarding and rejoining.
fn release_passed(
    st: &mut State,
    producer: &Producer<Slot>,
    rider_lag_chunks_max: u64,
) -> Vec<Arc<Event>> {
    let mut shared = None::<u64>;
    let mut demoted = false;
    for r in st.riders.values() {
        match r.mode() {
            MODE_SHARED => {
                let at = r.position.load(Ordering::SeqCst);
                shared = Some(shared.map_or(at, |s| s.min(at)));
            }
            MODE_DEMOTED => demoted = true,
            _ => {}
        }
    }
    let Some(mut floor) = shared else {
        return Vec::new();
    };
    if demoted {
        let rejoin_max = super::policy::rejoin_lag_chunks_max(rider_lag_chunks_max);
        floor = floor.min(producer.cursor().saturating_sub(rejoin_max));
    }
    let oldest = producer.cursor().saturating_sub(producer.capacity());
    let mut seq = st.released_below.max(oldest);
    let mut released = Vec::new();
    while seq < floor {
        if let Some(Some(event)) = producer.with_published(seq, |slot| slot.lock().take()) {
            released.push(event);
        }
        seq += 1;
    }
    st.released_below = st.released_below.max(floor);
    while st.recent.front().is_some_and(|m| m.seq < st.released_below) {
        st.recent.pop_front();
    }
    released
}

/// Empty every ring slot (the scanner stops: no rider is aboard), returning the events for
/// the caller to drop after the state lock.
fn release_all(st: &mut State, producer: &Producer<Slot>) -> Vec<Arc<Event>> {
    let cursor = producer.cursor();
    let mut seq = st
        .released_below
        .max(cursor.saturating_sub(producer.capacity()));
    let mut released = Vec::new();
    while seq < cursor {
        if let Some(Some(event)) = producer.with_published(seq, |slot| slot.lock().take()) {
            released.push(event);
        }
        seq += 1;
    }
    st.released_below = cursor;
    st.recent.clear();
    released
}

/// The scan failed: every rider aboard gets the error, including riders waiting at the
/// head of the ring (they read a failure slot).
fn fail_all(inner: &Inner, producer: &mut Producer<Slot>, reason: &str) {
    let pos = {
        let mut st = inner.state.lock();
        for rider in st.riders.values().filter(|r| r.rides_carousel()) {
            rider.fail(reason);
        }
        // Riders boarding from now on are not failed here: they start a new scanner.
        st.scanner_live = false;
        st.pos.clone()
    };
    let event = Event {
        start: pos.clone(),
        end: pos,
        chunks: Vec::new(),
        large_item: None,
        failure: Some(reason.to_owned()),
    };
    let mut claim = producer.claim(1);
    claim.with_slot(0, |slot| *slot.get_mut() = Some(Arc::new(event)));
    claim.publish();
}

#[cfg(test)]
mod tests {
    use spindle_core::{ItemKey, Partition, Record, Value};

    use super::*;
    use crate::carousel::{Carousel, CarouselConfig};
    use crate::disk::DiskView;
    use crate::iterate::IterRequest;

    /// A view of 50 nodes and, at the end of the hash space, a key no Disk View writes
    /// (kind 9): a scan of it fails there.
    fn view_with_a_bad_key(dir: &std::path::Path) -> DiskView {
        let view = DiskView::open(dir, Partition::ALL).unwrap();
        let records: Vec<Record> = (1..=50)
            .map(|i| Record {
                index: Index::new(i),
                commit: true,
                key: ItemKey::node(format!("n{i}")).unwrap(),
                value: Value::json("{}").unwrap(),
            })
            .collect();
        view.apply(&records).unwrap();
        let bad = [
            0xFF, 0xFF, 0xFF, 0xFF, 9, b'x', 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,
        ];
        view.db().put(bad, b"\0{}").unwrap();
        view
    }

    #[test]
    fn a_failed_scan_stops_every_rider_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let view = view_with_a_bad_key(dir.path());
        let config = CarouselConfig {
            chunk_bytes: 64,
            ring_slots: 8,
            rider_lag_chunks_max: 4,
            ..CarouselConfig::default()
        };
        let carousel = Carousel::new(Arc::new(view), config);
        let req = IterRequest::range(Partition::ALL);
        let mut riders = carousel.board_all(&[req.clone(), req]).unwrap();
        for rider in &mut riders {
            let err = loop {
                match rider.next_chunk() {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break e,
                    None => panic!("the rider ended without the scan's error"),
                }
            };
            assert!(
                matches!(&err, IterError::CarouselFailed { reason } if reason.contains("bad key")),
                "{err}"
            );
            assert!(rider.next_chunk().is_none(), "nothing after the error");
        }
        let status = carousel.status();
        assert!(status.riders.is_empty() && !status.running, "{status:?}");
    }

    /// A rider boarding while the scanner that failed is on its way out (it failed every
    /// rider aboard and has not ended yet) is not left waiting for a scanner that will
    /// never admit it: it starts a new scan (which here fails the same way, and says so).
    #[cfg(feature = "failpoints")]
    #[test]
    fn a_rider_boarding_as_a_failed_scanner_exits_is_not_left_waiting() {
        use parking_lot::Mutex;
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;
        use std::time::Duration;

        let scenario = fail::FailScenario::setup();
        let dir = tempfile::tempdir().unwrap();
        let view = view_with_a_bad_key(dir.path());
        // Chunks large enough for every node: the scan meets the bad key with no rider
        // having read anything.
        let config = CarouselConfig {
            chunk_bytes: 64 << 10,
            ring_slots: 8,
            rider_lag_chunks_max: 4,
            idle_chunk_ms: 3_600_000,
            ..CarouselConfig::default()
        };
        let carousel = Arc::new(Carousel::new(Arc::new(view), config));
        // The first failed scanner stops between failing its riders and ending, until told.
        let (hit_tx, hit_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (hit_tx, release_rx) = (Mutex::new(hit_tx), Mutex::new(release_rx));
        let first = AtomicBool::new(true);
        fail::cfg_callback("carousel::scanner_failed", move || {
            if first.swap(false, Ordering::SeqCst) {
                let _ = hit_tx.lock().send(());
                let _ = release_rx.lock().recv_timeout(Duration::from_secs(10));
            }
        })
        .unwrap();
        let req = IterRequest::range(Partition::ALL);
        let mut a = carousel.board(&req).unwrap();
        hit_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        // The scanner failed A (still aboard: it has not read its error) and has not ended.
        // B boards now, from a thread of its own, so that a rider left waiting fails the
        // test instead of hanging it.
        let (done_tx, done_rx) = mpsc::channel();
        let boarding = carousel.clone();
        std::thread::spawn(move || {
            let mut b = boarding.board(&IterRequest::range(Partition::ALL)).unwrap();
            let outcome = loop {
                match b.next_chunk() {
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break Some(e.to_string()),
                    None => break None,
                }
            };
            let _ = done_tx.send(outcome);
        });
        // B is aboard (its boarding now waits for the old thread to end, or, before the
        // fix, for a scanner that never comes); then the old scanner may end.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while carousel.status().riders.len() < 2 {
            assert!(std::time::Instant::now() < deadline, "B never boarded");
            std::thread::yield_now();
        }
        release_tx.send(()).unwrap();
        let outcome = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a rider that boarded as the failed scanner ended was left waiting");
        let reason = outcome.expect("the new scan meets the same bad key");
        assert!(reason.contains("bad key"), "{reason}");
        let err = loop {
            match a.next_chunk() {
                Some(Ok(_)) => continue,
                Some(Err(e)) => break e,
                None => panic!("the rider ended without the scan's error"),
            }
        };
        assert!(matches!(err, IterError::CarouselFailed { .. }), "{err}");
        drop(a);
        fail::remove("carousel::scanner_failed");
        scenario.teardown();
    }
}
