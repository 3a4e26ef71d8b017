//! The ring: preallocated slots, the producer's cursor, and the handle consumers join by.
//!
//! Sequences are event counts starting at 0. Event `s` lives in slot `s & mask`. The
//! producer's `cursor` is the number of events published; a consumer's sequence is the
//! number of events it has finished reading. The producer may write event `s` only once
//! every consumer's sequence is above `s - capacity` (gating), so a slot is never written
//! while a consumer may still read the event it held.

use crate::consumer::Consumer;
use crate::producer::Producer;
use crate::registry::Registry;
use crate::sync::{fence, Arc, AtomicBool, AtomicU64, Ordering, Padded, UnsafeCell};
use crate::wait::{Notifier, WaitStrategy};

/// Errors from building a ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The capacity is zero or not a power of two.
    CapacityNotPowerOfTwo { capacity_slots: usize },
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CapacityNotPowerOfTwo { capacity_slots } => write!(
                f,
                "ring capacity {capacity_slots} slots is not a power of two (use 1, 2, 4, ...)"
            ),
        }
    }
}

impl std::error::Error for RingError {}

/// A consumer asked to join at an event whose slot may already hold a later event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overwritten {
    /// The position asked for.
    pub requested: u64,
    /// The oldest position that could be joined when the request was checked.
    pub oldest: u64,
}

impl std::fmt::Display for Overwritten {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot join at event {}: its slot may be overwritten; the oldest joinable event is {}",
            self.requested, self.oldest
        )
    }
}

impl std::error::Error for Overwritten {}

pub(crate) struct Shared<T> {
    pub(crate) name: String,
    /// Number of events published (release-stored after the slots are written).
    pub(crate) cursor: Padded<AtomicU64>,
    /// Highest claim end the producer has announced (fenced; see `Ring::join_at`).
    pub(crate) claimed: Padded<AtomicU64>,
    pub(crate) closed: AtomicBool,
    pub(crate) capacity: u64,
    pub(crate) mask: u64,
    pub(crate) slots: Box<[UnsafeCell<T>]>,
    pub(crate) registry: Registry,
    /// Consumers park here waiting for the cursor.
    pub(crate) data_ready: Notifier,
    /// The producer parks here waiting for the slowest consumer.
    pub(crate) space_ready: Notifier,
    pub(crate) wait: WaitStrategy,
}

// SAFETY: slots are only reached through `Producer` (writes to claimed, unpublished slots,
// which no consumer may read: gating) and `Consumer` (reads of published slots the producer
// may not rewrite until the consumer's sequence passes them). Sharing `&T` across consumer
// threads needs `T: Sync`; moving values written on the producer thread needs `T: Send`.
unsafe impl<T: Send + Sync> Sync for Shared<T> {}
// SAFETY: as above; the slots own their `T`s, which are `Send`.
unsafe impl<T: Send + Sync> Send for Shared<T> {}

impl<T> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("cursor", &self.cursor.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T> Shared<T> {
    pub(crate) fn slot(&self, sequence: u64) -> &UnsafeCell<T> {
        // The mask keeps the index below `slots.len()`; the cast cannot truncate because
        // the index is below a length that fits in usize.
        &self.slots[(sequence & self.mask) as usize]
    }
}

/// Builds a ring.
#[derive(Debug, Clone)]
pub struct RingBuilder {
    name: String,
    capacity_slots: usize,
    wait: WaitStrategy,
}

impl RingBuilder {
    /// Starts building a ring of `capacity_slots` slots (a power of two).
    pub fn new(capacity_slots: usize) -> Self {
        Self {
            name: "ring".to_owned(),
            capacity_slots,
            wait: WaitStrategy::default(),
        }
    }

    /// How consumers and the producer wait (default: [`WaitStrategy::Blocking`]).
    pub fn wait(mut self, wait: WaitStrategy) -> Self {
        self.wait = wait;
        self
    }

    /// A name used in metrics and drawings.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Builds the ring with every slot set by `init`, returning its single producer and a
    /// handle consumers join through.
    pub fn build_with<T: Send + Sync>(
        self,
        mut init: impl FnMut() -> T,
    ) -> Result<(Producer<T>, Ring<T>), RingError> {
        let capacity_slots = self.capacity_slots;
        if !capacity_slots.is_power_of_two() {
            return Err(RingError::CapacityNotPowerOfTwo { capacity_slots });
        }
        let slots = (0..capacity_slots)
            .map(|_| UnsafeCell::new(init()))
            .collect();
        let shared = Arc::new(Shared {
            name: self.name,
            cursor: Padded(AtomicU64::new(0)),
            claimed: Padded(AtomicU64::new(0)),
            closed: AtomicBool::new(false),
            capacity: capacity_slots as u64,
            mask: capacity_slots as u64 - 1,
            slots,
            registry: Registry::default(),
            data_ready: Notifier::default(),
            space_ready: Notifier::default(),
            wait: self.wait,
        });
        Ok((Producer::new(shared.clone()), Ring { shared }))
    }

    /// Builds the ring with `T::default()` in every slot.
    pub fn build<T: Send + Sync + Default>(self) -> Result<(Producer<T>, Ring<T>), RingError> {
        self.build_with(T::default)
    }
}

/// A handle to a ring: consumers join through it and metrics read it. Cloneable; holding
/// one does not gate the producer.
#[derive(Debug)]
pub struct Ring<T> {
    pub(crate) shared: Arc<Shared<T>>,
}

impl<T> Clone for Ring<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Send + Sync> Ring<T> {
    /// Joins at event `position`: the consumer's first batch starts there, and from now on
    /// it gates the producer.
    ///
    /// Fails if `position`'s slot may already have been claimed for a later event. The
    /// check is race-free because of two SeqCst fences: the joiner registers (version
    /// bump), fences, then reads `claimed`; the producer stores `claimed`, fences, then
    /// reads the version. Either the producer sees the joiner and gates on it, or the
    /// joiner sees the claim and refuses a position it covers.
    pub fn join_at(&self, name: &str, position: u64) -> Result<Consumer<T>, Overwritten> {
        let shared = &self.shared;
        // Refuse a position that is already too old without registering it: a brief
        // registration at an old position would stall the producer for nothing.
        let oldest = self.oldest_joinable();
        if position < oldest {
            return Err(Overwritten {
                requested: position,
                oldest,
            });
        }
        let (id, sequence) = shared.registry.add(name, position);
        // Orders the registration before the `claimed` load; pairs with the producer's
        // fence between storing `claimed` and loading the gate version.
        fence(Ordering::SeqCst);
        let claimed = shared.claimed.load(Ordering::SeqCst);
        let oldest = claimed.saturating_sub(shared.capacity);
        if position < oldest {
            shared.registry.remove(id);
            shared.space_ready.notify();
            return Err(Overwritten {
                requested: position,
                oldest,
            });
        }
        Ok(Consumer::new(shared.clone(), id, name, sequence, position))
    }

    /// Joins at the producer's current cursor: the consumer sees events published from now.
    pub fn join(&self, name: &str) -> Consumer<T> {
        loop {
            let position = self.cursor();
            if let Ok(consumer) = self.join_at(name, position) {
                return consumer;
            }
        }
    }

    /// The number of events published so far.
    pub fn cursor(&self) -> u64 {
        self.shared.cursor.load(Ordering::Acquire)
    }

    /// The oldest position [`Ring::join_at`] could accept right now (later claims may raise it).
    pub fn oldest_joinable(&self) -> u64 {
        self.shared
            .claimed
            .load(Ordering::SeqCst)
            .saturating_sub(self.shared.capacity)
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// Whether the producer has been dropped (no event after the cursor will come).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// The producer cursor and every consumer's sequence, for metrics.
    pub fn snapshot(&self) -> RingSnapshot {
        // Read consumers first: the cursor read after them is at least as new, so depths
        // are never negative.
        let positions = self.shared.registry.positions();
        let cursor = self.cursor();
        RingSnapshot {
            name: self.shared.name.clone(),
            capacity_slots: self.shared.capacity,
            cursor,
            consumers: positions
                .into_iter()
                .map(|(name, sequence)| ConsumerSnapshot {
                    depth: cursor.saturating_sub(sequence),
                    name,
                    sequence,
                })
                .collect(),
        }
    }
}

/// A ring's positions at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingSnapshot {
    pub name: String,
    pub capacity_slots: u64,
    /// Events published.
    pub cursor: u64,
    pub consumers: Vec<ConsumerSnapshot>,
}

/// One consumer's position at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSnapshot {
    pub name: String,
    /// Events this consumer has finished reading.
    pub sequence: u64,
    /// Events published but not yet read by this consumer (queue depth of the edge).
    pub depth: u64,
}

impl RingSnapshot {
    /// Prometheus text-format lines for this ring.
    pub fn to_prometheus(&self) -> String {
        let mut out = format!(
            "spindle_ring_cursor{{ring=\"{}\"}} {}\nspindle_ring_capacity_slots{{ring=\"{}\"}} {}\n",
            self.name, self.cursor, self.name, self.capacity_slots
        );
        for c in &self.consumers {
            out.push_str(&format!(
                "spindle_ring_consumer_sequence{{ring=\"{}\",consumer=\"{}\"}} {}\n\
                 spindle_ring_consumer_depth{{ring=\"{}\",consumer=\"{}\"}} {}\n",
                self.name, c.name, c.sequence, self.name, c.name, c.depth
            ));
        }
        out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn capacity_must_be_power_of_two() {
        for bad in [0, 3, 6, 100] {
            let err = RingBuilder::new(bad).build::<u64>().unwrap_err();
            assert_eq!(
                err,
                RingError::CapacityNotPowerOfTwo {
                    capacity_slots: bad
                }
            );
        }
        assert!(RingBuilder::new(1).build::<u64>().is_ok());
        assert!(RingBuilder::new(64).build::<u64>().is_ok());
    }

    #[test]
    fn snapshot_reports_depth_per_consumer() {
        let (mut producer, ring) = RingBuilder::new(8).name("r").build::<u64>().unwrap();
        let mut a = ring.join("a");
        let _b = ring.join("b");
        producer.claim(5).publish();
        drop(a.try_batch().unwrap());
        let snap = ring.snapshot();
        assert_eq!(snap.cursor, 5);
        let depths: Vec<_> = snap
            .consumers
            .iter()
            .map(|c| (c.name.as_str(), c.depth))
            .collect();
        assert_eq!(depths, vec![("a", 0), ("b", 5)]);
        let text = snap.to_prometheus();
        assert!(text.contains("spindle_ring_consumer_depth{ring=\"r\",consumer=\"b\"} 5"));
    }
}
