//! The Memory View: the latest value of every live item of one partition range, in memory
//! (get and multiget). It boots from Disk Views: select sources, iterate them concurrently
//! to one cut (latest only), then tail the log from cut + 1 (invariant 5).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_log::{Log, ReadError};

use crate::disk::DiskView;
use crate::error::{IterError, ViewError};
use crate::frame::{Frame, FrameReader};
use crate::iterate::IterRequest;
use crate::select::Plan;

/// Frame bytes an iteration fills per batch while booting.
pub const BOOT_BATCH_BYTES: usize = 1 << 20;
/// Records asked of the log per read while tailing.
pub const TAIL_BATCH_RECORDS_MAX: usize = 4096;

/// Live items: key → (version, JSON object).
pub type Items = HashMap<ItemKey, (Index, String)>;

#[derive(Debug, Default)]
struct State {
    items: Items,
    applied: Index,
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
            state: RwLock::new(State::default()),
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
        self.state.read().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The latest version of a live item: its index and JSON object.
    pub fn get(&self, key: &ItemKey) -> Option<(Index, String)> {
        self.state.read().items.get(key).cloned()
    }

    /// `get` for many keys under one lock, so all answers come from one applied index.
    pub fn multiget(&self, keys: &[ItemKey]) -> (Index, Vec<Option<(Index, String)>>) {
        let state = self.state.read();
        let values = keys.iter().map(|k| state.items.get(k).cloned()).collect();
        (state.applied, values)
    }

    /// Every live item (for tests and dumps).
    pub fn snapshot(&self) -> (Index, Items) {
        let state = self.state.read();
        (state.applied, state.items.clone())
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
            if self.partition.contains(r.key.hash()) {
                set(&mut state.items, r.key.clone(), r.index, &r.value);
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
        let parts: Vec<Result<Items, IterError>> = std::thread::scope(|s| {
            let handles: Vec<_> = requests
                .iter()
                .map(|(view, req)| {
                    s.spawn(move || boot_source(view, req, partition, plan.cut, progress))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("boot source thread panicked"))
                .collect()
        });
        let mut items = HashMap::new();
        for part in parts {
            items.extend(part?);
        }
        Ok(MemoryView {
            partition,
            state: RwLock::new(State {
                items,
                applied: plan.cut,
            }),
        })
    }
}

fn set(items: &mut Items, key: ItemKey, index: Index, value: &Value) {
    match value.as_json() {
        Some(json) => {
            items.insert(key, (index, json.to_owned()));
        }
        None => {
            items.remove(&key);
        }
    }
}

/// Iterate one source to the cut and collect the live items of `partition` it sends.
fn boot_source(
    view: &DiskView,
    req: &IterRequest,
    partition: Partition,
    cut: Index,
    progress: &BootProgress,
) -> Result<Items, IterError> {
    let mut it = view.iterate(req)?;
    assert_eq!(it.cut(), cut, "a source serves the plan's cut");
    let mut items = HashMap::new();
    let mut buf = Vec::with_capacity(BOOT_BATCH_BYTES + (64 << 10));
    loop {
        buf.clear();
        let done = it.fill(&mut buf, BOOT_BATCH_BYTES)?;
        let mut frames = 0;
        for frame in FrameReader::new(&buf) {
            let frame = frame.map_err(|e| view.corrupt(e.to_string()))?;
            let Frame::Version(v) = frame else { continue };
            // Invariant 6, and latest-only: one version per item, none above the cut.
            assert!(
                v.index <= cut,
                "{} at {} is above the cut {cut}",
                v.key,
                v.index
            );
            frames += 1;
            if !partition.contains(v.key.hash()) {
                continue;
            }
            if let Some(json) = v.value {
                let previous = items.insert(v.key, (v.index, json));
                assert!(previous.is_none(), "latest-only sent an item twice");
            }
        }
        progress.items.fetch_add(frames, Ordering::Relaxed);
        progress
            .bytes
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        if done {
            progress.sources_done.fetch_add(1, Ordering::Relaxed);
            return Ok(items);
        }
    }
}
