//! The feed: the appender announces every acknowledged batch, payloads included, on the
//! core NATS subject `spn.<stream>.feed`, and every process that tails the log keeps the
//! most recent announced records in memory, so a reader at the head of the log takes them
//! from there instead of asking the stream for each record again (docs/cluster.md, "The
//! feed").
//!
//! The feed is only a cache in front of the stream. A piece is published after JetStream
//! acknowledged its batch, so it holds durable records at the sequences the stream gave
//! them; core NATS may drop pieces (a slow subscriber, a reconnect), and a reader that
//! finds a record missing from the cache reads it from the stream as before. A piece is
//! checked with CRC32C and ignored (with a warning) if it does not verify.
//!
//! Piece layout, little-endian: magic `SPF1`, stream id (u64: the stream's creation time in
//! nanoseconds, so a piece of another stream of the same name is refused), first sequence
//! (u64), durable index (u64: the batch's last sequence in the batch's last piece, else 0),
//! record count (u32), then per record its payload length (u32) and payload (the record
//! codec of `spindle_core::record`, as stored), then CRC32C (u32) of everything before it.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

const MAGIC: &[u8; 4] = b"SPF1";
const HEADER_LEN: usize = 4 + 8 + 8 + 8 + 4;
/// What the cache counts per record besides its payload (its handle in the queue).
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 48;

/// One announced piece of a batch.
#[derive(Debug, PartialEq)]
pub(crate) struct Piece {
    pub stream: u64,
    pub first: u64,
    /// The batch's last sequence if this is its last piece (a durable commit index), else 0.
    pub durable: u64,
    pub payloads: Vec<Bytes>,
}

/// The pieces announcing a batch of `payloads` stored from sequence `first` in the stream
/// `stream`, each at most `piece_bytes_max` long unless one record alone is longer.
pub(crate) fn encode(
    stream: u64,
    first: u64,
    payloads: &[&Bytes],
    piece_bytes_max: usize,
) -> Vec<Bytes> {
    let last = first + payloads.len() as u64 - 1;
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < payloads.len() {
        let mut end = start;
        let mut len = HEADER_LEN + 4;
        while end < payloads.len()
            && (end == start || len + 4 + payloads[end].len() <= piece_bytes_max)
        {
            len += 4 + payloads[end].len();
            end += 1;
        }
        let mut buf = BytesMut::with_capacity(len);
        buf.put_slice(MAGIC);
        buf.put_u64_le(stream);
        buf.put_u64_le(first + start as u64);
        buf.put_u64_le(if end == payloads.len() { last } else { 0 });
        buf.put_u32_le((end - start) as u32);
        for p in &payloads[start..end] {
            buf.put_u32_le(p.len() as u32);
            buf.put_slice(p);
        }
        let crc = crc32c::crc32c(&buf);
        buf.put_u32_le(crc);
        pieces.push(buf.freeze());
        start = end;
    }
    pieces
}

/// Parse and verify one piece; its payloads share `msg`'s memory.
pub(crate) fn decode(msg: &Bytes) -> Result<Piece, String> {
    if msg.len() < HEADER_LEN + 4 || &msg[..4] != MAGIC {
        return Err(format!("not a feed piece ({} bytes)", msg.len()));
    }
    let body = msg.len() - 4;
    let stored = (&msg[body..]).get_u32_le();
    if crc32c::crc32c(&msg[..body]) != stored {
        return Err("feed piece fails its CRC32C".into());
    }
    let mut head = &msg[4..HEADER_LEN];
    let stream = head.get_u64_le();
    let first = head.get_u64_le();
    let durable = head.get_u64_le();
    let count = head.get_u32_le() as usize;
    if first == 0 {
        return Err("feed piece starts at sequence 0".into());
    }
    let mut at = HEADER_LEN;
    let mut payloads = Vec::with_capacity(count.min(body / 4));
    for _ in 0..count {
        if at + 4 > body {
            return Err("feed piece ends inside a record length".into());
        }
        let len = (&msg[at..at + 4]).get_u32_le() as usize;
        at += 4;
        if len > body - at {
            return Err("feed piece ends inside a record".into());
        }
        payloads.push(msg.slice(at..at + len));
        at += len;
    }
    if at != body {
        return Err("feed piece has bytes after its records".into());
    }
    let Some(end) = first.checked_add(count as u64) else {
        return Err(format!(
            "feed piece from {first} runs past the last sequence"
        ));
    };
    if durable != 0 {
        if durable != end - 1 {
            return Err(format!(
                "feed piece from {first} with {count} records names durable index {durable}"
            ));
        }
        // A durable index ends a transaction: its record carries the commit bit.
        if payloads
            .last()
            .and_then(|p| p.first())
            .is_none_or(|flags| flags & spindle_core::RecordFlags::COMMIT == 0)
        {
            return Err(format!(
                "feed piece names durable index {durable}, whose record does not commit"
            ));
        }
    }
    Ok(Piece {
        stream,
        first,
        durable,
        payloads,
    })
}

/// The most recent announced records: consecutive sequences from `first`, at most
/// `bytes_max` payload bytes (the oldest go first).
#[derive(Debug)]
pub(crate) struct FeedCache {
    first: u64,
    records: VecDeque<Bytes>,
    bytes: usize,
    bytes_max: usize,
}

impl FeedCache {
    pub fn new(bytes_max: usize) -> Self {
        FeedCache {
            first: 0,
            records: VecDeque::new(),
            bytes: 0,
            bytes_max,
        }
    }

    /// The sequence after the last cached record (0 when empty).
    fn end(&self) -> u64 {
        if self.records.is_empty() {
            0
        } else {
            self.first + self.records.len() as u64
        }
    }

    /// Add records stored from sequence `first`. Records already cached are skipped; a gap
    /// after the cached ones empties the cache first (readers fetch the gap).
    pub fn insert(&mut self, first: u64, payloads: impl IntoIterator<Item = Bytes>) {
        if self.bytes_max == 0 {
            return;
        }
        let end = self.end();
        let mut seq = first;
        for p in payloads {
            if end != 0 && seq < end {
                seq += 1;
                continue;
            }
            if self.records.is_empty() {
                self.first = seq;
            } else if seq != self.first + self.records.len() as u64 {
                self.records.clear();
                self.bytes = 0;
                self.first = seq;
            }
            self.bytes += p.len() + RECORD_OVERHEAD_BYTES;
            self.records.push_back(p);
            seq += 1;
        }
        while self.bytes > self.bytes_max {
            let Some(p) = self.records.pop_front() else {
                break;
            };
            self.bytes -= p.len() + RECORD_OVERHEAD_BYTES;
            self.first += 1;
        }
    }

    /// Forget the records below `first` (the stream was purged below it).
    pub fn drop_below(&mut self, first: u64) {
        while self.first < first {
            let Some(p) = self.records.pop_front() else {
                break;
            };
            self.bytes -= p.len() + RECORD_OVERHEAD_BYTES;
            self.first += 1;
        }
    }

    /// Up to `count` cached payloads from sequence `from` (empty if `from` is not cached).
    pub fn take(&self, from: u64, count: usize) -> Vec<Bytes> {
        if self.records.is_empty() || from < self.first || from >= self.end() {
            return Vec::new();
        }
        let at = (from - self.first) as usize;
        self.records.range(at..).take(count).cloned().collect()
    }

    /// The first cached sequence at or after `from`, if any.
    pub fn next_cached(&self, from: u64) -> Option<u64> {
        (from < self.end()).then(|| from.max(self.first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use spindle_core::RecordFlags;

    /// Payloads whose flag byte says "commit", the rest telling them apart.
    fn payloads(n: usize, len: usize) -> Vec<Bytes> {
        (0..n)
            .map(|i| {
                let mut v = vec![i as u8; len + i % 3];
                v[0] = RecordFlags::COMMIT;
                Bytes::from(v)
            })
            .collect()
    }

    /// A piece laid out by hand, with a correct CRC.
    fn raw_piece(first: u64, durable: u64, payloads: &[Bytes]) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_slice(MAGIC);
        buf.put_u64_le(9);
        buf.put_u64_le(first);
        buf.put_u64_le(durable);
        buf.put_u32_le(payloads.len() as u32);
        for p in payloads {
            buf.put_u32_le(p.len() as u32);
            buf.put_slice(p);
        }
        let crc = crc32c::crc32c(&buf);
        buf.put_u32_le(crc);
        buf.freeze()
    }

    #[test]
    fn pieces_that_break_the_rules_are_refused() {
        let recs = payloads(2, 20);
        assert!(decode(&raw_piece(5, 6, &recs)).is_ok());
        // Past the last sequence.
        assert!(decode(&raw_piece(u64::MAX, 0, &recs)).is_err());
        // A durable index that is not the piece's last sequence.
        assert!(decode(&raw_piece(5, 7, &recs)).is_err());
        // A durable index whose record does not commit.
        let mut open = recs.clone();
        open[1] = Bytes::from(vec![0u8; 20]);
        assert!(decode(&raw_piece(5, 6, &open)).is_err());
        assert!(decode(&raw_piece(5, 0, &open)).is_ok());
        // Sequence 0 does not exist.
        assert!(decode(&raw_piece(0, 0, &recs)).is_err());
    }

    #[test]
    fn pieces_round_trip_and_split_under_the_bound() {
        let recs = payloads(50, 100);
        let refs: Vec<&Bytes> = recs.iter().collect();
        let pieces = encode(9, 7, &refs, 1000);
        assert!(pieces.len() > 1);
        let mut seq = 7;
        let mut got = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            assert!(p.len() <= 1000);
            let piece = decode(p).unwrap();
            assert_eq!(piece.stream, 9);
            assert_eq!(piece.first, seq);
            let last = i == pieces.len() - 1;
            assert_eq!(piece.durable, if last { 56 } else { 0 });
            seq += piece.payloads.len() as u64;
            got.extend(piece.payloads);
        }
        assert_eq!(got, recs);
        // One record longer than the bound still goes, alone.
        let big = [Bytes::from(vec![1u8; 5000])];
        let pieces = encode(9, 1, &big.iter().collect::<Vec<_>>(), 1000);
        assert_eq!(pieces.len(), 1);
        assert_eq!(decode(&pieces[0]).unwrap().payloads[0], big[0]);
    }

    #[test]
    fn damaged_pieces_are_refused() {
        let recs = payloads(3, 20);
        let piece = encode(9, 1, &recs.iter().collect::<Vec<_>>(), 1 << 20).remove(0);
        for at in 0..piece.len() {
            let mut bad = piece.to_vec();
            bad[at] ^= 0x10;
            assert!(decode(&Bytes::from(bad)).is_err(), "flip at {at}");
        }
        for len in 0..piece.len() {
            assert!(decode(&piece.slice(..len)).is_err(), "cut at {len}");
        }
    }

    #[test]
    fn the_cache_keeps_consecutive_records_within_its_bound() {
        let mut cache = FeedCache::new(1000);
        let recs = payloads(30, 10);
        cache.insert(5, recs[..10].iter().cloned());
        assert_eq!(cache.take(5, 3), recs[..3].to_vec());
        assert_eq!(cache.take(14, 5), recs[9..10].to_vec());
        assert!(cache.take(4, 1).is_empty());
        assert!(cache.take(15, 1).is_empty());
        // Overlap is skipped, the rest appended.
        cache.insert(10, recs[5..15].iter().cloned());
        assert_eq!(cache.take(5, 100), recs[..15].to_vec());
        // A gap restarts the cache at the new piece.
        cache.insert(30, recs[20..22].iter().cloned());
        assert!(cache.take(5, 1).is_empty());
        assert_eq!(cache.next_cached(6), Some(30));
        assert_eq!(cache.take(30, 9), recs[20..22].to_vec());
        // The bound drops the oldest: records of 10, 11, 12 and 10 bytes, each counted with
        // its overhead, in room for the last two.
        let mut small = FeedCache::new(22 + 2 * RECORD_OVERHEAD_BYTES);
        small.insert(1, recs[..4].iter().cloned());
        assert!(small.take(2, 1).is_empty());
        assert_eq!(small.take(3, 2), recs[2..4].to_vec());
        // A purge drops what lies below the stream's new first sequence.
        small.drop_below(4);
        assert!(small.take(3, 1).is_empty());
        assert_eq!(small.take(4, 1), recs[3..4].to_vec());
        small.drop_below(100);
        assert!(small.take(4, 1).is_empty());
        small.insert(7, recs[..1].iter().cloned());
        assert_eq!(small.take(7, 1), recs[..1].to_vec());
        // A cache of size 0 keeps nothing.
        let mut none = FeedCache::new(0);
        none.insert(1, recs[..2].iter().cloned());
        assert!(none.take(1, 1).is_empty());
    }
}
