//! Intake: transactions validated and encoded by the appender, queued for the writer.
//!
//! Encoding happens on the appender's thread so the single writer only checks conditions,
//! stamps indexes and checksums, and does I/O. An appender may hand over many independent
//! transactions in one submission (one allocation set, one queue push, one reply for all);
//! each still gets its own conditions, commit index and outcome. The queue is bounded in
//! bytes by a semaphore: an appender takes permits for its encoded size before queueing and
//! the writer returns them when it takes the batch, so a full intake makes appenders wait.

use spindle_core::record::encode_payload;
use spindle_core::{Index, ItemKey, Transaction};
use tokio::sync::oneshot;

use crate::error::{AppendError, TruncateError};
use crate::frame::FRAME_HEADER_BYTES;

/// Where one record's frame and key sit inside `Prepared::frames`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordSpan {
    pub frame_start: u32,
    pub frame_end: u32,
    pub key_start: u32,
    pub key_end: u32,
}

/// One transaction of a submission: its records, conditions and frame bytes.
#[derive(Clone, Debug)]
pub(crate) struct TxnSpan {
    pub records: std::ops::Range<usize>,
    pub conditions: std::ops::Range<usize>,
    pub frames: std::ops::Range<usize>,
    /// Refused before queueing (bad input): no frames, this is its outcome.
    pub rejected: Option<AppendError>,
}

/// "The item with this encoded key is at version `expected`".
#[derive(Debug)]
pub(crate) struct PreparedCondition {
    pub key_bytes: Vec<u8>,
    pub expected: Index,
    pub key: ItemKey,
}

/// The most frame bytes `Prepared::new` reserves ahead from its first transaction's size.
const FRAMES_RESERVE_MAX: usize = 32 << 20;
/// The most frame bytes one submission to the writer holds before its last transaction
/// (record offsets into its frames are `u32`): `append_many` splits a larger call.
pub(crate) const PART_BYTES_MAX: usize = 1 << 30;

/// The most records `Prepared::new` reserves ahead.
const RECORDS_RESERVE_MAX: usize = 1 << 20;

/// Frame buffers of large submissions, given back by the writer once it has copied them
/// out, so the next large submission encodes into memory already faulted in instead of
/// memory the allocator gave back to the system and faults in again, zeroed, on first
/// touch (a sixth of a bulk import's CPU: docs/benchmarks/import.md, "Fresh pages"). It
/// keeps at most `POOLED_BUFFERS_MAX` buffers of `POOLED_BUFFER_BYTES_MIN ..=
/// POOLED_BUFFER_BYTES_MAX` capacity each (at most 128 MiB, held once submissions that
/// large have been made); a submission of less than `POOLED_BUFFER_BYTES_MIN` takes none,
/// and a buffer that stayed smaller is not kept.
#[derive(Debug, Default)]
pub(crate) struct FramePool {
    free: parking_lot::Mutex<Vec<Vec<u8>>>,
}

/// Smallest frame buffer a submission takes from the pool or gives back.
pub(crate) const POOLED_BUFFER_BYTES_MIN: usize = 1 << 20;
/// Largest frame buffer kept.
pub(crate) const POOLED_BUFFER_BYTES_MAX: usize = 2 * FRAMES_RESERVE_MAX;
/// Buffers kept at once.
pub(crate) const POOLED_BUFFERS_MAX: usize = 2;

impl FramePool {
    /// An empty buffer for a submission of about `bytes` of frames: a kept one if the
    /// submission is large and one is free, else a new one.
    fn take(&self, bytes: usize) -> Vec<u8> {
        if bytes < POOLED_BUFFER_BYTES_MIN {
            return Vec::new();
        }
        self.free.lock().pop().unwrap_or_default()
    }

    /// The writer is done with `frames`: keep them if they are of a kept size and there is
    /// room.
    pub fn give(&self, mut frames: Vec<u8>) {
        if !(POOLED_BUFFER_BYTES_MIN..=POOLED_BUFFER_BYTES_MAX).contains(&frames.capacity()) {
            return;
        }
        frames.clear();
        let mut free = self.free.lock();
        if free.len() < POOLED_BUFFERS_MAX {
            free.push(frames);
        }
    }

    #[cfg(test)]
    fn kept(&self) -> usize {
        self.free.lock().len()
    }
}

/// Transactions encoded as frames whose index and checksum are still zero.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    pub frames: Vec<u8>,
    pub records: Vec<RecordSpan>,
    pub txns: Vec<TxnSpan>,
    pub conditions: Vec<PreparedCondition>,
}

impl Prepared {
    /// Validate and encode each transaction; bad ones are marked rejected, not queued. A
    /// large submission's frames go into a buffer from `pool` when one is free.
    pub fn new<'a>(txns: impl IntoIterator<Item = &'a Transaction>, pool: &FramePool) -> Self {
        Self::new_part(txns, pool, PART_BYTES_MAX).0
    }

    /// `new` of the first transactions of `txns`, stopping once their frames reach
    /// `bytes_max` (at least one is taken; a transaction's frames are at most
    /// `TXN_FRAME_BYTES_MAX`); also returns how many it took. Offsets into the frames are
    /// `u32`, so a part stays well below 4 GiB.
    pub fn new_part<'a>(
        txns: impl IntoIterator<Item = &'a Transaction>,
        pool: &FramePool,
        bytes_max: usize,
    ) -> (Self, usize) {
        let bytes_max = bytes_max.min(PART_BYTES_MAX);
        let mut p = Prepared::default();
        let mut txns = txns.into_iter();
        let (count, _) = txns.size_hint();
        let Some(first) = txns.next() else {
            return (p, 0);
        };
        // Frames of about the first transaction's size for each (capped): a large
        // submission encodes into a kept buffer when one is free.
        let first_bytes = first
            .validate()
            .map_or(0, |n| n + first.writes.len() * FRAME_HEADER_BYTES);
        p.frames = pool.take(
            first_bytes
                .saturating_mul(count.max(1))
                .min(FRAMES_RESERVE_MAX),
        );
        p.push(first);
        // Room for the rest, assuming transactions like the first (capped), so a large
        // submission is not copied and faulted in again at every doubling of its buffers.
        if count > 1 {
            let rest = count - 1;
            p.txns.reserve(rest);
            p.records.reserve(
                rest.saturating_mul(p.records.len())
                    .min(RECORDS_RESERVE_MAX),
            );
            p.frames
                .reserve(rest.saturating_mul(p.frames.len()).min(FRAMES_RESERVE_MAX));
        }
        let mut taken = 1;
        for txn in txns {
            if p.frames.len() >= bytes_max {
                break;
            }
            p.push(txn);
            taken += 1;
        }
        (p, taken)
    }

    fn push(&mut self, txn: &Transaction) {
        let at = (self.records.len(), self.conditions.len(), self.frames.len());
        let payload_bytes = match txn.validate() {
            Ok(n) => n,
            Err(e) => {
                self.txns.push(TxnSpan {
                    records: at.0..at.0,
                    conditions: at.1..at.1,
                    frames: at.2..at.2,
                    rejected: Some(AppendError::Input(e)),
                });
                return;
            }
        };
        self.frames
            .reserve(payload_bytes + txn.writes.len() * FRAME_HEADER_BYTES);
        let last = txn.writes.len() - 1;
        for (i, w) in txn.writes.iter().enumerate() {
            let frame_start = self.frames.len();
            self.frames.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
            let key = encode_payload(i == last, &w.key, &w.value, &mut self.frames);
            let len = (self.frames.len() - frame_start - FRAME_HEADER_BYTES) as u32;
            self.frames[frame_start + 4..frame_start + 8].copy_from_slice(&len.to_le_bytes());
            self.records.push(RecordSpan {
                frame_start: frame_start as u32,
                frame_end: self.frames.len() as u32,
                key_start: key.start as u32,
                key_end: key.end as u32,
            });
        }
        for c in &txn.conditions {
            self.conditions.push(PreparedCondition {
                key_bytes: c.key.to_bytes(),
                expected: c.expected,
                key: c.key.clone(),
            });
        }
        self.txns.push(TxnSpan {
            records: at.0..self.records.len(),
            conditions: at.1..self.conditions.len(),
            frames: at.2..self.frames.len(),
            rejected: None,
        });
    }

    /// Encoded bytes (what the intake bound counts).
    pub fn bytes(&self) -> usize {
        self.frames.len()
    }

    /// Whether any transaction needs the writer.
    pub fn has_work(&self) -> bool {
        self.txns.iter().any(|t| t.rejected.is_none())
    }
}

/// Where a submission's outcomes go.
#[derive(Debug)]
pub(crate) enum Reply {
    One(oneshot::Sender<Result<Index, AppendError>>),
    Many(oneshot::Sender<Vec<Result<Index, AppendError>>>),
}

impl Reply {
    pub fn send(self, mut results: Vec<Result<Index, AppendError>>) {
        match self {
            Reply::One(tx) => {
                let r = results.pop().expect("one transaction, one outcome");
                let _ = tx.send(r);
            }
            Reply::Many(tx) => {
                let _ = tx.send(results);
            }
        }
    }
}

/// A queued submission and where its outcomes go.
#[derive(Debug)]
pub(crate) struct Pending {
    pub prepared: Prepared,
    pub reply: Reply,
    /// Intake permits held (the encoded bytes, capped at the intake bound).
    pub permits: usize,
}

/// Work for the writer besides appends.
#[derive(Debug)]
pub(crate) enum Command {
    Truncate {
        below: Index,
        reply: oneshot::Sender<Result<Index, TruncateError>>,
    },
}

/// The queue the writer drains.
#[derive(Debug, Default)]
pub(crate) struct Intake {
    pub queue: Vec<Pending>,
    pub queued_bytes: usize,
    pub commands: Vec<Command>,
    pub closed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode_frame, seal_frame};
    use spindle_core::Value;

    #[test]
    fn prepared_frames_seal_into_valid_frames() {
        let txn = Transaction::new()
            .write(ItemKey::node("a").unwrap(), Value::json("{}").unwrap())
            .write(ItemKey::edge("a", "l", "b").unwrap(), Value::TOMBSTONE);
        let bad = Transaction::new();
        let mut p = Prepared::new([&bad, &txn], &FramePool::default());
        assert!(matches!(p.txns[0].rejected, Some(AppendError::Input(_))));
        assert_eq!(p.txns[1].records, 0..2);
        let spans = p.records.clone();
        for (i, s) in spans.iter().enumerate() {
            let frame = &mut p.frames[s.frame_start as usize..s.frame_end as usize];
            seal_frame(frame, Index::new(10 + i as u64));
            let f = decode_frame(frame, Index::new(10 + i as u64), 1 << 20).unwrap();
            assert_eq!(
                f.payload[0] & 1,
                u8::from(i == 1),
                "only the last record commits"
            );
        }
        let key = &p.frames[spans[1].key_start as usize..spans[1].key_end as usize];
        assert_eq!(
            key,
            ItemKey::edge("a", "l", "b").unwrap().to_bytes().as_slice()
        );
    }

    #[test]
    fn a_part_stops_once_its_frames_reach_the_bound() {
        let value = Value::json(format!(r#"{{"pad":"{}"}}"#, "x".repeat(100))).unwrap();
        let txns: Vec<_> = (0..10)
            .map(|i| Transaction::single(ItemKey::node(format!("n{i}")).unwrap(), value.clone()))
            .collect();
        let pool = FramePool::default();
        let (whole, taken) = Prepared::new_part(&txns, &pool, usize::MAX);
        assert_eq!(taken, 10);
        let one = whole.frames.len() / 10;
        // Taken while the frames so far are below the bound: the one that reaches it is last.
        let (part, taken) = Prepared::new_part(&txns, &pool, 2 * one + 1);
        assert_eq!((taken, part.txns.len(), part.frames.len()), (3, 3, 3 * one));
        let (part, taken) = Prepared::new_part(&txns, &pool, 2 * one);
        assert_eq!((taken, part.frames.len()), (2, 2 * one));
        // At least one, however small the bound.
        let (part, taken) = Prepared::new_part(&txns[4..], &pool, 0);
        assert_eq!((taken, part.txns.len()), (1, 1));
        assert_eq!(part.frames, whole.frames[4 * one..5 * one]);
        assert_eq!(Prepared::new_part(&txns[..0], &pool, 0).1, 0);
    }

    #[test]
    fn large_submissions_reuse_frame_buffers_and_small_ones_do_not() {
        let pool = FramePool::default();
        let value = Value::json(format!(r#"{{"pad":"{}"}}"#, "x".repeat(1000))).unwrap();
        let txns: Vec<_> = (0..2000)
            .map(|i| Transaction::single(ItemKey::node(format!("n{i}")).unwrap(), value.clone()))
            .collect();
        let first = Prepared::new(&txns, &pool);
        assert!(first.frames.len() >= POOLED_BUFFER_BYTES_MIN);
        let at = first.frames.as_ptr();
        pool.give(first.frames);
        assert_eq!(pool.kept(), 1);
        let second = Prepared::new(&txns, &pool);
        assert_eq!(second.frames.as_ptr(), at, "the kept buffer was not reused");
        assert_eq!(pool.kept(), 0);
        // Encoded into a kept buffer or a new one, the frames are the same bytes.
        let fresh = Prepared::new(&txns, &FramePool::default());
        assert_eq!(second.frames, fresh.frames);
        // A small submission takes nothing and its buffer is not kept.
        pool.give(second.frames);
        let small = Prepared::new(&txns[..1], &pool);
        assert_eq!(pool.kept(), 1);
        pool.give(small.frames);
        assert_eq!(pool.kept(), 1);
        // One large transaction takes a kept buffer too.
        let big = Value::json(format!(r#"{{"pad":"{}"}}"#, "x".repeat(600 << 10))).unwrap();
        let one = (0..3).fold(Transaction::new(), |t, i| {
            t.write(ItemKey::node(format!("big{i}")).unwrap(), big.clone())
        });
        let single = Prepared::new([&one], &pool);
        assert_eq!(
            pool.kept(),
            0,
            "a single large transaction took no kept buffer"
        );
        pool.give(single.frames);
        // At most `POOLED_BUFFERS_MAX` are kept.
        for _ in 0..POOLED_BUFFERS_MAX + 2 {
            pool.give(Vec::with_capacity(POOLED_BUFFER_BYTES_MIN));
        }
        assert_eq!(pool.kept(), POOLED_BUFFERS_MAX);
        pool.give(Vec::with_capacity(POOLED_BUFFER_BYTES_MAX + 1));
        assert_eq!(pool.kept(), POOLED_BUFFERS_MAX);
    }
}
