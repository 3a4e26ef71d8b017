//! Disruptor-style ring buffers and deterministic pipelines.
//!
//! A [`Ring`] has preallocated slots, one [`Producer`] that claims and publishes batches in
//! place, and any number of [`Consumer`]s that read the same slots (multicast, no copies),
//! gate the producer (backpressure: [`Full`], or a blocking claim), and join and leave at
//! runtime at positions the caller chooses. [`pipeline`] composes rings and threads into
//! stages (map, fan-out and zip, shard and merge) whose output equals a sequential model's.
//! See `docs/ring.md` for the sequence protocol.
#![expect(
    unsafe_code,
    reason = "slots are shared between one writer and many readers through UnsafeCell; \
              the sequence protocol, not the borrow checker, keeps their accesses apart"
)]

mod consumer;
#[cfg(not(loom))]
pub mod pipeline;
mod producer;
mod registry;
mod ring;
mod sync;
mod wait;

pub use consumer::{Batch, Closed, Consumer};
pub use producer::{Claim, Full, Producer};
pub use ring::{ConsumerSnapshot, Overwritten, Ring, RingBuilder, RingError, RingSnapshot};
pub use wait::WaitStrategy;
