//! Intake: transactions validated and encoded by the appender, queued for the writer.
//!
//! Encoding happens on the appender's thread so the single writer only checks conditions,
//! stamps indexes and checksums, and does I/O. The queue is bounded in bytes by a semaphore:
//! an appender takes permits for its encoded size before queueing and the writer returns them
//! when it takes the batch, so a full intake makes appenders wait (backpressure).

use spindle_core::record::encode_payload;
use spindle_core::{Index, ItemKey, Transaction};
use tokio::sync::oneshot;

use crate::error::AppendError;
use crate::frame::FRAME_HEADER_BYTES;

/// Where one record's frame and key sit inside `PreparedTxn::frames`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordSpan {
    pub frame_start: u32,
    pub frame_end: u32,
    pub key_start: u32,
    pub key_end: u32,
}

/// A transaction encoded as frames whose index and checksum are still zero.
#[derive(Debug)]
pub(crate) struct PreparedTxn {
    pub frames: Vec<u8>,
    pub records: Vec<RecordSpan>,
    /// Encoded key, expected version and the key itself (for error messages).
    pub conditions: Vec<(Vec<u8>, Index, ItemKey)>,
}

impl PreparedTxn {
    /// Validate and encode. Bad input is refused here, before anything is queued.
    pub fn new(txn: &Transaction) -> Result<Self, AppendError> {
        let payload_bytes = txn.validate()?;
        let mut frames = Vec::with_capacity(payload_bytes + txn.writes.len() * FRAME_HEADER_BYTES);
        let mut records = Vec::with_capacity(txn.writes.len());
        let last = txn.writes.len() - 1;
        for (i, w) in txn.writes.iter().enumerate() {
            let frame_start = frames.len();
            frames.extend_from_slice(&[0u8; FRAME_HEADER_BYTES]);
            let key = encode_payload(i == last, &w.key, &w.value, &mut frames);
            let len = (frames.len() - frame_start - FRAME_HEADER_BYTES) as u32;
            frames[frame_start..frame_start + 4].copy_from_slice(&len.to_le_bytes());
            records.push(RecordSpan {
                frame_start: frame_start as u32,
                frame_end: frames.len() as u32,
                key_start: key.start as u32,
                key_end: key.end as u32,
            });
        }
        let conditions = txn
            .conditions
            .iter()
            .map(|c| (c.key.to_bytes(), c.expected, c.key.clone()))
            .collect();
        Ok(PreparedTxn {
            frames,
            records,
            conditions,
        })
    }

    pub fn bytes(&self) -> usize {
        self.frames.len()
    }
}

/// A queued append and where its outcome goes.
#[derive(Debug)]
pub(crate) struct Pending {
    pub txn: PreparedTxn,
    pub reply: oneshot::Sender<Result<Index, AppendError>>,
}

/// Work for the writer besides appends.
#[derive(Debug)]
pub(crate) enum Command {
    Truncate {
        below: Index,
        reply: oneshot::Sender<Result<Index, crate::error::TruncateError>>,
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
            .write(ItemKey::edge("a", "l", "b").unwrap(), Value::Tombstone);
        let mut p = PreparedTxn::new(&txn).unwrap();
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
}
