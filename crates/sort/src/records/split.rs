//! Pass one (and every re-split): sample keys, choose splitters, and stream a file into
//! bucket files by key range through the read ring, the bucketing thread and the write ring.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::plan::ROUTE_PREFIXES;
use super::radix::key_of;
use super::stages::{self, ReadTask, Stage};
use super::{Progress, RECORD_BYTES};
use crate::SortError;

/// Records read per sample block.
const SAMPLE_BLOCK_RECORDS: u64 = 64;

/// Sample records per key range.
const SAMPLE_PER_RANGE: u64 = 128;

/// Keys of about `count` records read in blocks spread evenly over the file.
pub(crate) fn sample_keys(path: &Path, bytes: u64, ranges: usize) -> Result<Vec<u128>, SortError> {
    let records = bytes / RECORD_BYTES as u64;
    let want = (ranges as u64 * SAMPLE_PER_RANGE)
        .clamp(1024, 1 << 20)
        .min(records);
    let blocks = want.div_ceil(SAMPLE_BLOCK_RECORDS).max(1);
    let file = File::open(path).map_err(|e| SortError::read(path, e))?;
    let mut keys = Vec::with_capacity(want as usize);
    let mut buf = vec![0u8; SAMPLE_BLOCK_RECORDS as usize * RECORD_BYTES];
    for b in 0..blocks {
        let first = b * records / blocks;
        let n = SAMPLE_BLOCK_RECORDS.min(records - first) as usize;
        let part = &mut buf[..n * RECORD_BYTES];
        file.read_exact_at(part, first * RECORD_BYTES as u64)
            .map_err(|e| SortError::read(path, e))?;
        keys.extend(part.chunks_exact(RECORD_BYTES).map(key_of));
    }
    Ok(keys)
}

/// Where keys go: ranges `(s_{i-1}, s_i]`, and for heavy splitters (many copies in the
/// sample) a one-key bucket `{s_i}` right after the range below it.
#[derive(Debug)]
pub(crate) struct Router {
    splitters: Vec<u128>,
    /// For each value `p` of a key's first two bytes, the splitters with that prefix are
    /// `splitters[first[p]..first[p + 1]]`: a route searches only those (usually none).
    first: Vec<u32>,
    range_pos: Vec<usize>,
    eq_pos: Vec<Option<usize>>,
    /// Per bucket in key order: whether it holds one key only.
    pub(crate) presorted: Vec<bool>,
}

impl Router {
    /// Splitters at the quantiles of the sample for `ranges` ranges.
    pub(crate) fn from_sample(mut sample: Vec<u128>, ranges: usize) -> Router {
        sample.sort_unstable();
        let n = sample.len();
        let heavy_min = (n / (8 * ranges.max(1))).max(2);
        let mut splitters: Vec<u128> = Vec::new();
        let mut heavy = Vec::new();
        for q in 1..ranges.max(1) {
            let key = sample[q * n / ranges];
            if splitters.last() == Some(&key) {
                continue;
            }
            let count =
                sample.partition_point(|&k| k <= key) - sample.partition_point(|&k| k < key);
            splitters.push(key);
            heavy.push(count >= heavy_min);
        }
        if splitters.is_empty() && n > 0 {
            // One range asked for: still give a heavy key its own bucket.
            let key = sample[n / 2];
            let count =
                sample.partition_point(|&k| k <= key) - sample.partition_point(|&k| k < key);
            if count >= heavy_min {
                splitters.push(key);
                heavy.push(true);
            }
        }
        let (mut range_pos, mut eq_pos, mut presorted) = (Vec::new(), Vec::new(), Vec::new());
        for &h in &heavy {
            range_pos.push(presorted.len());
            presorted.push(false);
            eq_pos.push(h.then(|| {
                presorted.push(true);
                presorted.len() - 1
            }));
        }
        range_pos.push(presorted.len());
        presorted.push(false);
        let first = (0..=ROUTE_PREFIXES)
            .map(|p| splitters.partition_point(|&s| prefix(s) < p) as u32)
            .collect();
        Router {
            splitters,
            first,
            range_pos,
            eq_pos,
            presorted,
        }
    }

    pub(crate) fn buckets(&self) -> usize {
        self.presorted.len()
    }

    pub(crate) fn route(&self, key: u128) -> usize {
        let p = prefix(key);
        let (lo, hi) = (self.first[p] as usize, self.first[p + 1] as usize);
        let found = if lo == hi {
            Err(lo)
        } else {
            self.splitters[lo..hi]
                .binary_search(&key)
                .map(|i| lo + i)
                .map_err(|i| lo + i)
        };
        match found {
            Ok(i) => self.eq_pos[i].unwrap_or(self.range_pos[i]),
            Err(i) => self.range_pos[i],
        }
    }
}

/// A key's first two bytes (keys are 80 bits at the bottom of a `u128`).
fn prefix(key: u128) -> usize {
    (key >> 64) as usize & (ROUTE_PREFIXES - 1)
}

/// A bucket file written by a pass.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    pub(crate) path: PathBuf,
    pub(crate) bytes: u64,
    pub(crate) presorted: bool,
    pub(crate) depth: u32,
}

/// What [`distribute`] needs besides its input.
#[derive(Debug)]
pub(crate) struct DistributeOpts<'a> {
    pub(crate) tmp_dir: &'a Path,
    pub(crate) first_file: usize,
    pub(crate) ranges: usize,
    pub(crate) chunk_bytes: usize,
    pub(crate) stage_bytes: usize,
    /// O_DIRECT for the bucket files.
    pub(crate) direct: bool,
    pub(crate) needed_bytes: u64,
    pub(crate) depth: u32,
}

/// Streams `input` into bucket files: the reader thread fills the read ring, this thread
/// routes each record into its bucket's stage, the writer thread writes full stages.
/// Returns the non-empty buckets in key order.
pub(crate) fn distribute(
    input: &ReadTask,
    opts: &DistributeOpts<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Vec<Bucket>, SortError> {
    let router = Router::from_sample(
        sample_keys(&input.path, input.bytes, opts.ranges)?,
        opts.ranges,
    );
    let targets: Vec<PathBuf> = (0..router.buckets())
        .map(|i| stages::bucket_path(opts.tmp_dir, opts.first_file + i))
        .collect();
    let stop = AtomicBool::new(false);
    let (read_p, mut read_c) =
        stages::read_ring("sort-read", super::plan::RING_SLOTS, opts.chunk_bytes);
    let (mut write_p, write_c) = stages::write_ring(
        "sort-bucket-write",
        super::plan::RING_SLOTS,
        opts.stage_bytes,
    );
    let mut stages_: Vec<Stage> = (0..router.buckets()).map(|_| Stage::default()).collect();
    let tasks = [input.clone()];
    let (main, read, write) = std::thread::scope(|scope| {
        let reader = scope.spawn(|| stages::read_files(read_p, &tasks, opts.chunk_bytes, &stop));
        let writer = scope.spawn(|| {
            stages::write_files(
                write_c,
                &targets,
                opts.direct,
                false,
                opts.needed_bytes,
                &stop,
            )
        });
        let main = (|| {
            let mut carry = [0u8; RECORD_BYTES];
            let mut carry_len = 0usize;
            let mut done = 0u64;
            while let Ok(batch) = read_c.wait_batch() {
                if stop.load(Ordering::Relaxed) {
                    return Err(SortError::Stopped);
                }
                batch.with_event(0, |piece| {
                    let mut bytes = &piece.buf.as_slice()[..piece.len];
                    done += bytes.len() as u64;
                    if carry_len > 0 {
                        let n = (RECORD_BYTES - carry_len).min(bytes.len());
                        carry[carry_len..carry_len + n].copy_from_slice(&bytes[..n]);
                        carry_len += n;
                        bytes = &bytes[n..];
                        if carry_len == RECORD_BYTES {
                            let b = router.route(key_of(&carry));
                            stages_[b].push(&mut write_p, b, opts.stage_bytes, &carry);
                            carry_len = 0;
                        }
                    }
                    let mut records = bytes.chunks_exact(RECORD_BYTES);
                    for r in &mut records {
                        let r: &[u8; RECORD_BYTES] = r.try_into().expect("a whole record");
                        let b = router.route(key_of(r));
                        stages_[b].push_record(&mut write_p, b, opts.stage_bytes, r);
                    }
                    let rest = records.remainder();
                    carry[..rest.len()].copy_from_slice(rest);
                    carry_len += rest.len();
                });
                drop(batch);
                progress(Progress {
                    phase: "pass 1: bucket",
                    done_bytes: done,
                    total_bytes: input.bytes,
                });
            }
            if done != input.bytes {
                return Err(SortError::Stopped);
            }
            for (b, stage) in stages_.iter_mut().enumerate() {
                stage.send(&mut write_p, b);
            }
            Ok(())
        })();
        if main.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        drop(read_c);
        drop(write_p);
        (
            main,
            reader.join().expect("reader thread"),
            writer.join().expect("writer thread"),
        )
    });
    first_error(main, read, write)?;
    Ok(stages_
        .iter()
        .zip(targets)
        .enumerate()
        .filter(|(_, (s, _))| s.bytes() > 0)
        .map(|(b, (s, path))| Bucket {
            path,
            bytes: s.bytes(),
            presorted: router.presorted[b],
            depth: opts.depth,
        })
        .collect())
}

/// The error to report: a stage's own error over the `Stopped` it caused elsewhere.
pub(crate) fn first_error(
    main: Result<(), SortError>,
    read: Result<(), SortError>,
    write: Result<(), SortError>,
) -> Result<(), SortError> {
    match (main, read, write) {
        (Err(SortError::Stopped), Err(e), _) | (Err(SortError::Stopped), _, Err(e)) => Err(e),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain binary search the prefix table stands in for.
    fn route_by_search(r: &Router, key: u128) -> usize {
        match r.splitters.binary_search(&key) {
            Ok(i) => r.eq_pos[i].unwrap_or(r.range_pos[i]),
            Err(i) => r.range_pos[i],
        }
    }

    #[test]
    fn the_prefix_table_routes_as_a_binary_search_does() {
        let mut seed = 3u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed
        };
        let key = |hi: u64, lo: u64| ((u128::from(hi) << 64) | u128::from(lo)) & ((1 << 80) - 1);
        // Random keys, keys sharing a few prefixes, and heavy duplicates.
        let mut sample: Vec<u128> = (0..4000).map(|_| key(next(), next())).collect();
        sample.extend((0..4000).map(|i| key(next() % 3, next() % 50 + i % 2)));
        sample.extend(std::iter::repeat_n(key(7, 7), 3000));
        for ranges in [1, 2, 7, 64, 1024] {
            let r = Router::from_sample(sample.clone(), ranges);
            let probes = sample
                .iter()
                .flat_map(|&k| [k, k.wrapping_sub(1), k + 1])
                .chain((0..5000).map(|_| key(next(), next())))
                .chain([0, (1 << 80) - 1]);
            for k in probes {
                let k = k & ((1 << 80) - 1);
                assert_eq!(
                    r.route(k),
                    route_by_search(&r, k),
                    "{k:x} with {ranges} ranges"
                );
            }
        }
    }
}
