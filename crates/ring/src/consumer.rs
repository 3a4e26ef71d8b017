//! A consumer: reads every published event from its position on, in batches, and gates
//! the producer until it leaves (drop or [`Consumer::leave`]).

use crate::registry::SeqCell;
use crate::ring::Shared;
use crate::sync::{Arc, Ordering};

/// The producer is gone and every event it published has been read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ring closed: the producer is gone and every event was read")
    }
}

impl std::error::Error for Closed {}

/// One reader of a ring. Many consumers read the same slots (multicast, no copies).
#[derive(Debug)]
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    id: u64,
    name: String,
    sequence: SeqCell,
    /// Next event to read (the published value of `sequence` lags it only inside a batch).
    next: u64,
    /// Largest batch handed out at once.
    batch_events_max: u64,
}

impl<T> Consumer<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        id: u64,
        name: &str,
        sequence: SeqCell,
        position: u64,
    ) -> Self {
        Self {
            batch_events_max: shared.capacity,
            shared,
            id,
            name: name.to_owned(),
            sequence,
            next: position,
        }
    }

    /// The consumer's name in metrics.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next event this consumer will read.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Limits how many events one batch may hold (default: the ring's capacity).
    pub fn set_batch_events_max(&mut self, batch_events_max: u64) {
        self.batch_events_max = batch_events_max.max(1);
    }

    /// The events published and not yet read, without waiting; `None` if there are none.
    pub fn try_batch(&mut self) -> Option<Batch<'_, T>> {
        let cursor = self.shared.cursor.load(Ordering::Acquire);
        (cursor > self.next).then(|| self.batch_to(cursor))
    }

    /// Waits (per the ring's wait strategy) until at least one event is published, then
    /// returns everything available up to the cursor. `Closed` once the producer is gone
    /// and everything was read.
    pub fn wait_batch(&mut self) -> Result<Batch<'_, T>, Closed> {
        let next = self.next;
        let shared = &self.shared;
        let cursor = shared.data_ready.wait_until(shared.wait, || {
            let cursor = shared.cursor.load(Ordering::Acquire);
            if cursor > next {
                return Some(Ok(cursor));
            }
            if shared.closed.load(Ordering::Acquire) {
                // The close was stored after the last publish: re-read the cursor.
                let cursor = shared.cursor.load(Ordering::Acquire);
                return Some(if cursor > next {
                    Ok(cursor)
                } else {
                    Err(Closed)
                });
            }
            None
        })?;
        Ok(self.batch_to(cursor))
    }

    /// Stops gating the producer now (dropping the consumer does the same).
    pub fn leave(self) {}

    fn batch_to(&mut self, cursor: u64) -> Batch<'_, T> {
        let start = self.next;
        // Saturating: a bound of `u64::MAX` means no bound.
        let end = cursor.min(start.saturating_add(self.batch_events_max));
        Batch {
            consumer: self,
            start,
            end,
        }
    }

    fn release(&mut self, end: u64) {
        self.next = end;
        self.sequence.store(end, Ordering::Release);
        self.shared.space_ready.notify();
    }
}

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        self.shared.registry.remove(self.id);
        self.shared.space_ready.notify();
    }
}

/// Published events `[start, end)`, read in place. Dropping the batch releases its slots
/// to the producer.
#[derive(Debug)]
pub struct Batch<'a, T> {
    consumer: &'a mut Consumer<T>,
    start: u64,
    end: u64,
}

impl<T> Batch<'_, T> {
    /// Sequence of the first event.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the sequence of the last event.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Always false: batches hold at least one event.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Runs `f` on the `i`-th event of the batch.
    pub fn with_event<R>(&self, i: usize, f: impl FnOnce(&T) -> R) -> R {
        assert!(
            i < self.len(),
            "event {i} outside a batch of {}",
            self.len()
        );
        let cell = self.consumer.shared.slot(self.start + i as u64);
        // SAFETY: the event is published (below the cursor, acquired in `wait_batch`) and
        // the producer cannot rewrite its slot until this consumer's sequence passes it,
        // which happens only when the batch is dropped.
        cell.with(|ptr| f(unsafe { &*ptr }))
    }

    /// `(sequence, event, end_of_batch)` for every event, in order.
    pub fn for_each(&self, mut f: impl FnMut(u64, &T, bool)) {
        let len = self.len();
        for i in 0..len {
            self.with_event(i, |event| f(self.start + i as u64, event, i + 1 == len));
        }
    }

    /// `(sequence, event)` for every event, in order.
    #[cfg(not(loom))]
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        let (a, b) = self.slices();
        (self.start..self.end).zip(a.iter().chain(b))
    }

    /// The events as at most two slices (the batch may wrap the ring's end).
    #[cfg(not(loom))]
    pub fn slices(&self) -> (&[T], &[T]) {
        let shared = &self.consumer.shared;
        let first = (self.start & shared.mask) as usize;
        let len = self.len();
        let head = len.min(shared.slots.len() - first);
        let base = shared.slots.as_ptr() as *const T;
        // SAFETY: `UnsafeCell<T>` is `repr(transparent)` over `T`; both ranges lie inside
        // the slot array and hold published events that stay unwritten while the batch
        // lives (see `with_event`).
        unsafe {
            (
                std::slice::from_raw_parts(base.add(first), head),
                std::slice::from_raw_parts(base, len - head),
            )
        }
    }
}

impl<T> Drop for Batch<'_, T> {
    fn drop(&mut self) {
        self.consumer.release(self.end);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::{Closed, RingBuilder};

    #[test]
    fn batch_holds_everything_published_and_marks_its_end() {
        let (mut producer, ring) = RingBuilder::new(8).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        let mut claim = producer.claim(3);
        claim.fill(|s, v| *v = s * 2);
        claim.publish();
        let batch = consumer.wait_batch().unwrap();
        let mut seen = Vec::new();
        batch.for_each(|s, v, end| seen.push((s, *v, end)));
        assert_eq!(seen, vec![(0, 0, false), (1, 2, false), (2, 4, true)]);
    }

    #[test]
    fn closed_after_drain() {
        let (mut producer, ring) = RingBuilder::new(4).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        producer.claim(2).publish();
        drop(producer);
        assert_eq!(consumer.wait_batch().unwrap().len(), 2);
        assert_eq!(consumer.wait_batch().unwrap_err(), Closed);
    }

    #[test]
    fn batch_events_max_splits_batches() {
        let (mut producer, ring) = RingBuilder::new(8).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        consumer.set_batch_events_max(3);
        producer.claim(7).publish();
        let lens: Vec<_> = (0..3)
            .map(|_| consumer.wait_batch().unwrap().len())
            .collect();
        assert_eq!(lens, vec![3, 3, 1]);
    }

    #[test]
    fn a_batch_bound_of_u64_max_is_no_bound() {
        let (mut producer, ring) = RingBuilder::new(8).build::<u64>().unwrap();
        let mut consumer = ring.join_at("c", 0).unwrap();
        producer.claim(1).publish();
        assert_eq!(consumer.wait_batch().unwrap().len(), 1);
        consumer.set_batch_events_max(u64::MAX);
        let mut claim = producer.claim(2);
        claim.fill(|s, v| *v = s);
        claim.publish();
        let mut seen = Vec::new();
        {
            let batch = consumer.wait_batch().unwrap();
            assert_eq!(batch.len(), 2);
            batch.for_each(|s, v, _| seen.push((s, *v)));
        }
        assert_eq!(seen, vec![(1, 1), (2, 2)]);
        assert!(
            consumer.try_batch().is_none(),
            "the consumer moved past both"
        );
    }
}
