//! Bucket files: entries routed by key range into temporary files, and read back.
//!
//! A bucket file is a plain sequence of frames (see [`super::batch::encode`]): key length
//! u32 LE, value length u32 LE, CRC32C of key then value u32 LE, key, value. No file header:
//! the file is private to one sort and removed with its directory. Splitters `s_0 < … <
//! s_{m-1}` give `2m + 1` buckets: bucket `2i` holds keys in `(s_{i-1}, s_i)`, bucket `2i + 1`
//! holds keys equal to `s_i` (already in order: one key, push order), bucket `2m` keys above
//! `s_{m-1}`. Each bucket keeps its own write buffer, dropped when parked.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use super::batch::{prefix_of, Batch, Header, HEADER_BYTES, SLOT_BYTES};
use super::Entry;
use crate::SortError;

/// What a bucket holds, which decides how pass two treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Keys in an open range: sorted in memory, or split again if too large.
    Range,
    /// One key only: already in order, streamed as it is.
    Equal,
}

/// A finished bucket file waiting for pass two.
#[derive(Debug)]
pub(crate) struct Spilled {
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    pub(crate) file_bytes: u64,
    pub(crate) entries: u64,
    /// 0 for buckets of the first spill, +1 for each split.
    pub(crate) depth: u32,
}

impl Spilled {
    /// Memory needed to sort this bucket in one batch.
    pub(crate) fn sort_cost_bytes(&self) -> u64 {
        self.file_bytes + self.entries * SLOT_BYTES as u64
    }
}

/// Names temporary files inside the sort's private directory.
#[derive(Debug)]
pub(crate) struct TmpFiles {
    dir: tempfile::TempDir,
    next: u64,
}

impl TmpFiles {
    /// The private directory in `parent`; a full disk is `NoSpace` with `needed_bytes`.
    pub(crate) fn new(parent: &Path, needed_bytes: u64) -> Result<TmpFiles, SortError> {
        let dir = tempfile::Builder::new()
            .prefix(".spindle-sort-")
            .tempdir_in(parent)
            .map_err(|e| SortError::tmp_dir(parent, needed_bytes, e))?;
        Ok(TmpFiles { dir, next: 0 })
    }

    pub(crate) fn next_path(&mut self) -> PathBuf {
        self.next += 1;
        self.dir.path().join(format!("bucket-{:06}", self.next))
    }
}

#[derive(Debug)]
struct Open {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    file_bytes: u64,
    entries: u64,
}

/// The buckets of one spill or split, being written.
#[derive(Debug)]
pub(crate) struct BucketSet {
    splitters: Vec<Vec<u8>>,
    /// Each splitter's first 8 bytes (`prefix_of`): routing compares these first and
    /// compares whole keys only among splitters that share the key's prefix.
    prefixes: Vec<u64>,
    buckets: Vec<Option<Open>>,
    buffer_bytes: usize,
    depth: u32,
    /// Space the whole sort needs, for a full-disk message.
    pub(crate) needed_bytes: u64,
    pub(crate) written_bytes: u64,
}

impl BucketSet {
    /// Bytes of the splitters' keys (kept for as long as the set routes).
    pub(crate) fn splitter_bytes(&self) -> u64 {
        self.splitters.iter().map(|s| s.len() as u64).sum()
    }

    pub(crate) fn new(splitters: Vec<Vec<u8>>, buffer_bytes: usize, depth: u32) -> BucketSet {
        let n = 2 * splitters.len() + 1;
        BucketSet {
            prefixes: splitters.iter().map(|s| prefix_of(s)).collect(),
            splitters,
            buckets: (0..n).map(|_| None).collect(),
            buffer_bytes: buffer_bytes.max(HEADER_BYTES),
            depth,
            needed_bytes: 0,
            written_bytes: 0,
        }
    }

    /// Which bucket a key belongs to.
    pub(crate) fn route(&self, key: &[u8]) -> usize {
        self.route_prefixed(prefix_of(key), key)
    }

    /// `route` for a key whose `prefix_of` is known. `prefix_of` is monotone in the key
    /// order, so a splitter with a smaller (larger) prefix is a smaller (larger) key, and
    /// only splitters with the key's own prefix (usually none) need a byte comparison.
    pub(crate) fn route_prefixed(&self, prefix: u64, key: &[u8]) -> usize {
        let lo = self.prefixes.partition_point(|&p| p < prefix);
        let hi = lo + self.prefixes[lo..].partition_point(|&p| p == prefix);
        match self.splitters[lo..hi].binary_search_by(|s| s.as_slice().cmp(key)) {
            Ok(i) => 2 * (lo + i) + 1,
            Err(i) => 2 * (lo + i),
        }
    }

    /// Appends one encoded frame to bucket `b`.
    pub(crate) fn write(
        &mut self,
        tmp: &mut TmpFiles,
        b: usize,
        frame: &[u8],
    ) -> Result<(), SortError> {
        let needed = self.needed_bytes;
        if self.buckets[b].is_none() {
            let path = tmp.next_path();
            let file = File::create(&path).map_err(|e| SortError::write(&path, needed, e))?;
            self.buckets[b] = Some(Open {
                path,
                file,
                buf: Vec::new(),
                file_bytes: 0,
                entries: 0,
            });
        }
        let open = self.buckets[b].as_mut().expect("bucket opened above");
        if open.buf.len() + frame.len() > self.buffer_bytes {
            flush(open, needed)?;
        }
        if frame.len() > self.buffer_bytes {
            open.file
                .write_all(frame)
                .map_err(|e| SortError::write(&open.path, needed, e))?;
        } else {
            if open.buf.capacity() == 0 {
                open.buf.reserve_exact(self.buffer_bytes);
            }
            open.buf.extend_from_slice(frame);
        }
        open.file_bytes += frame.len() as u64;
        open.entries += 1;
        self.written_bytes += frame.len() as u64;
        Ok(())
    }

    /// Flushes bucket `b` and frees its buffer (it is reallocated on the next write).
    pub(crate) fn park(&mut self, b: usize) -> Result<(), SortError> {
        if let Some(open) = self.buckets[b].as_mut() {
            flush(open, self.needed_bytes)?;
            open.buf = Vec::new();
        }
        Ok(())
    }

    /// Writes every entry of a sorted batch: each bucket's entries are contiguous, so only
    /// one buffer is held at a time.
    pub(crate) fn write_sorted(
        &mut self,
        tmp: &mut TmpFiles,
        batch: &Batch,
    ) -> Result<(), SortError> {
        let mut current = None;
        for i in 0..batch.len() {
            let b = self.route_prefixed(batch.prefix(i), batch.key(i));
            if current != Some(b) {
                if let Some(prev) = current {
                    self.park(prev)?;
                }
                current = Some(b);
            }
            self.write(tmp, b, batch.encoded(i))?;
        }
        if let Some(prev) = current {
            self.park(prev)?;
        }
        Ok(())
    }

    /// Writes every entry of a batch in its index order, through the buckets' buffers.
    pub(crate) fn write_batch(
        &mut self,
        tmp: &mut TmpFiles,
        batch: &Batch,
    ) -> Result<(), SortError> {
        for i in 0..batch.len() {
            let b = self.route_prefixed(batch.prefix(i), batch.key(i));
            self.write(tmp, b, batch.encoded(i))?;
        }
        Ok(())
    }

    /// Flushes and closes every bucket, returning the non-empty ones in key order.
    pub(crate) fn finish(self) -> Result<Vec<Spilled>, SortError> {
        let needed = self.needed_bytes;
        let mut out = Vec::new();
        for (b, open) in self.buckets.into_iter().enumerate() {
            let Some(mut open) = open else { continue };
            flush(&mut open, needed)?;
            out.push(Spilled {
                path: open.path,
                kind: if b % 2 == 1 { Kind::Equal } else { Kind::Range },
                file_bytes: open.file_bytes,
                entries: open.entries,
                depth: self.depth,
            });
        }
        Ok(out)
    }
}

fn flush(open: &mut Open, needed_bytes: u64) -> Result<(), SortError> {
    if !open.buf.is_empty() {
        open.file
            .write_all(&open.buf)
            .map_err(|e| SortError::write(&open.path, needed_bytes, e))?;
        open.buf.clear();
    }
    Ok(())
}

/// Reads a bucket file's frames one at a time, checking each.
#[derive(Debug)]
pub(crate) struct FrameReader {
    path: PathBuf,
    reader: BufReader<File>,
    offset: u64,
    /// The file's length when opened: no frame reaches past it.
    len: u64,
}

impl FrameReader {
    pub(crate) fn open(path: &Path, buffer_bytes: usize) -> Result<FrameReader, SortError> {
        let file = File::open(path).map_err(|e| SortError::read(path, e))?;
        let len = file.metadata().map_err(|e| SortError::read(path, e))?.len();
        Ok(FrameReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(buffer_bytes.max(HEADER_BYTES), file),
            offset: 0,
            len,
        })
    }

    /// The next `(key, value)`, or `None` at a clean end of file.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, SortError> {
        let mut head = [0u8; HEADER_BYTES];
        let got =
            read_full(&mut self.reader, &mut head).map_err(|e| SortError::read(&self.path, e))?;
        if got == 0 {
            return Ok(None);
        }
        let corrupt = || SortError::Corrupt {
            path: self.path.clone(),
            offset: self.offset,
        };
        if got < HEADER_BYTES {
            return Err(corrupt());
        }
        let header = Header::decode(&head);
        // A damaged length is caught before it is allocated: a frame ends within the file.
        let left = self.len.saturating_sub(self.offset + HEADER_BYTES as u64);
        if header.body_bytes() as u64 > left {
            return Err(corrupt());
        }
        let mut body = vec![0u8; header.body_bytes()];
        let got =
            read_full(&mut self.reader, &mut body).map_err(|e| SortError::read(&self.path, e))?;
        if got < body.len() || !header.verify(&body) {
            return Err(corrupt());
        }
        self.offset += (HEADER_BYTES + body.len()) as u64;
        let value = body.split_off(header.key_len);
        Ok(Some((body, value)))
    }
}

/// Reads until `buf` is full or the end of file; returns how many bytes were read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut at = 0;
    while at < buf.len() {
        match reader.read(&mut buf[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// Reads a whole bucket file into a batch (checked frame by frame).
/// Reads a bucket into a batch. `spare`, a batch done with, lends its memory when the
/// result still fits in `memory_bytes` with it (its arena, index and scratch each at least
/// what this bucket needs); otherwise it is dropped first and the batch is allocated to
/// the bucket's exact size, as `sort_cost_bytes` counts it.
pub(crate) fn read_batch(
    bucket: &Spilled,
    spare: Batch,
    memory_bytes: u64,
) -> Result<Batch, SortError> {
    let len = usize::try_from(bucket.file_bytes).unwrap_or(usize::MAX);
    let entries = usize::try_from(bucket.entries).unwrap_or(usize::MAX);
    let spare = if spare.held_bytes_for(len, entries) <= memory_bytes {
        spare
    } else {
        drop(spare);
        Batch::default()
    };
    let read = || -> std::io::Result<Batch> {
        let mut file = File::open(&bucket.path)?;
        let mut spare = spare;
        let mut bytes = spare.take_bytes();
        bytes.clear();
        if bytes.capacity() < len {
            // A new arena rather than a grown one: growing copies, and may overshoot.
            bytes = Vec::new();
            bytes.reserve_exact(len);
        }
        file.read_to_end(&mut bytes)?;
        spare.reserve_index(entries);
        Ok(spare.with_bytes(bytes))
    };
    let batch = read().map_err(|e| SortError::read(&bucket.path, e))?;
    batch.index_encoded().map_err(|offset| SortError::Corrupt {
        path: bucket.path.clone(),
        offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bucket_file(dir: &Path, name: &str, entries: usize, value_len: usize) -> Spilled {
        let mut bytes = Vec::new();
        for i in 0..entries {
            super::super::batch::encode(
                &mut bytes,
                &(i as u64).to_be_bytes(),
                &vec![7u8; value_len],
            );
        }
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        Spilled {
            path,
            kind: Kind::Range,
            file_bytes: bytes.len() as u64,
            entries: entries as u64,
            depth: 0,
        }
    }

    /// A bucket of a few large entries, then one of many small ones, then the first again:
    /// each fits the budget alone, and the batch reused from one to the next never holds
    /// more than the budget.
    #[test]
    fn a_reused_batch_stays_within_the_sort_memory() {
        let dir = tempfile::tempdir().unwrap();
        let large = bucket_file(dir.path(), "large", 60, 50_000);
        let small = bucket_file(dir.path(), "small", 70_000, 0);
        let memory = large.sort_cost_bytes().max(small.sort_cost_bytes()) + 40_000;
        let mut spare = Batch::default();
        for (round, bucket) in [&large, &small, &large, &small].into_iter().enumerate() {
            assert!(bucket.sort_cost_bytes() <= memory);
            let mut batch = read_batch(bucket, spare, memory).unwrap();
            batch.sort(2);
            assert_eq!(batch.len() as u64, bucket.entries);
            assert!(
                batch.held_bytes() <= memory,
                "round {round}: {} bytes held, memory {memory}",
                batch.held_bytes()
            );
            spare = batch;
        }
        // Two buckets of one shape reuse the memory outright.
        let spare = read_batch(&small, Batch::default(), memory).unwrap();
        let before = spare.held_bytes();
        let again = read_batch(&small, spare, memory).unwrap();
        assert_eq!(again.held_bytes(), before);
    }

    /// A frame whose header claims more bytes than the file holds is damage, found before
    /// anything that size is allocated.
    #[test]
    fn a_frame_longer_than_its_file_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let bucket = bucket_file(dir.path(), "b", 2, 10);
        let mut bytes = std::fs::read(&bucket.path).unwrap();
        let one = bytes.len() / 2;
        // The second frame's value length: 4 GiB - 1 (its key length is the first word).
        bytes[one + 4..one + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        std::fs::write(&bucket.path, &bytes).unwrap();
        let mut reader = FrameReader::open(&bucket.path, 4096).unwrap();
        assert!(reader.next_entry().unwrap().is_some());
        match reader.next_entry() {
            Err(SortError::Corrupt { offset, .. }) => assert_eq!(offset, one as u64),
            other => panic!("{other:?}"),
        }
    }

    /// Routing by byte comparison alone: the rule `route_prefixed` must agree with.
    fn route_by_bytes(splitters: &[Vec<u8>], key: &[u8]) -> usize {
        match splitters.binary_search_by(|s| s.as_slice().cmp(key)) {
            Ok(i) => 2 * i + 1,
            Err(i) => 2 * i,
        }
    }

    // Short keys from a small alphabet with zeros, so prefixes collide, keys shorter than 8
    // bytes are padded and splitters share their first 8 bytes.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 255]), 0..12)
    }

    proptest! {
        #[test]
        fn prefix_routing_agrees_with_byte_routing(
            mut splitters in prop::collection::vec(key(), 0..40),
            keys in prop::collection::vec(key(), 1..60),
        ) {
            splitters.sort();
            splitters.dedup();
            let set = BucketSet::new(splitters.clone(), 64, 0);
            for k in keys.iter().chain(&splitters) {
                prop_assert_eq!(set.route(k), route_by_bytes(&splitters, k), "key {:?}", k);
            }
        }
    }
}
