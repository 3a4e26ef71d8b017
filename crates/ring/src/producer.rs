//! The single producer: claims a batch of slots, fills them in place, publishes them.
//!
//! Fault model: a claim dropped without `publish` is abandoned (its slots keep whatever was
//! written and are claimed again next time); the consumers never see it.

use crate::registry::GateCache;
use crate::ring::Shared;
use crate::sync::{fence, Arc, Ordering};

/// The ring is full: the slowest consumer has not released the slots a claim needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// Slots free right now (fewer than asked for).
    pub free_slots: u64,
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ring full: {} slots free", self.free_slots)
    }
}

impl std::error::Error for Full {}

/// The one writer of a ring. Dropping it closes the ring: consumers drain what was
/// published and then see [`crate::Closed`].
#[derive(Debug)]
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// Next sequence to claim (equals the cursor: one producer, claims publish in order).
    next: u64,
    /// Largest claim end stored in `shared.claimed`.
    announced: u64,
    gates: GateCache,
}

impl<T> Producer<T> {
    pub(crate) fn new(shared: Arc<Shared<T>>) -> Self {
        Self {
            shared,
            next: 0,
            announced: 0,
            gates: GateCache::new(),
        }
    }

    /// Number of events published so far.
    pub fn cursor(&self) -> u64 {
        self.next
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// Runs `f` on the published event at `sequence` if it is still in the ring (one of the
    /// last `capacity` published, and no claim since has taken its slot); `None` otherwise.
    /// Consumers may be reading the event at the same time, so `f` gets it shared: an event
    /// that is to change after publish needs interior mutability (the carousel drops chunks
    /// every rider has passed this way, so that their memory is reused while still cached).
    pub fn with_published<R>(&self, sequence: u64, f: impl FnOnce(&T) -> R) -> Option<R> {
        // `announced` covers a claim dropped unpublished: it may have written the slots of
        // the oldest events, which are then no longer theirs.
        let oldest = self
            .announced
            .max(self.next)
            .saturating_sub(self.shared.capacity);
        if sequence >= self.next || sequence < oldest {
            return None;
        }
        let cell = self.shared.slot(sequence);
        // SAFETY: the slot holds the event published at `sequence` (below the cursor, and not
        // taken by any claim since, announced or abandoned). Only claims write slots, and a
        // claim borrows the producer mutably, so none can run while `&self` is held here;
        // consumers only ever read slots.
        Some(cell.with(|ptr| f(unsafe { &*ptr })))
    }

    /// Claims `n` slots if every consumer has released them, else `Full` (nothing changes).
    ///
    /// # Panics
    /// If `n` is 0 or larger than the capacity: such a claim can never succeed.
    pub fn try_claim(&mut self, n: u64) -> Result<Claim<'_, T>, Full> {
        let end = self.announce(n);
        match self.free_for(end) {
            Ok(()) => Ok(self.claim_to(end)),
            Err(full) => Err(full),
        }
    }

    /// Claims `n` slots, waiting (per the ring's wait strategy) for consumers to release
    /// them. Never returns while the slowest consumer holds them: that is the backpressure.
    ///
    /// # Panics
    /// If `n` is 0 or larger than the capacity.
    pub fn claim(&mut self, n: u64) -> Claim<'_, T> {
        let end = self.announce(n);
        if self.free_for(end).is_err() {
            let (shared, gates) = (&self.shared, &mut self.gates);
            shared.space_ready.wait_until(shared.wait, || {
                (gates.min_at_least(&shared.registry, end - shared.capacity)
                    >= end - shared.capacity)
                    .then_some(())
            });
        }
        self.claim_to(end)
    }

    /// Claims up to `n` slots (at least 1), as many as are free after waiting for one.
    pub fn claim_up_to(&mut self, n: u64) -> Claim<'_, T> {
        let n = n.clamp(1, self.shared.capacity);
        let needed = (self.next + n).saturating_sub(self.shared.capacity);
        let min = self.gates.min_at_least(&self.shared.registry, needed);
        let free = min
            .saturating_add(self.shared.capacity)
            .saturating_sub(self.next);
        self.claim(n.min(free.max(1)))
    }

    /// Stores the claim end where joiners read it before any gate is checked; see
    /// `Ring::join_at` for the protocol.
    fn announce(&mut self, n: u64) -> u64 {
        assert!(
            n >= 1 && n <= self.shared.capacity,
            "claim of {n} slots on a ring of {} slots",
            self.shared.capacity
        );
        let end = self.next + n;
        if end > self.announced {
            self.shared.claimed.store(end, Ordering::Relaxed);
            // Orders the store before the gate version load in `free_for` (store-load:
            // only a SeqCst fence does that); pairs with the fence in `Ring::join_at`.
            fence(Ordering::SeqCst);
            self.announced = end;
        }
        end
    }

    fn free_for(&mut self, end: u64) -> Result<(), Full> {
        let needed = end.saturating_sub(self.shared.capacity);
        let min = self.gates.min_at_least(&self.shared.registry, needed);
        if min >= needed {
            Ok(())
        } else {
            Err(Full {
                free_slots: (min + self.shared.capacity).saturating_sub(self.next),
            })
        }
    }

    fn claim_to(&mut self, end: u64) -> Claim<'_, T> {
        Claim {
            start: self.next,
            end,
            producer: self,
        }
    }
}

impl<T> Drop for Producer<T> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.data_ready.notify();
    }
}

/// Claimed slots `[start, end)`, writable in place until published.
#[derive(Debug)]
pub struct Claim<'a, T> {
    producer: &'a mut Producer<T>,
    start: u64,
    end: u64,
}

impl<T> Claim<'_, T> {
    /// Sequence of the first claimed slot.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Number of claimed slots.
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Always false: claims hold at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Runs `f` on the `i`-th claimed slot.
    pub fn with_slot<R>(&mut self, i: usize, f: impl FnOnce(&mut T) -> R) -> R {
        assert!(i < self.len(), "slot {i} outside a claim of {}", self.len());
        let cell = self.producer.shared.slot(self.start + i as u64);
        // SAFETY: the slot belongs to this claim: every consumer has released the event
        // it held (gating), none may read it before publish (cursor), and `&mut self`
        // makes this the only reference.
        cell.with_mut(|ptr| f(unsafe { &mut *ptr }))
    }

    /// Sets every claimed slot: `f(sequence, slot)`.
    pub fn fill(&mut self, mut f: impl FnMut(u64, &mut T)) {
        for i in 0..self.len() {
            let sequence = self.start + i as u64;
            self.with_slot(i, |slot| f(sequence, slot));
        }
    }

    /// The claimed slots as at most two slices (the claim may wrap the ring's end).
    #[cfg(not(loom))]
    pub fn slices_mut(&mut self) -> (&mut [T], &mut [T]) {
        let shared = &self.producer.shared;
        let first = (self.start & shared.mask) as usize;
        let len = self.len();
        let head = len.min(shared.slots.len() - first);
        let base = shared.slots.as_ptr() as *mut T;
        // SAFETY: `UnsafeCell<T>` is `repr(transparent)` over `T`, so the slot array is an
        // array of `T`. Both ranges are inside it and disjoint (len <= capacity), and they
        // belong to this claim exclusively (see `with_slot`).
        unsafe {
            (
                std::slice::from_raw_parts_mut(base.add(first), head),
                std::slice::from_raw_parts_mut(base, len - head),
            )
        }
    }

    /// Makes the claimed events visible to every consumer, at once.
    pub fn publish(self) {
        let shared = &self.producer.shared;
        shared.cursor.store(self.end, Ordering::Release);
        self.producer.next = self.end;
        shared.data_ready.notify();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::RingBuilder;

    #[test]
    fn abandoned_claim_is_never_seen() {
        let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        producer.claim(2).fill(|_, v| *v = 99);
        assert!(consumer.try_batch().is_none());
        producer.claim(1).fill(|s, v| *v = s);
        let mut c = producer.claim(1);
        c.fill(|s, v| *v = s + 10);
        c.publish();
        let batch = consumer.try_batch().unwrap();
        assert_eq!(batch.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![10]);
    }

    #[test]
    fn published_events_are_reachable_until_a_claim_takes_their_slot() {
        let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        assert_eq!(producer.with_published(0, |v| *v), None);
        for _ in 0..3 {
            let mut c = producer.claim(1);
            c.fill(|s, v| *v = s + 100);
            c.publish();
        }
        let got: Vec<_> = (0..4).map(|s| producer.with_published(s, |v| *v)).collect();
        assert_eq!(got, vec![Some(100), Some(101), Some(102), None]);
        drop(consumer.try_batch());
        // A claim dropped unpublished wrote the slots of the two oldest events: they are
        // no longer reachable, the newest still is.
        producer.claim(3).fill(|_, v| *v = 99);
        let got: Vec<_> = (0..3).map(|s| producer.with_published(s, |v| *v)).collect();
        assert_eq!(got, vec![None, None, Some(102)]);
        let mut c = producer.claim(1);
        c.fill(|s, v| *v = s + 100);
        c.publish();
        assert_eq!(producer.with_published(3, |v| *v), Some(103));
        assert_eq!(producer.with_published(2, |v| *v), Some(102));
    }

    #[test]
    fn wrapped_claim_splits_into_two_slices() {
        let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        producer.claim(3).publish();
        drop(consumer.try_batch());
        let mut claim = producer.claim(3);
        let (a, b) = claim.slices_mut();
        assert_eq!((a.len(), b.len()), (1, 2));
        a[0] = 3;
        b.copy_from_slice(&[4, 5]);
        claim.publish();
        let batch = consumer.try_batch().unwrap();
        assert_eq!(
            batch.iter().collect::<Vec<_>>(),
            vec![(3, &3), (4, &4), (5, &5)]
        );
    }

    #[test]
    #[should_panic(expected = "claim of 5 slots on a ring of 4 slots")]
    fn claim_larger_than_ring_panics() {
        let (mut producer, _ring) = RingBuilder::new(4).build::<u64>().unwrap();
        let _ = producer.try_claim(5);
    }
}
