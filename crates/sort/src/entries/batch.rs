//! An in-memory batch of encoded entries and its stable sort.
//!
//! Entries are kept in one byte arena in their bucket-file encoding (so a spill copies bytes
//! as they are) with a small index of [`Slot`]s; sorting moves only the slots. The sort is
//! stable, so equal keys stay in push order. With more than one thread the slots are sorted
//! in chunks on scoped threads and merged, earlier chunks first on ties (still stable).

use std::cmp::Ordering;

/// Bytes of the frame header in front of every entry: key length (u32 LE), value length
/// (u32 LE), CRC32C of key then value (u32 LE).
pub(crate) const HEADER_BYTES: usize = 12;

/// Memory one entry costs in the index, counted against the budget: the slot and the
/// stable sort's scratch copy of it.
pub(crate) const SLOT_BYTES: usize = 2 * std::mem::size_of::<Slot>();

/// Where one entry lives in the arena, with the key's first 8 bytes (big-endian, zero
/// padded) so most comparisons never touch the arena.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    prefix: u64,
    offset: usize,
    key_len: u32,
    value_len: u32,
}

/// Encoded entries in arrival order plus their (possibly sorted) index.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    bytes: Vec<u8>,
    slots: Vec<Slot>,
    /// The two-way merge's output, kept from one sort to the next (its memory is the
    /// scratch copy `SLOT_BYTES` counts).
    scratch: Vec<Slot>,
}

/// Memory one entry of these lengths costs in a batch.
pub(crate) fn cost_bytes(key_len: usize, value_len: usize) -> u64 {
    (HEADER_BYTES + key_len + value_len + SLOT_BYTES) as u64
}

/// Appends one encoded entry (header, key, value) to `out`.
pub(crate) fn encode(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let mut crc = crc32c::crc32c(key);
    crc = crc32c::crc32c_append(crc, value);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) key_len: usize,
    pub(crate) value_len: usize,
    pub(crate) crc: u32,
}

impl Header {
    pub(crate) fn decode(bytes: &[u8; HEADER_BYTES]) -> Header {
        let word =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        Header {
            key_len: word(0) as usize,
            value_len: word(4) as usize,
            crc: word(8),
        }
    }

    pub(crate) fn body_bytes(&self) -> usize {
        self.key_len + self.value_len
    }

    /// Whether `body` (key then value) matches the header's checksum.
    pub(crate) fn verify(&self, body: &[u8]) -> bool {
        crc32c::crc32c(body) == self.crc
    }
}

/// The key's first 8 bytes as a big-endian integer, zero padded: monotone in the key order
/// (`a <= b` implies `prefix_of(a) <= prefix_of(b)`).
pub(crate) fn prefix_of(key: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = key.len().min(8);
    word[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(word)
}

impl Batch {
    /// Memory the batch costs against the budget.
    pub(crate) fn cost_bytes(&self) -> u64 {
        (self.bytes.len() + self.slots.len() * SLOT_BYTES) as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Bytes allocated for the arena, and for the index (what the batch holds on to).
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> (u64, u64) {
        (
            self.bytes.capacity() as u64,
            (self.slots.capacity() * std::mem::size_of::<Slot>()) as u64,
        )
    }

    /// Empties the batch and keeps its memory for the next one.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.slots.clear();
    }

    /// Makes room in the arena for a batch of up to `cost_bytes` (as counted by
    /// `cost_bytes`, which the arena's bytes never exceed), so that filling it never
    /// reallocates: a growing arena copies itself and faults in fresh pages at every
    /// doubling. Pages of the reservation are touched only as they fill. (The index of
    /// slots, a fifth of the arena's size or less, still grows as it fills.)
    pub(crate) fn reserve(&mut self, cost_bytes: u64) {
        let cost = usize::try_from(cost_bytes).unwrap_or(usize::MAX);
        self.bytes.reserve(cost.saturating_sub(self.bytes.len()));
    }

    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        let offset = self.bytes.len();
        encode(&mut self.bytes, key, value);
        self.slots.push(Slot {
            prefix: prefix_of(key),
            offset,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        });
    }

    /// Memory this batch would hold as the batch of a bucket of `len` bytes and `entries`
    /// entries: each of its arena, index and scratch at least what the bucket needs.
    pub(crate) fn held_bytes_for(&self, len: usize, entries: usize) -> u64 {
        let slot = std::mem::size_of::<Slot>();
        (self.bytes.capacity().max(len)
            + self.slots.capacity().max(entries) * slot
            + self.scratch.capacity().max(entries) * slot) as u64
    }

    /// Memory the batch holds now (arena, index and scratch).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held_bytes_for(0, 0)
    }

    /// Room in the index (exactly) for `entries` more.
    pub(crate) fn reserve_index(&mut self, entries: usize) {
        self.slots.reserve_exact(entries);
    }

    /// This batch's index and scratch with `bytes` as its arena, not indexed yet.
    pub(crate) fn with_bytes(mut self, bytes: Vec<u8>) -> Batch {
        self.slots.clear();
        self.bytes = bytes;
        self
    }

    /// Indexes the arena's frames (a whole bucket file's bytes); `Err(offset)` at the
    /// first frame that is cut short or fails its checksum.
    pub(crate) fn index_encoded(mut self) -> Result<Batch, u64> {
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        let bytes = &self.bytes;
        let mut at = 0usize;
        while at < bytes.len() {
            let Some(head) = bytes.get(at..at + HEADER_BYTES) else {
                return Err(at as u64);
            };
            let header = Header::decode(head.try_into().expect("header slice"));
            let body_at = at + HEADER_BYTES;
            let Some(body) = bytes.get(body_at..body_at + header.body_bytes()) else {
                return Err(at as u64);
            };
            if !header.verify(body) {
                return Err(at as u64);
            }
            let key = &body[..header.key_len];
            slots.push(Slot {
                prefix: prefix_of(key),
                offset: at,
                key_len: header.key_len as u32,
                value_len: header.value_len as u32,
            });
            at = body_at + header.body_bytes();
        }
        self.slots = slots;
        Ok(self)
    }

    /// Gives up the arena (to read the next bucket into) and keeps the rest.
    pub(crate) fn take_bytes(&mut self) -> Vec<u8> {
        self.slots.clear();
        std::mem::take(&mut self.bytes)
    }

    /// `prefix_of` the key of entry `i`.
    pub(crate) fn prefix(&self, i: usize) -> u64 {
        self.slots[i].prefix
    }

    pub(crate) fn key(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        let at = s.offset + HEADER_BYTES;
        &self.bytes[at..at + s.key_len as usize]
    }

    pub(crate) fn value(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        let at = s.offset + HEADER_BYTES + s.key_len as usize;
        &self.bytes[at..at + s.value_len as usize]
    }

    /// The entry's whole frame, as it goes into a bucket file.
    pub(crate) fn encoded(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        &self.bytes[s.offset..s.offset + HEADER_BYTES + s.key_len as usize + s.value_len as usize]
    }

    fn compare(&self, a: &Slot, b: &Slot) -> Ordering {
        a.prefix.cmp(&b.prefix).then_with(|| {
            let ka = &self.bytes[a.offset + HEADER_BYTES..][..a.key_len as usize];
            let kb = &self.bytes[b.offset + HEADER_BYTES..][..b.key_len as usize];
            ka.cmp(kb)
        })
    }

    /// Sorts the index by key, stably, on up to `threads` threads.
    pub(crate) fn sort(&mut self, threads: usize) {
        let mut slots = std::mem::take(&mut self.slots);
        let threads = threads.clamp(1, 64);
        // Below this many entries a thread costs more than it saves.
        const PARALLEL_ENTRIES_MIN: usize = 1 << 16;
        // An unstable sort with push order (the arena offset, which rises with it) as the
        // tie-break: the stable order, without the scratch memory a stable sort allocates
        // beyond what the budget counts (`SLOT_BYTES`).
        let in_order = |a: &Slot, b: &Slot| self.compare(a, b).then(a.offset.cmp(&b.offset));
        if threads == 1 || slots.len() < PARALLEL_ENTRIES_MIN {
            slots.sort_unstable_by(in_order);
        } else {
            let chunk = slots.len().div_ceil(threads);
            std::thread::scope(|scope| {
                for part in slots.chunks_mut(chunk) {
                    scope.spawn(|| part.sort_unstable_by(in_order));
                }
            });
            // Runs merged pairwise, back and forth between the index and one scratch
            // index kept for it: two indexes' memory at any time, as `SLOT_BYTES` counts,
            // whatever the thread count (one pass with two threads).
            let mut out = std::mem::take(&mut self.scratch);
            let mut run = chunk;
            while run < slots.len() {
                out.clear();
                out.reserve_exact(slots.len());
                for pair in slots.chunks(2 * run) {
                    let (a, b) = pair.split_at(run.min(pair.len()));
                    self.merge_two_into(a, b, &mut out);
                }
                std::mem::swap(&mut slots, &mut out);
                run *= 2;
            }
            self.scratch = out;
        }
        self.slots = slots;
    }

    /// Appends the merge of sorted `a` and `b` to `out`; on equal keys `a` goes first,
    /// which keeps push order. `out` must have room (no growth past what the budget counts).
    fn merge_two_into(&self, a: &[Slot], b: &[Slot], out: &mut Vec<Slot>) {
        debug_assert!(out.capacity() - out.len() >= a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if self.compare(&b[j], &a[i]) == Ordering::Less {
                out.push(b[j]);
                j += 1;
            } else {
                out.push(a[i]);
                i += 1;
            }
        }
        out.extend_from_slice(&a[i..]);
        out.extend_from_slice(&b[j..]);
    }

    /// Splitters for `buckets_max` buckets: distinct keys at even quantiles of the (sorted)
    /// batch. At most `(buckets_max - 1) / 2` of them: each splitter brings a range bucket
    /// below it and an equality bucket for itself. Their keys take at most `bytes_max` in
    /// all (they are kept beside the batch and the bucket buffers: long keys give fewer
    /// buckets, still at even quantiles when the keys are of about one length), but for one
    /// splitter, which a non-empty batch always gets: without one a split would write its
    /// bucket again unchanged, for ever.
    pub(crate) fn splitters(&self, buckets_max: usize, bytes_max: usize) -> Vec<Vec<u8>> {
        let n = self.len();
        let key_bytes: usize = self.slots.iter().map(|s| s.key_len as usize).sum();
        let mean = key_bytes.div_ceil(n.max(1)).max(1);
        let want = ((buckets_max.max(3) - 1) / 2)
            .min(n)
            .min((bytes_max / mean).max(1));
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(want);
        let mut taken = 0;
        for q in 1..=want {
            let i = (q * n / (want + 1)).min(n - 1);
            let key = self.key(i);
            // A key past the bytes left is passed over (a shorter one later may fit).
            if !out.is_empty() && taken + key.len() > bytes_max {
                continue;
            }
            if out.last().map(Vec::as_slice) != Some(key) {
                taken += key.len();
                out.push(key.to_vec());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries with many equal keys (so stability shows), enough of them that the sort runs
    /// on threads and merges.
    fn entries(n: usize, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let key = format!("k{:03}", (x >> 33) % 500).into_bytes();
                (key, (i as u64).to_be_bytes().to_vec())
            })
            .collect()
    }

    fn sorted(batch: &Batch) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..batch.len())
            .map(|i| (batch.key(i).to_vec(), batch.value(i).to_vec()))
            .collect()
    }

    #[test]
    fn threaded_sorts_are_stable_and_reuse_their_memory() {
        for threads in [2, 3, 2] {
            let mut batch = Batch::default();
            for round in 0..2u64 {
                let input = entries(PARALLEL_TEST_ENTRIES, round + threads as u64);
                batch.clear();
                for (k, v) in &input {
                    batch.push(k, v);
                }
                batch.sort(threads);
                let mut want = input;
                want.sort_by(|a, b| a.0.cmp(&b.0)); // stable: push order on ties
                assert!(
                    sorted(&batch) == want,
                    "{threads} threads, round {round}: not the stable order"
                );
            }
        }
        // A batch refilled from encoded bytes keeps its index memory and sorts the same.
        let mut batch = Batch::default();
        let input = entries(PARALLEL_TEST_ENTRIES, 9);
        for (k, v) in &input {
            batch.push(k, v);
        }
        let bytes = batch.take_bytes();
        let mut batch = batch
            .with_bytes(bytes)
            .index_encoded()
            .expect("intact frames");
        batch.sort(2);
        let mut want = input;
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert!(sorted(&batch) == want);
    }

    #[test]
    fn splitters_keep_within_their_bytes_at_even_quantiles() {
        let mut batch = Batch::default();
        for i in 0..1000u32 {
            let mut key = vec![b'k'; 10_000];
            key[..4].copy_from_slice(&i.to_be_bytes());
            batch.push(&key, b"v");
        }
        batch.sort(1);
        // Room for 127 short splitters, but for 6 of these keys only.
        let splitters = batch.splitters(255, 64 << 10);
        let bytes: usize = splitters.iter().map(Vec::len).sum();
        assert!(bytes <= 64 << 10, "{bytes}");
        assert_eq!(splitters.len(), 6);
        let firsts: Vec<u32> = splitters
            .iter()
            .map(|s| u32::from_be_bytes(s[..4].try_into().unwrap()))
            .collect();
        assert_eq!(firsts, [142, 285, 428, 571, 714, 857]);
        // Short keys: the count bounds them, not the bytes.
        let mut short = Batch::default();
        for i in 0..1000u32 {
            short.push(&i.to_be_bytes(), b"v");
        }
        short.sort(1);
        assert_eq!(short.splitters(255, 64 << 10).len(), 127);
        // Keys longer than the whole allowance: still one splitter, at the median.
        let one = batch.splitters(255, 1000);
        assert_eq!(one.len(), 1);
        assert_eq!(u32::from_be_bytes(one[0][..4].try_into().unwrap()), 500);
    }

    const PARALLEL_TEST_ENTRIES: usize = 100_000;
}
