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
