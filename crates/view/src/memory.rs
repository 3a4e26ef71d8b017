//! The Memory View: the latest value of every live item of one partition range, in memory
//! (get and multiget). It boots from Disk Views: select sources, iterate them concurrently
//! to one cut (latest only), then tail the log from cut + 1 (invariant 5).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use spindle_core::{Index, ItemKey, Partition, Record};
use spindle_log::{Log, ReadError};

use crate::disk::DiskView;
use crate::error::{IterError, ViewError};
use crate::frame::{FrameReader, FrameRef};
use crate::iterate::IterRequest;
use crate::select::Plan;

/// Frame bytes an iteration fills per batch while booting.
pub const BOOT_BATCH_BYTES: usize = 1 << 20;
/// Records asked of the log per read while tailing.
pub const TAIL_BATCH_RECORDS_MAX: usize = 4096;

/// Live items: key → (version, JSON object).
pub type Items = HashMap<ItemKey, (Index, String)>;

type Hasher = foldhash::fast::RandomState;

/// Items of one hash range, keyed by their core key encoding (one allocation per key,
/// fast to hash).
#[derive(Debug)]
struct Shard {
    range: Partition,
    items: HashMap<Box<[u8]>, (Index, String), Hasher>,
}

impl Shard {
    fn new(range: Partition) -> Self {
        Shard {
            range,
            items: HashMap::default(),
        }
    }
}

/// Shards tile the view's partition in hash order; a boot fills one per source, in
/// parallel, with no merge afterwards.
#[derive(Debug)]
struct State {
    shards: Vec<Shard>,
    applied: Index,
}

impl State {
    fn shard(&self, hash: u32) -> &Shard {
        let i = self
            .shards
            .partition_point(|s| s.range.lo() <= u64::from(hash));
        &self.shards[i - 1]
    }

    fn shard_mut(&mut self, hash: u32) -> &mut Shard {
        let i = self
            .shards
            .partition_point(|s| s.range.lo() <= u64::from(hash));
        &mut self.shards[i - 1]
    }

    fn get(&self, key: &ItemKey) -> Option<(Index, String)> {
        self.shard(key.hash())
            .items
            .get(key.to_bytes().as_slice())
            .cloned()
    }
}

/// Latest values of the live items of one partition.
#[derive(Debug)]
pub struct MemoryView {
    partition: Partition,
    state: RwLock<State>,
}

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
}

/// A snapshot of boot progress with its rate (and an ETA when the total is known).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressReport {
    pub items: u64,
    pub bytes: u64,
    pub items_per_s: f64,
    pub bytes_per_s: f64,
    /// Remaining time if `bytes_total` was given.
    pub eta: Option<Duration>,
}

impl BootProgress {
    /// Items, bytes and rates since `started`; the ETA needs an estimate of total bytes
    /// (for example RocksDB's live-data estimate of the sources).
    pub fn report(&self, started: Instant, bytes_total: Option<u64>) -> ProgressReport {
        let items = self.items.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64().max(1e-9);
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

impl MemoryView {
    /// An empty view of `partition` at index 0 (replaying the log into it builds it from
    /// scratch).
    pub fn new(partition: Partition) -> Self {
        MemoryView {
            partition,
            state: RwLock::new(State {
                shards: vec![Shard::new(partition)],
                applied: Index::ZERO,
            }),
        }
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    pub fn applied_index(&self) -> Index {
        self.state.read().applied
    }

    /// Live items held.
    pub fn len(&self) -> usize {
        self.state.read().shards.iter().map(|s| s.items.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest version of a live item: its index and JSON object.
    pub fn get(&self, key: &ItemKey) -> Option<(Index, String)> {
        if !self.partition.contains(key.hash()) {
            return None;
        }
        self.state.read().get(key)
    }

    /// `get` for many keys under one lock, so all answers come from one applied index.
    pub fn multiget(&self, keys: &[ItemKey]) -> (Index, Vec<Option<(Index, String)>>) {
        let state = self.state.read();
        let values = keys
            .iter()
            .map(|k| {
                self.partition
                    .contains(k.hash())
                    .then(|| state.get(k))
                    .flatten()
            })
            .collect();
        (state.applied, values)
    }

    /// Every live item (for tests and dumps).
    pub fn snapshot(&self) -> (Index, Items) {
        let state = self.state.read();
        let mut items = Items::new();
        for shard in &state.shards {
            for (key, value) in &shard.items {
                let (key, _) = ItemKey::decode(key).expect("memory view keys are valid");
                items.insert(key, value.clone());
            }
        }
        (state.applied, items)
    }

    /// Apply log records continuing the applied prefix (ending on a commit), all under one
    /// lock so readers never see part of a transaction.
    pub fn apply(&self, records: &[Record]) -> Result<Index, ViewError> {
        let mut state = self.state.write();
        let fresh = match records.iter().position(|r| r.index > state.applied) {
            Some(i) => &records[i..],
            None => return Ok(state.applied),
        };
        if fresh[0].index != state.applied.next() {
            return Err(ViewError::Gap {
                applied: state.applied,
                got: fresh[0].index,
            });
        }
        let last = fresh.last().expect("non-empty");
        if !last.commit {
            return Err(ViewError::PartialTransaction { last: last.index });
        }
        for r in fresh {
            let hash = r.key.hash();
            if self.partition.contains(hash) {
                let shard = state.shard_mut(hash);
                match r.value.as_json() {
                    Some(json) => {
                        shard
                            .items
                            .insert(r.key.to_bytes().into(), (r.index, json.to_owned()));
                    }
                    None => {
                        shard.items.remove(r.key.to_bytes().as_slice());
                    }
                }
            }
        }
        state.applied = last.index;
        Ok(last.index)
    }

    /// Apply everything durable in `log` now.
    pub async fn catch_up<L: Log>(&self, log: &L) -> Result<Index, ViewError> {
        loop {
            let applied = self.applied_index();
            if applied >= log.durable_index() {
                return Ok(applied);
            }
            let next = applied.next();
            let records = log
                .read(next, TAIL_BATCH_RECORDS_MAX)
                .await
                .map_err(|e| match e {
                    ReadError::Truncated { first } => ViewError::LogTruncated { next, first },
                    other => ViewError::Log(other),
                })?;
            if records.is_empty() {
                return Ok(applied);
            }
            self.apply(&records)?;
        }
    }

    /// Boot from the sources of `plan` (looked up by id with `view_of`): iterate them
    /// concurrently to `plan.cut`, latest versions only. The view is then at `plan.cut`;
    /// the caller tails the log from `cut + 1` (`catch_up`, or a follower).
    pub fn boot<'v>(
        partition: Partition,
        plan: &Plan,
        view_of: impl Fn(&str) -> Option<&'v DiskView>,
        progress: &BootProgress,
    ) -> Result<MemoryView, IterError> {
        let mut requests = Vec::with_capacity(plan.sources.len());
        for source in &plan.sources {
            let view = view_of(&source.view).ok_or_else(|| IterError::UnknownSource {
                view: source.view.clone(),
            })?;
            let mut req = IterRequest::range(source.range);
            req.to = Some(plan.cut);
            req.latest_only = true;
            requests.push((view, req));
        }
        progress
            .sources_total
            .store(requests.len() as u64, Ordering::Relaxed);
        let parts: Vec<Result<Shard, IterError>> = std::thread::scope(|s| {
            let handles: Vec<_> = requests
                .iter()
                .map(|(view, req)| s.spawn(move || boot_source(view, req, plan.cut, progress)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("boot source thread panicked"))
                .collect()
        });
        let shards = parts.into_iter().collect::<Result<Vec<Shard>, _>>()?;
        let mut at = partition.lo();
        for shard in &shards {
            assert_eq!(
                shard.range.lo(),
                at,
                "plan sources tile the view's partition"
            );
            at = shard.range.hi();
        }
        assert_eq!(at, partition.hi(), "plan sources tile the view's partition");
        Ok(MemoryView {
            partition,
            state: RwLock::new(State {
                shards,
                applied: plan.cut,
            }),
        })
    }
}

/// Iterate one source to the cut and collect the live items it sends into a shard of its
/// range.
fn boot_source(
    view: &DiskView,
    req: &IterRequest,
    cut: Index,
    progress: &BootProgress,
) -> Result<Shard, IterError> {
    let mut it = view.iterate(req)?;
    assert_eq!(it.cut(), cut, "a source serves the plan's cut");
    let mut shard = Shard::new(it.request().range);
    let mut buf = Vec::with_capacity(BOOT_BATCH_BYTES + (64 << 10));
    loop {
        buf.clear();
        let done = it.fill(&mut buf, BOOT_BATCH_BYTES)?;
        let mut frames = 0;
        let mut reader = FrameReader::new(&buf);
        while let Some(frame) = reader.next_ref() {
            let frame = frame.map_err(|e| view.corrupt(e.to_string()))?;
            let FrameRef::Version {
                index, key, value, ..
            } = frame
            else {
                continue;
            };
            // Invariant 6, and latest-only: one version per item, none above the cut.
            assert!(index <= cut, "a version at {index} is above the cut {cut}");
            frames += 1;
            if let Some(json) = value {
                let json = std::str::from_utf8(json)
                    .map_err(|_| view.corrupt(format!("value at {index} is not UTF-8")))?;
                let previous = shard.items.insert(key.into(), (index, json.to_owned()));
                assert!(previous.is_none(), "latest-only sent an item twice");
            }
        }
        progress.items.fetch_add(frames, Ordering::Relaxed);
        progress
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        if done {
            progress.sources_done.fetch_add(1, Ordering::Relaxed);
            return Ok(shard);
        }
    }
}
