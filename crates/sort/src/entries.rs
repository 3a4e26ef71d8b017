//! A bounded-memory sorter of variable-length `(key, value)` byte entries, for bulk loads.
//!
//! Entries are pushed one at a time. While they fit in the memory budget they stay in one
//! in-memory batch and [`EntrySorter::finish`] sorts it without touching disk. The first
//! time the batch is full it becomes the sample: it is sorted, splitters are taken at its
//! quantiles, and it is written into bucket files by key range; later entries go into the
//! same buckets through per-bucket buffers (half the budget for the batch, half for the
//! buffers). On finish each bucket is read once, sorted in memory and streamed out; a
//! bucket too large for the budget is split again with splitters from its own first
//! half-budget, and a bucket holding one key only is streamed as it is. Keys compare as
//! unsigned bytes; equal keys come out in push order (every step is stable).
//!
//! Fault model: any I/O error ends the sort with a [`SortError`]; the private temporary
//! directory is removed when the sorter or its output is dropped, error or not.

mod batch;
mod buckets;

use std::collections::VecDeque;
use std::path::PathBuf;

use batch::Batch;
use buckets::{BucketSet, FrameReader, Kind, Spilled, TmpFiles};

pub use crate::SortError;

/// One `(key, value)` entry as the sorted output yields it.
pub type Entry = (Vec<u8>, Vec<u8>);

/// Smallest memory budget accepted: room for a batch and a few bucket buffers.
pub const ENTRY_MEMORY_MIN_BYTES: u64 = 16 << 10;

/// Largest number of buckets one spill or split writes at once (open files).
const BUCKETS_MAX: usize = 255;

/// Smallest write buffer per bucket worth having; fewer buckets below it.
const BUCKET_BUFFER_MIN_BYTES: u64 = 4 << 10;

/// Read buffer for streaming a one-key bucket (at most a quarter of the budget).
const STREAM_BUFFER_BYTES: usize = 1 << 20;

/// Bytes of splitter keys one spill or split keeps, as a share of the budget (1/16).
fn splitter_bytes_max(memory_bytes: u64) -> usize {
    usize::try_from(memory_bytes / 16).unwrap_or(usize::MAX)
}

/// How an [`EntrySorter`] may use memory, disk and threads.
#[derive(Debug, Clone)]
pub struct EntrySortOptions {
    /// Working memory: the batch, the sort's index and scratch, and the bucket buffers.
    pub memory_bytes: u64,
    /// Where the private temporary directory is created (only if the entries spill).
    pub tmp_dir: PathBuf,
    /// Threads for in-memory sorting (at least 1).
    pub threads: usize,
}

/// What a sort has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortStats {
    /// Entries pushed.
    pub entries: u64,
    /// Key and value bytes pushed.
    pub bytes_in: u64,
    /// Bytes written to temporary bucket files (including splits).
    pub bytes_spilled: u64,
    /// Reads of the most-read entry: 1 in memory (the push), 2 after a spill (the push
    /// and the read of its bucket), two more per split (a sample read and a routing read).
    pub passes: u32,
}

/// A bounded-memory sorter of `(key, value)` entries. See the module documentation.
#[derive(Debug)]
pub struct EntrySorter {
    memory_bytes: u64,
    threads: usize,
    tmp_dir: PathBuf,
    batch: Batch,
    spill: Option<Spill>,
    stats: SortStats,
}

#[derive(Debug)]
struct Spill {
    tmp: TmpFiles,
    buckets: BucketSet,
}

impl EntrySorter {
    /// A sorter with these options; fails if the memory budget is below
    /// [`ENTRY_MEMORY_MIN_BYTES`].
    pub fn new(opts: EntrySortOptions) -> Result<EntrySorter, SortError> {
        Self::check_memory(opts.memory_bytes)?;
        Ok(EntrySorter {
            memory_bytes: opts.memory_bytes,
            threads: opts.threads.max(1),
            tmp_dir: opts.tmp_dir,
            batch: Batch::default(),
            spill: None,
            stats: SortStats {
                passes: 1,
                ..SortStats::default()
            },
        })
    }

    /// `MemoryTooSmall` for a budget `new` would refuse (callers check before they start).
    pub fn check_memory(memory_bytes: u64) -> Result<(), SortError> {
        if memory_bytes < ENTRY_MEMORY_MIN_BYTES {
            return Err(SortError::MemoryTooSmall {
                memory_bytes,
                min_bytes: ENTRY_MEMORY_MIN_BYTES,
            });
        }
        Ok(())
    }

    /// The largest entry (key plus value plus framing) accepted.
    pub fn entry_bytes_max(&self) -> u64 {
        self.memory_bytes / 8
    }

    /// Adds one entry. May write to the temporary directory when the batch is full.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<(), SortError> {
        let cost = batch::cost_bytes(key.len(), value.len());
        if cost > self.entry_bytes_max()
            || key.len() > u32::MAX as usize
            || value.len() > u32::MAX as usize
        {
            return Err(SortError::EntryTooLarge {
                bytes: cost,
                limit_bytes: self.entry_bytes_max(),
            });
        }
        if self.batch.cost_bytes() + cost > self.batch_limit_bytes() {
            self.spill_batch()?;
        }
        if self.batch.len() == 0 {
            self.batch.reserve(self.batch_limit_bytes());
        }
        self.batch.push(key, value);
        self.stats.entries += 1;
        self.stats.bytes_in += (key.len() + value.len()) as u64;
        Ok(())
    }

    /// What the sorter has done so far.
    pub fn stats(&self) -> SortStats {
        let mut stats = self.stats;
        if let Some(spill) = &self.spill {
            stats.bytes_spilled = spill.buckets.written_bytes;
        }
        stats
    }

    /// Ends input: the entries in increasing key order, equal keys in push order.
    pub fn finish(mut self) -> Result<SortedEntries, SortError> {
        let Some(mut spill) = self.spill.take() else {
            let mut batch = std::mem::take(&mut self.batch);
            batch.sort(self.threads);
            return Ok(SortedEntries {
                state: State::Memory { batch, pos: 0 },
                memory_bytes: self.memory_bytes,
                threads: self.threads,
                stats: self.stats,
            });
        };
        spill.buckets.needed_bytes = self.needed_bytes();
        spill.buckets.write_batch(&mut spill.tmp, &self.batch)?;
        self.batch = Batch::default();
        let written = spill.buckets.written_bytes;
        let pending: VecDeque<Spilled> = spill.buckets.finish()?.into();
        self.stats.bytes_spilled = written;
        Ok(SortedEntries {
            state: State::Buckets {
                tmp: spill.tmp,
                pending,
                current: Current::Idle,
                spare: Batch::default(),
            },
            memory_bytes: self.memory_bytes,
            threads: self.threads,
            stats: self.stats,
        })
    }

    fn batch_limit_bytes(&self) -> u64 {
        if let Some(spill) = &self.spill {
            // The bucket buffers take the other half; the splitters are kept beside them.
            (self.memory_bytes / 2).saturating_sub(spill.buckets.splitter_bytes())
        } else {
            // The first spill holds one bucket buffer next to the full batch.
            self.memory_bytes - bucket_shape(self.memory_bytes / 2).1 as u64
        }
    }

    fn needed_bytes(&self) -> u64 {
        2 * self.stats.bytes_in.max(1)
    }

    /// Writes the batch to the buckets, first choosing the splitters if this is the first
    /// spill.
    fn spill_batch(&mut self) -> Result<(), SortError> {
        let needed = self.needed_bytes();
        match &mut self.spill {
            Some(spill) => {
                spill.buckets.needed_bytes = needed;
                spill.buckets.write_batch(&mut spill.tmp, &self.batch)?;
            }
            None => {
                let mut tmp = TmpFiles::new(&self.tmp_dir, needed)?;
                self.batch.sort(self.threads);
                let (count, buffer) = bucket_shape(self.memory_bytes / 2);
                let splitters = self
                    .batch
                    .splitters(count, splitter_bytes_max(self.memory_bytes));
                let mut buckets = BucketSet::new(splitters, buffer, 0);
                buckets.needed_bytes = needed;
                buckets.write_sorted(&mut tmp, &self.batch)?;
                self.spill = Some(Spill { tmp, buckets });
                self.stats.passes = 2;
                // The batch's budget halves from now on (the bucket buffers take the other
                // half): free the first batch's memory rather than keep it.
                self.batch = Batch::default();
                return Ok(());
            }
        }
        // Later batches have the same budget: keep the memory for the next one.
        self.batch.clear();
        Ok(())
    }
}

/// How many buckets, and how large a write buffer each, fit in `buffers_bytes`.
fn bucket_shape(buffers_bytes: u64) -> (usize, usize) {
    let count = (buffers_bytes / BUCKET_BUFFER_MIN_BYTES).clamp(3, BUCKETS_MAX as u64) as usize;
    (count, (buffers_bytes / count as u64) as usize)
}

/// The sorted entries: an iterator of `Result<(key, value), SortError>`. After an error it
/// ends. Dropping it removes the temporary files.
#[derive(Debug)]
pub struct SortedEntries {
    state: State,
    memory_bytes: u64,
    threads: usize,
    stats: SortStats,
}

#[derive(Debug)]
enum State {
    Memory {
        batch: Batch,
        pos: usize,
    },
    Buckets {
        tmp: TmpFiles,
        pending: VecDeque<Spilled>,
        current: Current,
        /// The last bucket's batch once it is done with, read into again for the next.
        spare: Batch,
    },
    Done,
}

#[derive(Debug)]
enum Current {
    Idle,
    Sorted { batch: Batch, pos: usize },
    Stream(FrameReader),
}

impl SortedEntries {
    /// What the sort has done so far (splits during output add passes and spilled bytes).
    pub fn stats(&self) -> SortStats {
        self.stats
    }

    fn next_bucketed(&mut self) -> Result<Option<Entry>, SortError> {
        let State::Buckets {
            tmp,
            pending,
            current,
            spare,
        } = &mut self.state
        else {
            unreachable!("next_bucketed on a bucketed state only");
        };
        loop {
            match current {
                Current::Sorted { batch, pos } if *pos < batch.len() => {
                    let entry = (batch.key(*pos).to_vec(), batch.value(*pos).to_vec());
                    *pos += 1;
                    return Ok(Some(entry));
                }
                Current::Stream(reader) => {
                    if let Some(entry) = reader.next_entry()? {
                        return Ok(Some(entry));
                    }
                }
                Current::Sorted { .. } | Current::Idle => {}
            }
            if let Current::Sorted { batch, .. } = std::mem::replace(current, Current::Idle) {
                *spare = batch;
            }
            let Some(bucket) = pending.pop_front() else {
                return Ok(None);
            };
            if bucket.kind == Kind::Equal || bucket.sort_cost_bytes() > self.memory_bytes {
                // Streaming and splitting take memory of their own: the spare goes first.
                *spare = Batch::default();
            }
            if bucket.kind == Kind::Equal {
                let buffer = STREAM_BUFFER_BYTES
                    .min(usize::try_from(self.memory_bytes / 4).unwrap_or(STREAM_BUFFER_BYTES));
                *current = Current::Stream(FrameReader::open(&bucket.path, buffer)?);
                // Unlinked now; the open reader keeps the bytes until it is dropped.
                remove(&bucket.path);
            } else if bucket.sort_cost_bytes() <= self.memory_bytes {
                let mut batch =
                    buckets::read_batch(&bucket, std::mem::take(spare), self.memory_bytes)?;
                remove(&bucket.path);
                batch.sort(self.threads);
                *current = Current::Sorted { batch, pos: 0 };
            } else {
                let children = split(
                    tmp,
                    &bucket,
                    self.memory_bytes,
                    self.threads,
                    &mut self.stats,
                )?;
                remove(&bucket.path);
                for child in children.into_iter().rev() {
                    pending.push_front(child);
                }
            }
        }
    }
}

/// Splits a bucket too large to sort in memory. Its splitters come from a sample taken
/// evenly across the whole bucket (every `stride`-th entry, about half the budget's worth),
/// so a bucket whose keys only rise (one item's many versions, in push order) splits into
/// children of about equal size: a sample of its first entries would give splitters below
/// almost all of it, and each split would shed only half a budget, rewriting the rest again
/// and again. Then the bucket is read a second time and every entry routed to its child,
/// in the order it came (the sort stays stable).
fn split(
    tmp: &mut TmpFiles,
    bucket: &Spilled,
    memory_bytes: u64,
    threads: usize,
    stats: &mut SortStats,
) -> Result<Vec<Spilled>, SortError> {
    let half = memory_bytes / 2;
    let (count, buffer) = bucket_shape(half);
    let room = half.saturating_sub(buffer as u64).max(1);
    let stride = bucket.sort_cost_bytes().div_ceil(room).max(1);
    let mut sample = Batch::default();
    let mut reader = FrameReader::open(&bucket.path, buffer)?;
    let mut seen = 0u64;
    while let Some((key, value)) = reader.next_entry()? {
        if seen.is_multiple_of(stride)
            && sample.cost_bytes() + batch::cost_bytes(key.len(), value.len()) <= room
        {
            sample.push(&key, &value);
        }
        seen += 1;
    }
    drop(reader);
    sample.sort(threads);
    let splitters = sample.splitters(count, splitter_bytes_max(memory_bytes));
    drop(sample);
    let mut buckets = BucketSet::new(splitters, buffer, bucket.depth + 1);
    buckets.needed_bytes = 2 * stats.bytes_in.max(1);
    let mut reader = FrameReader::open(&bucket.path, buffer)?;
    let mut frame = Vec::new();
    while let Some((key, value)) = reader.next_entry()? {
        frame.clear();
        batch::encode(&mut frame, &key, &value);
        let b = buckets.route(&key);
        buckets.write(tmp, b, &frame)?;
    }
    stats.bytes_spilled += buckets.written_bytes;
    // Pushed, spilled and read back (2), then read twice by each split down to here
    // (sample, route), and once more from their child: 2 · depth + 4 reads.
    stats.passes = stats.passes.max(2 * bucket.depth + 4);
    buckets.finish()
}

fn remove(path: &std::path::Path) {
    // Best effort: the whole directory goes when the sort is dropped anyway.
    let _ = std::fs::remove_file(path);
}

impl Iterator for SortedEntries {
    type Item = Result<Entry, SortError>;

    fn next(&mut self) -> Option<Self::Item> {
        let result = match &mut self.state {
            State::Done => return None,
            State::Memory { batch, pos } => {
                if *pos < batch.len() {
                    let entry = (batch.key(*pos).to_vec(), batch.value(*pos).to_vec());
                    *pos += 1;
                    return Some(Ok(entry));
                }
                Ok(None)
            }
            State::Buckets { .. } => self.next_bucketed(),
        };
        match result {
            Ok(Some(entry)) => Some(Ok(entry)),
            Ok(None) => {
                self.state = State::Done;
                None
            }
            Err(e) => {
                self.state = State::Done;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    /// The batch keeps its memory across spills, but never more than its budget: the
    /// first batch (budget about the whole memory) is freed at the first spill, when the
    /// batch's budget halves and the bucket buffers take the other half.
    #[test]
    fn the_batch_holds_no_more_than_its_budget_after_each_spill() {
        let dir = tempfile::tempdir().unwrap();
        let memory = 1 << 20;
        let mut sorter = EntrySorter::new(EntrySortOptions {
            memory_bytes: memory,
            tmp_dir: dir.path().to_path_buf(),
            threads: 1,
        })
        .unwrap();
        let value = [7u8; 100];
        let mut spills_seen = 0;
        let mut spilled_before = false;
        for i in 0u64..60_000 {
            let key = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes();
            sorter.push(&key, &value).unwrap();
            let spilled = sorter.stats().bytes_spilled > 0;
            if spilled && sorter.batch.len() == 1 {
                spills_seen += 1;
                // Just after a spill, the batch holding the one entry pushed since has an
                // arena of at most the budget of batches from now on (the first batch's,
                // reserved for about the whole memory, was freed) and an index that fits
                // in the budget too. Arena pages are touched only as entries fill them.
                let limit = sorter.batch_limit_bytes();
                let (arena, index) = sorter.batch.allocated_bytes();
                assert!(
                    arena <= limit && index <= limit / 2 + 1024,
                    "after spill {spills_seen}: arena {arena} and index {index} bytes, budget {limit}"
                );
            }
            spilled_before |= spilled;
        }
        assert!(
            spilled_before && spills_seen >= 3,
            "spills seen: {spills_seen}"
        );
        let sorted: Vec<_> = sorter.finish().unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(sorted.len(), 60_000);
        assert!(sorted.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
