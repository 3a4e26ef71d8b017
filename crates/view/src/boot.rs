//! Booting a view from Disk Views (DESIGN.md §6): iterate every source of a plan
//! concurrently to the plan's cut, hand each version frame to the booting view, and report
//! progress (items, bytes, rate, ETA). The view then tails the log from cut + 1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spindle_core::{Index, ItemKey, Partition};

use crate::disk::DiskView;
use crate::error::IterError;
use crate::frame::{FrameReader, FrameRef};
use crate::iterate::IterRequest;

use crate::select::Plan;

/// Frame bytes an iteration fills per batch while booting.
pub const BOOT_BATCH_BYTES: usize = 1 << 20;

/// Counters of a boot in progress; read them from another thread for a progress report.
#[derive(Debug, Default)]
pub struct BootProgress {
    /// Version frames received.
    pub items: AtomicU64,
    /// Frame bytes received.
    pub bytes: AtomicU64,
    /// Sources finished, of `sources_total`.
    pub sources_done: AtomicU64,
    pub sources_total: AtomicU64,
    /// Sources started over (on another replica) after their iteration failed.
    pub source_restarts: AtomicU64,
}

/// A snapshot of boot progress with its rate (and an ETA when the total is known).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressReport {
    pub items: u64,
    pub bytes: u64,
    pub items_per_s: f64,
    pub bytes_per_s: f64,
    /// Remaining time, if an estimate of the total bytes was given.
    pub eta: Option<Duration>,
}

impl BootProgress {
    /// Items, bytes and rates over `elapsed`; the ETA needs an estimate of the total bytes
    /// (for example RocksDB's live-data estimate of the sources).
    pub fn report(&self, elapsed: Duration, bytes_total: Option<u64>) -> ProgressReport {
        let items = self.items.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let secs = elapsed.as_secs_f64().max(1e-9);
        let bytes_per_s = bytes as f64 / secs;
        let eta = bytes_total
            .filter(|_| bytes_per_s > 0.0)
            .map(|total| Duration::from_secs_f64(total.saturating_sub(bytes) as f64 / bytes_per_s));
        ProgressReport {
            items,
            bytes,
            items_per_s: items as f64 / secs,
            bytes_per_s,
            eta,
        }
    }
}

/// Where a boot reads version frames: a Disk View of this process, or one of another
/// process reached over the network (`spindle serve`'s remote sources). A source serves an
/// iteration to exactly the plan's cut and ends it with the end frame.
pub trait BootSource: Sync {
    /// The source's name, for errors and logs.
    fn name(&self) -> String;
    /// Start iterating `req` (its range is the plan source's, its `to` the plan's cut).
    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError>;
    /// The error for bad data read from this source.
    fn corrupt(&self, what: String) -> IterError;
    /// Whether an iteration that failed with `error` may start over from the beginning
    /// (a remote source then moves to another replica of the same range); at most
    /// `BOOT_SOURCE_ATTEMPTS_MAX` attempts in all. A local Disk View never retries.
    fn may_retry(&self, _error: &IterError) -> bool {
        false
    }
}

/// Attempts one source of a boot may make before the boot fails.
pub const BOOT_SOURCE_ATTEMPTS_MAX: u32 = 4;

/// An iteration in progress, batch by batch.
pub trait FrameBatches {
    /// Append whole frames to `buf`, about `bytes_max` bytes; `true` once the end frame is
    /// in (it is appended with the last batch).
    fn fill(&mut self, buf: &mut Vec<u8>, bytes_max: usize) -> Result<bool, IterError>;
}

impl FrameBatches for crate::iterate::Iteration<'_> {
    fn fill(&mut self, buf: &mut Vec<u8>, bytes_max: usize) -> Result<bool, IterError> {
        crate::iterate::Iteration::fill(self, buf, bytes_max)
    }
}

impl BootSource for DiskView {
    fn name(&self) -> String {
        self.dir().display().to_string()
    }

    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError> {
        let it = self.iterate(req)?;
        let cut = req.to.expect("a boot asks for the plan's cut");
        assert_eq!(it.cut(), cut, "a source serves the plan's cut");
        Ok(Box::new(it))
    }

    fn corrupt(&self, what: String) -> IterError {
        DiskView::corrupt(self, what).into()
    }
}

/// One version frame as a booting view receives it (borrowed from the batch buffer).
#[derive(Clone, Copy)]
pub struct BootFrame<'a> {
    /// Where the frame came from (to blame it for bad data).
    pub source: &'a dyn BootSource,
    pub index: Index,
    /// Frame flags (`frame::FLAG_*`).
    pub flags: u8,
    /// Core item-key encoding.
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
}

impl std::fmt::Debug for BootFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootFrame")
            .field("source", &self.source.name())
            .field("index", &self.index)
            .field("flags", &self.flags)
            .field("key", &self.key)
            .field("value", &self.value.map(<[u8]>::len))
            .finish()
    }
}

/// Iterate every source of `plan` concurrently (one thread each) with the filters of
/// `template` (its range and `to` are replaced by each source's range and the plan's cut).
/// `init` makes one accumulator per source range; `on_frame` folds each frame into it.
/// Returns the accumulators in plan order. The plan must tile the template's range (a plan
/// made for another range is a caller bug). A source that fails in a way it may retry
/// (`BootSource::may_retry`) starts over with a fresh accumulator, so `on_frame` must
/// tolerate seeing a source's frames again after `init` (the views' boots do).
pub fn iterate_plan<'v, S: BootSource + ?Sized + 'v, T: Send>(
    plan: &Plan,
    view_of: impl Fn(&str) -> Option<&'v S>,
    template: &IterRequest,
    progress: &BootProgress,
    init: impl Fn(Partition) -> T + Sync,
    on_frame: impl Fn(&mut T, BootFrame<'_>) -> Result<(), IterError> + Sync,
) -> Result<Vec<T>, IterError> {
    let target = Partition::new(template.range_lo, template.range_hi)
        .expect("a boot's range is a partition");
    assert!(
        plan.tiles(target),
        "the plan's sources do not tile the booting view's range {target:?}"
    );
    let mut requests = Vec::with_capacity(plan.sources.len());
    for source in &plan.sources {
        let view = view_of(&source.view).ok_or_else(|| IterError::UnknownSource {
            view: source.view.clone(),
        })?;
        let mut req = template.clone();
        req.range_lo = source.range.lo();
        req.range_hi = source.range.hi();
        req.to = Some(plan.cut);
        requests.push((view, req, source.range));
    }
    progress
        .sources_total
        .store(requests.len() as u64, Ordering::Relaxed);
    let (init, on_frame) = (&init, &on_frame);
    std::thread::scope(|s| {
        let handles: Vec<_> = requests
            .iter()
            .map(|(view, req, range)| {
                let view: &S = view;
                s.spawn(move || {
                    let mut attempt = 1;
                    loop {
                        let mut acc = init(*range);
                        match iterate_source(view, req, plan.cut, progress, &mut acc, on_frame) {
                            Ok(()) => {
                                progress.sources_done.fetch_add(1, Ordering::Relaxed);
                                return Ok(acc);
                            }
                            Err(e) if attempt < BOOT_SOURCE_ATTEMPTS_MAX && view.may_retry(&e) => {
                                tracing::warn!(
                                    "boot source {} failed ({e}); starting it over",
                                    view.name()
                                );
                                attempt += 1;
                                progress.source_restarts.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => return Err(e),
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("boot source thread panicked"))
            .collect()
    })
}

fn iterate_source<S: BootSource + ?Sized, T>(
    view: &S,
    req: &IterRequest,
    cut: Index,
    progress: &BootProgress,
    acc: &mut T,
    on_frame: &impl Fn(&mut T, BootFrame<'_>) -> Result<(), IterError>,
) -> Result<(), IterError> {
    let source = BootSourceRef(view);
    let source: &dyn BootSource = &source;
    let mut it = view.open(req)?;
    let range =
        Partition::new(req.range_lo, req.range_hi).expect("a source's range is a partition");
    let mut buf = Vec::with_capacity(BOOT_BATCH_BYTES + (64 << 10));
    // Version frames received, and whether the end frame came (it must be the last frame,
    // at the cut, over the range asked, and count every version frame before it: a chunk
    // lost or repeated on the way would otherwise go unnoticed).
    let mut received = 0u64;
    let mut ended = false;
    let mut once = req.latest_only.then(LatestOnce::default);
    loop {
        buf.clear();
        let done = it.fill(&mut buf, BOOT_BATCH_BYTES)?;
        let mut frames = 0;
        // The key last checked to lie in the source's range (same-item frames share it).
        let mut in_range: &[u8] = &[];
        let mut reader = FrameReader::new(&buf);
        while let Some(frame) = reader.next_ref() {
            let frame = frame.map_err(|e| view.corrupt(e.to_string()))?;
            if ended {
                return Err(view.corrupt("a frame after the end frame".into()));
            }
            let (flags, index, key, value) = match frame {
                FrameRef::Version {
                    flags,
                    index,
                    key,
                    value,
                } => (flags, index, key, value),
                FrameRef::End(end) => {
                    let want = (cut, range, received);
                    if (end.cut, end.range, end.frames) != want {
                        return Err(view.corrupt(format!(
                            "the end frame says cut {}, range {:?}, {} frames; the source \
                             was asked for cut {cut} over {range:?} and sent {received} frames",
                            end.cut, end.range, end.frames
                        )));
                    }
                    ended = true;
                    continue;
                }
            };
            // Invariant 6: nothing above the cut.
            if index > cut {
                return Err(view.corrupt(format!("a version at {index} is above the cut {cut}")));
            }
            // Nothing outside the asked range either: a booting view files each item under
            // its source's range, where reads of another range's item would never find it.
            if std::ptr::eq(key, in_range) {
                // A same-item frame: a second version of the item before it.
                if once.is_some() {
                    return Err(view.corrupt(format!(
                        "a latest-only iteration sent an item twice (the second at {index})"
                    )));
                }
            } else {
                match ItemKey::hash_of_encoded(key) {
                    Some(hash) if range.contains(hash) => {
                        in_range = key;
                        if let Some(once) = &mut once {
                            once.admit(hash, key)
                                .map_err(|why| view.corrupt(format!("{why} (at {index})")))?;
                        }
                    }
                    Some(hash) => {
                        return Err(view.corrupt(format!(
                            "the version at {index} is of an item whose hash {hash:#x} is \
                             outside the range [{:#x}, {:#x}) asked for",
                            range.lo(),
                            range.hi()
                        )))
                    }
                    None => return Err(view.corrupt(format!("a bad item key at {index}"))),
                }
            }
            frames += 1;
            received += 1;
            let frame = BootFrame {
                source,
                index,
                flags,
                key,
                value,
            };
            on_frame(acc, frame)?;
        }
        progress.items.fetch_add(frames, Ordering::Relaxed);
        progress
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        // Lets a test slow a boot down enough to watch its progress.
        fail::fail_point!("boot::batch");
        if done {
            if !ended {
                return Err(view.corrupt("the source ended without its end frame".into()));
            }
            return Ok(());
        }
    }
}

/// In a latest-only stream each item comes once: a repeat is a source's bug, and a value
/// then a tombstone of one item would otherwise boot it live. Items come in the order of
/// their Disk View keys, hash first, but for one wrap: a carousel rider boards mid-
/// revolution, so its stream runs from where it boarded to its range's end, then from the
/// range's start back to there. So each item's hash is at least the one before, but for
/// one descent, after which it stays at most the first item's hash; and an item whose hash
/// equals the one before (or, after the wrap, the first item's) must not be one of the
/// items of that hash already seen. Together these catch any repeat: to come back to an
/// item, the stream must descend to its hash. Costs a comparison and a copy of the key per
/// item (`KeyRun`).
#[derive(Debug, Default)]
struct LatestOnce {
    first_hash: Option<u32>,
    /// The keys of the first hash, seen before any other.
    first_keys: KeyRun,
    last_hash: u32,
    /// The keys of `last_hash` seen since it began.
    last_keys: KeyRun,
    wrapped: bool,
}

impl LatestOnce {
    fn admit(&mut self, hash: u32, key: &[u8]) -> Result<(), String> {
        let Some(first) = self.first_hash else {
            self.first_hash = Some(hash);
            self.last_hash = hash;
            self.first_keys.push(key);
            self.last_keys.push(key);
            return Ok(());
        };
        let twice = || "a latest-only iteration sent an item twice".to_owned();
        let same_as_first = !self.wrapped && hash == first && self.last_hash == first;
        if hash > self.last_hash {
            if self.wrapped && hash > first {
                return Err(format!(
                    "a latest-only iteration came back past where it began (item hash \
                     {hash:#x} after wrapping from {first:#x})"
                ));
            }
            self.last_keys.clear();
        } else if hash < self.last_hash {
            if self.wrapped {
                return Err(format!(
                    "a latest-only iteration sent items out of order (hash {hash:#x} after \
                     {:#x}, past its one wrap)",
                    self.last_hash
                ));
            }
            self.wrapped = true;
            self.last_keys.clear();
        } else if self.last_keys.contains(key) {
            return Err(twice());
        }
        if self.wrapped && hash == first && self.first_keys.contains(key) {
            return Err(twice());
        }
        self.last_hash = hash;
        self.last_keys.push(key);
        if same_as_first {
            self.first_keys.push(key);
        }
        Ok(())
    }
}

/// The keys of a run of one hash. Most runs are one item, kept back to back without an
/// allocation per key; a node shares its hash with all its out-edges, so a run past
/// `KEY_RUN_SCAN_MAX` keys moves into a hash set (a scan of each key against all before
/// it would be quadratic in a node's out-degree).
#[derive(Debug, Default)]
struct KeyRun {
    bytes: Vec<u8>,
    lens: Vec<usize>,
    set: Option<std::collections::HashSet<Box<[u8]>>>,
}

const KEY_RUN_SCAN_MAX: usize = 16;

impl KeyRun {
    fn push(&mut self, key: &[u8]) {
        if let Some(set) = &mut self.set {
            set.insert(key.into());
            return;
        }
        self.bytes.extend_from_slice(key);
        self.lens.push(key.len());
        if self.lens.len() > KEY_RUN_SCAN_MAX {
            let mut set = std::collections::HashSet::with_capacity(4 * KEY_RUN_SCAN_MAX);
            set.extend(self.keys().map(Box::from));
            self.set = Some(set);
            self.bytes.clear();
            self.lens.clear();
        }
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.lens.clear();
        self.set = None;
    }

    fn keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        self.lens.iter().map(move |&n| {
            let k = &self.bytes[at..at + n];
            at += n;
            k
        })
    }

    fn contains(&self, key: &[u8]) -> bool {
        match &self.set {
            Some(set) => set.contains(key),
            None => self.keys().any(|k| k == key),
        }
    }
}

/// A `&S` as a `dyn BootSource` (for `S` that is itself unsized).
struct BootSourceRef<'a, S: ?Sized>(&'a S);

impl<S: BootSource + ?Sized> BootSource for BootSourceRef<'_, S> {
    fn name(&self) -> String {
        self.0.name()
    }
    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError> {
        self.0.open(req)
    }
    fn corrupt(&self, what: String) -> IterError {
        self.0.corrupt(what)
    }
    fn may_retry(&self, error: &IterError) -> bool {
        self.0.may_retry(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed (hash, key) items; the index of the first refused, if any.
    fn refused_at(items: &[(u32, &str)]) -> Option<usize> {
        let mut once = LatestOnce::default();
        items
            .iter()
            .position(|(h, k)| once.admit(*h, k.as_bytes()).is_err())
    }

    #[test]
    fn latest_only_items_come_once_with_one_wrap() {
        // In order, and wrapped once back to below where it began.
        assert_eq!(
            refused_at(&[(5, "a"), (5, "b"), (9, "c"), (1, "d"), (5, "e")]),
            None
        );
        // Repeats: next to each other, in a run of one hash, after the wrap at the first
        // hash, and past where the stream began.
        assert_eq!(refused_at(&[(5, "a"), (5, "a")]), Some(1));
        assert_eq!(refused_at(&[(5, "a"), (5, "b"), (5, "a")]), Some(2));
        assert_eq!(
            refused_at(&[(5, "a"), (9, "c"), (1, "d"), (5, "a")]),
            Some(3)
        );
        assert_eq!(
            refused_at(&[(5, "a"), (9, "c"), (1, "d"), (9, "c")]),
            Some(3)
        );
        assert_eq!(
            refused_at(&[(5, "a"), (9, "c"), (7, "x"), (9, "c")]),
            Some(3)
        );
        // A second descent.
        assert_eq!(
            refused_at(&[(5, "a"), (9, "c"), (1, "d"), (0, "e")]),
            Some(3)
        );
        // After the wrap, the first hash's other keys are new items, not repeats.
        assert_eq!(refused_at(&[(5, "b"), (9, "c"), (1, "d"), (5, "a")]), None);
        // A long run of one hash (a node and its out-edges) moves into a set: a repeat
        // anywhere in it is still found.
        let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        let mut run: Vec<(u32, &str)> = keys.iter().map(|k| (7, k.as_str())).collect();
        assert_eq!(refused_at(&run), None);
        run.push((7, "k3"));
        assert_eq!(refused_at(&run), Some(100));
        run[100] = (7, "k99");
        assert_eq!(refused_at(&run), Some(100));
    }

    #[test]
    fn progress_reports_rates_and_an_eta() {
        let p = BootProgress::default();
        p.items.store(1000, Ordering::Relaxed);
        p.bytes.store(4 << 20, Ordering::Relaxed);
        let r = p.report(Duration::from_secs(2), Some(10 << 20));
        assert_eq!(r.items_per_s, 500.0);
        assert_eq!(r.bytes_per_s, f64::from(2 << 20));
        assert_eq!(r.eta, Some(Duration::from_secs(3)));
        assert_eq!(p.report(Duration::from_secs(2), None).eta, None);
        let idle = BootProgress::default().report(Duration::from_secs(1), Some(1));
        assert_eq!(idle.eta, None, "no rate yet, no ETA");
    }
}
