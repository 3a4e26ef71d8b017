//! Helpers shared by the view's behaviour tests: a small item universe, random
//! transactions, a log in a temporary directory, and a reference built by replaying it.

#![allow(dead_code)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use spindle_core::{Index, ItemKey, Partition, Transaction, Value};
use spindle_log::{FileLog, LogConfig, SyncMode};
use spindle_view::frame::{Frame, FrameReader, VersionFrame};
use spindle_view::{DiskView, IterRequest};

/// Items tests write: 6 nodes and 3 labelled edges out of each (some ids contain NUL so
/// the key escaping is exercised).
pub fn item(n: u8) -> ItemKey {
    let ids = ["a", "b", "c\0", "d", "e\0e", "f"];
    let n = usize::from(n) % 24;
    let from = ids[n % 6];
    match n / 6 {
        0 => ItemKey::node(from).unwrap(),
        k => ItemKey::edge(from, ["knows", "likes", "likes"][k - 1], ids[(n + k) % 6]).unwrap(),
    }
}

/// A version's value from a small seed: `None` is a tombstone.
pub fn value(seed: Option<u8>) -> Value {
    match seed {
        None => Value::TOMBSTONE,
        Some(s) if s % 3 == 0 => Value::json(format!("{{\"n\":{s}}}")).unwrap(),
        Some(s) => Value::json(format!("{{\"n\":{s},\"name\":\"x{s}\",\"w\":[1,2]}}")).unwrap(),
    }
}

/// Writes of one transaction, as (item seed, value seed).
pub type TxnSpec = Vec<(u8, Option<u8>)>;

pub fn txn_strategy() -> impl Strategy<Value = TxnSpec> {
    proptest::collection::vec(
        (any::<u8>(), proptest::option::weighted(0.85, any::<u8>())),
        1..5,
    )
}

pub fn transaction(spec: &TxnSpec) -> Transaction {
    let mut txn = Transaction::new();
    for &(i, v) in spec {
        txn = txn.write(item(i), value(v));
    }
    txn
}

/// A log that does not sync (views never need the log's durability in tests) with small
/// segments, so reads cross segment boundaries.
pub fn open_log(dir: &std::path::Path) -> FileLog {
    let config = LogConfig {
        segment_bytes: 64 << 10,
        sync: SyncMode::Off,
        ..LogConfig::default()
    };
    FileLog::open(dir, config).unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every version of every item: what a Disk View must hold.
pub type Versions = BTreeMap<ItemKey, Vec<(Index, Value)>>;

/// Replay the log from 1 to `upto`, keeping the items in `partition`.
pub fn replay(log: &FileLog, upto: Index, partition: Partition) -> Versions {
    let mut out = Versions::new();
    let mut next = Index::FIRST;
    while next <= upto {
        let records = log.read(next, 1024).unwrap();
        assert!(!records.is_empty(), "log ends before {upto}");
        for r in records {
            if r.index > upto {
                break;
            }
            next = r.index.next();
            if partition.contains(r.key.hash()) {
                out.entry(r.key).or_default().push((r.index, r.value));
            }
        }
    }
    out
}

/// Run an iteration to its end; returns the version frames and the end frame's cut.
pub fn iterate_all(view: &DiskView, req: &IterRequest) -> (Vec<VersionFrame>, Index) {
    let mut it = view.iterate(req).unwrap();
    let mut buf = Vec::new();
    while !it.fill(&mut buf, 4096).unwrap() {}
    let mut frames = Vec::new();
    let mut cut = None;
    for f in FrameReader::new(&buf) {
        match f.unwrap() {
            Frame::Version(v) => {
                assert!(cut.is_none(), "a frame follows the end frame");
                frames.push(v);
            }
            Frame::End(end) => {
                assert_eq!(end.frames, frames.len() as u64);
                cut = Some(end.cut);
            }
        }
    }
    (frames, cut.expect("the stream ends with an end frame"))
}

/// Invariant 6: within one item, frames come in increasing index order, none above `cut`.
pub fn assert_log_order_within_keys(frames: &[VersionFrame], cut: Index) {
    let mut last: BTreeMap<&ItemKey, Index> = BTreeMap::new();
    for f in frames {
        assert!(
            f.index <= cut,
            "{} at {} is above the cut {cut}",
            f.key,
            f.index
        );
        if let Some(prev) = last.insert(&f.key, f.index) {
            assert!(prev < f.index, "{}: {} after {}", f.key, f.index, prev);
        }
    }
}

/// Group version frames by item, as a `Versions` map (values as JSON objects).
pub fn frames_to_versions(frames: &[VersionFrame]) -> Versions {
    let mut out = Versions::new();
    for f in frames {
        let v = match (&f.value, f.tombstone) {
            (_, true) => Value::TOMBSTONE,
            (Some(json), false) => Value::json(json.as_str()).unwrap(),
            (None, false) => panic!("frame without value for {}", f.key),
        };
        out.entry(f.key.clone()).or_default().push((f.index, v));
    }
    out
}

/// Apply whole transactions until `view` reaches `target` (or the log's end).
pub fn step_to(view: &DiskView, log: &FileLog, target: Index) {
    while view.applied_index() < target.min(log.durable_index()) {
        let records = log.read(view.applied_index().next(), 1).unwrap();
        view.apply(&records).unwrap();
    }
}

/// `n` Disk Views of the n-way partitioning, named `disk{i}`, each `lags[i]` records (or
/// fewer, to a transaction boundary) behind the log's end.
pub fn disk_views(dir: &std::path::Path, log: &FileLog, n: u64, lags: &[u8]) -> Vec<DiskView> {
    let views: Vec<DiskView> = (0..n)
        .map(|i| DiskView::open(dir.join(format!("disk{i}")), Partition::nth(i, n)).unwrap())
        .collect();
    for (i, view) in views.iter().enumerate() {
        let lag = u64::from(lags[i % lags.len()]);
        step_to(
            view,
            log,
            Index::new(log.durable_index().get().saturating_sub(lag)),
        );
    }
    views
}

/// The catalog entry of each view (named as `disk_views` names them).
pub fn catalog(views: &[DiskView]) -> Vec<spindle_view::CatalogEntry> {
    views
        .iter()
        .enumerate()
        .map(|(i, v)| spindle_view::CatalogEntry {
            id: format!("disk{i}"),
            range: v.partition(),
            applied: v.applied_index(),
            role: spindle_view::Role::Iteration,
        })
        .collect()
}

/// A plan for `target` from every view, however far behind.
pub fn plan(views: &[DiskView], target: Partition, head: Index) -> spindle_view::Plan {
    let req = spindle_view::SelectRequest {
        range: target,
        role: spindle_view::Role::Iteration,
        head,
        lag_records_max: u64::MAX,
    };
    spindle_view::select(&catalog(views), &req).unwrap()
}

/// Look a view up by the name `disk_views` gave it.
pub fn by_name<'v>(views: &'v [DiskView]) -> impl Fn(&str) -> Option<&'v DiskView> {
    |id| views.get(id.strip_prefix("disk")?.parse::<usize>().ok()?)
}

/// Proptest cases: `PROPTEST_CASES` when set (for deeper runs), else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A seeded pseudo-random generator (xorshift64*) for tests that interleave threads in
/// random but reproducible patterns.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Item `k` of a larger universe than `item`: nodes `n{k/4}` and three edges out of each.
pub fn wide_item(k: u64) -> ItemKey {
    let node = format!("n{}", k / 4);
    match k % 4 {
        0 => ItemKey::node(node).unwrap(),
        e => ItemKey::edge(node, "knows", format!("n{}", (k * 7 + e) % 97)).unwrap(),
    }
}

/// `txns` random transactions (1 to 4 writes each over `items` items), as the records a
/// log would hold, indexes from 1.
pub fn random_records(rng: &mut Rng, txns: usize, items: u64) -> Vec<Vec<spindle_core::Record>> {
    let mut next = 1u64;
    (0..txns)
        .map(|_| {
            let writes = 1 + rng.below(4);
            (0..writes)
                .map(|w| {
                    let seed = (rng.below(10) > 0).then(|| rng.below(256) as u8);
                    let record = spindle_core::Record {
                        index: Index::new(next),
                        commit: w + 1 == writes,
                        key: wide_item(rng.below(items)),
                        value: value(seed),
                    };
                    next += 1;
                    record
                })
                .collect()
        })
        .collect()
}

/// Every version up to `cut` of the items in `partition`, from records in index order.
pub fn versions_upto(
    records: &[Vec<spindle_core::Record>],
    cut: Index,
    partition: Partition,
) -> Versions {
    let mut out = Versions::new();
    for r in records.iter().flatten() {
        if r.index <= cut && partition.contains(r.key.hash()) {
            out.entry(r.key.clone())
                .or_default()
                .push((r.index, r.value.clone()));
        }
    }
    out
}

/// The version frames a request served over `range` to `cut` must send, sorted by item
/// then index (iteration promises no order between items).
pub fn expected_frames(
    all: &Versions,
    req: &IterRequest,
    range: Partition,
    cut: Index,
) -> Vec<VersionFrame> {
    let from = req.from.max(Index::FIRST);
    let mut out = Vec::new();
    for (key, versions) in all {
        let kind_ok = match key {
            ItemKey::Node { .. } => req.kinds.nodes,
            ItemKey::Edge { .. } => req.kinds.edges,
        };
        if !kind_ok || !range.contains(key.hash()) {
            continue;
        }
        let mut wanted: Vec<_> = versions
            .iter()
            .filter(|(i, _)| *i >= from && *i <= cut)
            .collect();
        if req.latest_only {
            let newest = versions.iter().rev().find(|(i, _)| *i <= cut);
            wanted = newest.filter(|(i, _)| *i >= from).into_iter().collect();
        }
        for (index, value) in wanted {
            let json = value.as_json();
            let value = match (req.keys_only, &req.projection, json) {
                (_, _, None) | (true, _, _) => None,
                (false, None, Some(j)) => Some(j.to_owned()),
                (false, Some(p), Some(j)) => {
                    let v: serde_json::Value = serde_json::from_str(j).unwrap();
                    v.pointer(p).map(|x| x.to_string())
                }
            };
            out.push(VersionFrame {
                key: key.clone(),
                index: *index,
                tombstone: json.is_none(),
                projected: req.projection.is_some() && json.is_some(),
                value,
            });
        }
    }
    out
}

/// Sort frames by item then index, for comparison with `expected_frames`.
pub fn sorted(mut frames: Vec<VersionFrame>) -> Vec<VersionFrame> {
    frames.sort_by(|a, b| (&a.key, a.index).cmp(&(&b.key, b.index)));
    frames
}

/// Decode a rider's chunks: its version frames in order and its end frame, checking that
/// every chunk holds whole frames, that the end frame comes last and counts the frames.
pub fn decode_chunks(
    chunks: &[bytes::Bytes],
) -> (Vec<VersionFrame>, spindle_view::frame::EndFrame) {
    let mut frames = Vec::new();
    let mut end = None;
    for chunk in chunks {
        // An empty chunk is a rider saying it is alive (`idle_chunk_ms`): no frames.
        for f in FrameReader::new(chunk) {
            match f.expect("chunks hold whole, valid frames") {
                Frame::Version(v) => {
                    assert!(end.is_none(), "a frame follows the end frame");
                    frames.push(v);
                }
                Frame::End(e) => {
                    assert!(end.is_none(), "two end frames");
                    end = Some(e);
                }
            }
        }
    }
    let end = end.expect("the stream ends with an end frame");
    assert_eq!(
        end.frames,
        frames.len() as u64,
        "the end frame counts the frames"
    );
    (frames, end)
}

/// Read a rider to its end.
pub fn ride_all(rider: &mut spindle_view::Rider) -> Vec<bytes::Bytes> {
    let mut chunks = Vec::new();
    while let Some(chunk) = rider.next_chunk() {
        chunks.push(chunk.unwrap());
    }
    chunks
}

/// A Disk View of `partition` in `dir` holding `records` (applied transaction by
/// transaction).
pub fn view_with(
    dir: &std::path::Path,
    partition: Partition,
    records: &[Vec<spindle_core::Record>],
) -> DiskView {
    let view = DiskView::open(dir, partition).unwrap();
    for txn in records {
        view.apply(txn).unwrap();
    }
    view
}

/// An `idle_chunk_ms` no test waits out.
pub const IDLE_NEVER_MS: u64 = 3_600_000;

/// A whole-space Disk View of random records and a carousel over it, for the carousel tests.
pub struct CarouselFixture {
    pub records: Vec<Vec<spindle_core::Record>>,
    pub view: std::sync::Arc<DiskView>,
    pub carousel: spindle_view::Carousel,
}

/// `random_records(Rng::new(seed), txns, items)` in a view in `dir`, and a carousel with
/// `(chunk_bytes, ring_slots, rider_lag_chunks_max)`.
pub fn carousel_fixture(
    dir: &std::path::Path,
    seed: u64,
    txns: usize,
    items: u64,
    (chunk_bytes, ring_slots, rider_lag_chunks_max): (usize, usize, u64),
) -> CarouselFixture {
    let records = random_records(&mut Rng::new(seed), txns, items);
    let view = std::sync::Arc::new(view_with(dir, Partition::ALL, &records));
    let config = spindle_view::CarouselConfig {
        chunk_bytes,
        ring_slots,
        rider_lag_chunks_max,
        // These tests count chunks: no keep-alive chunk however slow the machine
        // (carousel_idle_chunks.rs tests those).
        idle_chunk_ms: IDLE_NEVER_MS,
        ..spindle_view::CarouselConfig::default()
    };
    let carousel = spindle_view::Carousel::new(view.clone(), config);
    CarouselFixture {
        records,
        view,
        carousel,
    }
}

/// The checksum a view of `partition` at `upto` must have, and the checkpoints it keeps at
/// `interval`, computed from the log's records alone (no RocksDB).
pub fn checksum_by_replay(
    log: &FileLog,
    upto: Index,
    partition: Partition,
    interval: u64,
) -> (spindle_view::Checksum, Vec<spindle_view::Checkpoint>) {
    use spindle_view::{checksum::CHECKPOINTS_KEPT_MAX, keys, Checkpoint, Checksum};
    let mut sum = Checksum::EMPTY;
    let mut checkpoints = Vec::new();
    let mut value = Vec::new();
    let mut next = Index::FIRST;
    while next <= upto {
        for r in log.read(next, 1024).unwrap() {
            if r.index > upto {
                break;
            }
            if partition.contains(r.key.hash()) {
                value.clear();
                keys::encode_value(&r.value, &mut value);
                let key = keys::version_key(&r.key, r.index);
                sum = sum.plus(Checksum::of_version(&key, &value));
            }
            if r.index.get().is_multiple_of(interval) {
                checkpoints.push(Checkpoint {
                    index: r.index,
                    checksum: sum,
                });
            }
            next = r.index.next();
        }
    }
    let keep = checkpoints.len().saturating_sub(CHECKPOINTS_KEPT_MAX);
    (sum, checkpoints.split_off(keep))
}
