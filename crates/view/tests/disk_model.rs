//! Model test: random transactions go through a real FileLog into a Disk View, which is
//! stepped, caught up and restarted at random; after every step its point reads (latest,
//! as-of, history, out-edges, and their pages walked with small limits, cursors and label
//! filters) equal a BTreeMap reference cut at the view's applied index.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use spindle_core::{Index, ItemKey, Partition, Transaction, Value};
use spindle_view::{
    follow, DiskView, EdgeFilter, Freshness, PageBounds, Version, ViewError,
    EDGE_SCAN_VERSIONS_MAX, PAGE_VALUE_BYTES_MAX,
};

#[derive(Clone, Debug)]
enum Op {
    Append(TxnSpec),
    /// Apply the next `n` transactions, one read of the log each.
    Step(u8),
    CatchUp,
    Restart,
    /// Walk node `n`'s out-edges (as of the applied index) and history pages of `limit`
    /// while the view applies one more record before each page after the first.
    PagesWhileApplying {
        n: u8,
        limit: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => txn_strategy().prop_map(Op::Append),
        2 => (1u8..4).prop_map(Op::Step),
        1 => Just(Op::CatchUp),
        1 => Just(Op::Restart),
        1 => (0u8..6, 1u8..3).prop_map(|(n, limit)| Op::PagesWhileApplying { n, limit }),
    ]
}

fn partition() -> impl Strategy<Value = Partition> {
    prop_oneof![Just(1u64), Just(2), Just(4)]
        .prop_flat_map(|n| (0..n).prop_map(move |i| Partition::nth(i, n)))
}

/// Every version written, in log order.
type Written = Vec<(Index, ItemKey, Value)>;

fn versions_upto(written: &Written, key: &ItemKey, upto: Index) -> Vec<Version> {
    written
        .iter()
        .filter(|(i, k, _)| k == key && *i <= upto)
        .map(|(index, _, value)| Version {
            index: *index,
            value: value.clone(),
        })
        .collect()
}

/// The live out-edges of node `id` as of `at`, each at its version then, in key order.
fn edges_at(written: &Written, id: &str, at: Index) -> BTreeMap<ItemKey, Version> {
    let mut edges = BTreeMap::new();
    for (index, k, value) in written.iter().filter(|(i, _, _)| *i <= at) {
        if matches!(k, ItemKey::Edge { from, .. } if from == id) {
            let version = Version {
                index: *index,
                value: value.clone(),
            };
            edges.insert(k.clone(), version);
        }
    }
    edges.retain(|_, v| !v.value.is_tombstone());
    edges
}

/// The JSON bytes of a page's values.
fn value_bytes<'a>(versions: impl Iterator<Item = &'a Version>) -> usize {
    versions
        .map(|v| v.value.as_json().map_or(0, str::len))
        .sum()
}

/// Every version of `key` read page by page, `limit` at a time, each page's values within
/// `bytes_max` (`None`: the default bound), calling `between` before every page after the
/// first.
fn walk_history(
    view: &DiskView,
    key: &ItemKey,
    limit: usize,
    bytes_max: Option<usize>,
    between: &mut dyn FnMut(),
) -> Vec<Version> {
    let mut out: Vec<Version> = Vec::new();
    loop {
        if !out.is_empty() {
            between();
        }
        let after = out.last().map_or(Index::ZERO, |v| v.index);
        let page = match bytes_max {
            None => view.history_page(key, after, limit, Freshness::Any),
            Some(b) => view.history_page_sized(key, after, limit, b, Freshness::Any),
        }
        .unwrap();
        assert!(page.entries.len() <= limit);
        if bytes_max.is_none() {
            assert!(
                !page.more || page.entries.len() == limit,
                "a short page says more"
            );
        }
        let bytes_max = bytes_max.unwrap_or(PAGE_VALUE_BYTES_MAX);
        assert!(
            page.entries.len() <= 1 || value_bytes(page.entries.iter()) <= bytes_max,
            "a page's values stay within {bytes_max} bytes"
        );
        assert!(
            !page.more || page.entries.len() == limit || !page.entries.is_empty(),
            "a short page that says more holds what fitted"
        );
        if let Some(first) = page.entries.first() {
            assert!(first.index > after, "a page starts past its cursor");
        }
        out.extend(page.entries);
        if !page.more {
            return out;
        }
    }
}

/// The out-edges of `id` as of `at` (one label, if given) read page by page, each page
/// reading at most `scan_max` versions and holding at most `bytes_max` bytes of values
/// (`None`: the default bounds), calling `between` before every page after the first.
fn walk_edges(
    view: &DiskView,
    id: &str,
    at: Index,
    label: Option<&str>,
    limit: usize,
    (scan_max, bytes_max): (Option<usize>, Option<usize>),
    between: &mut dyn FnMut(),
) -> Vec<(ItemKey, Version)> {
    let mut out: Vec<(ItemKey, Version)> = Vec::new();
    let mut cursor: Option<(String, String)> = None;
    let mut pages = 0;
    loop {
        if pages > 0 {
            between();
        }
        pages += 1;
        assert!(pages < 10_000, "pages of {id}'s edges do not end");
        let after = cursor.as_ref().map(|(l, t)| (l.as_str(), t.as_str()));
        let filter = EdgeFilter {
            at: Some(at),
            label,
            after,
        };
        let page = match (scan_max, bytes_max) {
            (None, None) => view.out_edges_page(id, filter, limit, Freshness::Any),
            _ => {
                let bounds = PageBounds {
                    limit,
                    scan_max: scan_max.unwrap_or(EDGE_SCAN_VERSIONS_MAX),
                    bytes_max: bytes_max.unwrap_or(PAGE_VALUE_BYTES_MAX),
                };
                view.out_edges_page_bounded(id, filter, bounds, Freshness::Any)
            }
        }
        .unwrap();
        let bytes = value_bytes(page.edges.iter().map(|(_, v)| v));
        assert!(
            page.edges.len() <= 1 || bytes <= bytes_max.unwrap_or(PAGE_VALUE_BYTES_MAX),
            "a page's values stay within its bound"
        );
        let labels_to: Vec<(String, String)> = page
            .edges
            .iter()
            .map(|(k, _)| match k {
                ItemKey::Edge { label, to, .. } => (label.clone(), to.clone()),
                ItemKey::Node { .. } => panic!("a node among out-edges"),
            })
            .collect();
        if let (Some(c), Some(first)) = (&cursor, labels_to.first()) {
            assert!(first > c, "a page starts past its cursor");
        }
        if let (Some(next), Some(last)) = (&page.next, labels_to.last()) {
            assert!(next >= last, "the next page starts past this one");
        }
        if let (Some(next), Some(c)) = (&page.next, &cursor) {
            assert!(next > c, "a page moves its cursor on");
        }
        assert!(page.edges.len() <= limit);
        if scan_max.is_none() && bytes_max.is_none() {
            assert!(
                page.next.is_none() || page.edges.len() == limit,
                "a short page says more"
            );
        }
        out.extend(page.edges);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

fn check(view: &DiskView, written: &Written) {
    let applied = view.applied_index();
    let any = Freshness::Any;
    for n in 0..24 {
        let key = item(n);
        if !view.partition().contains(key.hash()) {
            assert!(matches!(
                view.latest(&key, any),
                Err(ViewError::NotInPartition { .. })
            ));
            continue;
        }
        let want = versions_upto(written, &key, applied);
        assert_eq!(view.history(&key, any).unwrap(), want, "history of {key}");
        for limit in [1, 2, 5] {
            assert_eq!(
                walk_history(view, &key, limit, None, &mut || {}),
                want,
                "history of {key} by {limit}"
            );
        }
        for bytes_max in [0, 12, 30] {
            assert_eq!(
                walk_history(view, &key, 5, Some(bytes_max), &mut || {}),
                want,
                "history of {key} by {bytes_max} bytes"
            );
        }
        assert_eq!(
            view.latest(&key, any).unwrap().as_ref(),
            want.last(),
            "latest of {key}"
        );
        for at in [applied.get() / 3, applied.get() / 2, applied.get()] {
            let at = Index::new(at);
            let want_at = want.iter().rev().find(|v| v.index <= at);
            assert_eq!(
                view.as_of(&key, at, any).unwrap().as_ref(),
                want_at,
                "{key} as of {at}"
            );
        }
        if let ItemKey::Node { id } = &key {
            let want_edges = edges_at(written, id, applied);
            let got: BTreeMap<_, _> = view.out_edges(id, None, any).unwrap().into_iter().collect();
            assert_eq!(got, want_edges, "out-edges of {key}");
            for at in [Index::new(applied.get() / 2), applied] {
                let want: Vec<_> = edges_at(written, id, at).into_iter().collect();
                for limit in [1, 2, 7] {
                    let got = walk_edges(view, id, at, None, limit, (None, None), &mut || {});
                    assert_eq!(got, want, "out-edges of {key} as of {at} by {limit}");
                }
                for bytes_max in [0, 12, 30] {
                    let got =
                        walk_edges(view, id, at, None, 7, (None, Some(bytes_max)), &mut || {});
                    assert_eq!(
                        got, want,
                        "out-edges of {key} as of {at} by {bytes_max} bytes"
                    );
                }
                for (limit, scan_max) in [(1, 1), (3, 1), (2, 2), (7, 3)] {
                    let got = walk_edges(
                        view,
                        id,
                        at,
                        None,
                        limit,
                        (Some(scan_max), None),
                        &mut || {},
                    );
                    assert_eq!(
                        got, want,
                        "out-edges of {key} as of {at} by {limit}, {scan_max} versions a page"
                    );
                }
                let labels: std::collections::BTreeSet<String> = want
                    .iter()
                    .filter_map(|(k, _)| match k {
                        ItemKey::Edge { label, .. } => Some(label.clone()),
                        ItemKey::Node { .. } => None,
                    })
                    .chain(["no-such-label".to_owned()])
                    .collect();
                for label in &labels {
                    let want_label: Vec<_> = want
                        .iter()
                        .filter(|(k, _)| matches!(k, ItemKey::Edge { label: l, .. } if l == label))
                        .cloned()
                        .collect();
                    let got = walk_edges(
                        view,
                        id,
                        at,
                        Some(label),
                        2,
                        (Some(2), Some(12)),
                        &mut || {},
                    );
                    assert_eq!(got, want_label, "{key}'s {label:?} edges as of {at}");
                }
            }
        }
    }
}

fn run(partition: Partition, ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let log = open_log(&dir.path().join("log"));
    let view_dir = dir.path().join("view");
    let mut view = DiskView::open(&view_dir, partition).unwrap();
    let mut written = Written::new();
    for op in ops {
        match op {
            Op::Append(spec) => {
                let txn = transaction(&spec);
                let commit = log.append_blocking(&txn).unwrap();
                let first = commit.get() + 1 - txn.writes.len() as u64;
                for (i, w) in txn.writes.into_iter().enumerate() {
                    written.push((Index::new(first + i as u64), w.key, w.value));
                }
            }
            Op::Step(n) => {
                for _ in 0..n {
                    let next = view.applied_index().next();
                    if next > log.durable_index() {
                        break;
                    }
                    let records = log.read(next, 1).unwrap();
                    view.apply(&records).unwrap();
                }
            }
            Op::CatchUp => {
                let applied = rt.block_on(follow::catch_up(&view, &log)).unwrap();
                assert_eq!(applied, log.durable_index());
            }
            Op::PagesWhileApplying { n, limit } => {
                let key = item(n);
                let (ItemKey::Node { id }, true) = (&key, partition.contains(key.hash())) else {
                    continue;
                };
                let limit = usize::from(limit);
                let apply_one = &mut || {
                    let next = view.applied_index().next();
                    if next <= log.durable_index() {
                        view.apply(&log.read(next, 1).unwrap()).unwrap();
                    }
                };
                // Writes after `at` do not change a listing as of `at`, however the pages
                // fall between them.
                let at = view.applied_index();
                let want: Vec<_> = edges_at(&written, id, at).into_iter().collect();
                let got = walk_edges(&view, id, at, None, limit, (None, None), apply_one);
                assert_eq!(got, want, "out-edges of {key} as of {at} while applying");
                // History pages go by index: versions applied during the walk come in its
                // later pages, so the walk ends with every version up to where the view is.
                let got = walk_history(&view, &key, limit, None, apply_one);
                let want = versions_upto(&written, &key, view.applied_index());
                assert_eq!(got, want, "history of {key} while applying");
            }
            Op::Restart => {
                let before = view.applied_index();
                drop(view);
                view = DiskView::open(&view_dir, partition).unwrap();
                assert_eq!(
                    view.applied_index(),
                    before,
                    "the applied index survives a restart"
                );
            }
        }
        check(&view, &written);
    }
    rt.block_on(follow::catch_up(&view, &log)).unwrap();
    check(&view, &written);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(192)))]

    #[test]
    fn disk_view_matches_the_reference(partition in partition(), ops in proptest::collection::vec(op(), 1..40)) {
        run(partition, ops);
    }
}

#[test]
fn a_view_refuses_a_directory_of_another_partition() {
    let dir = tempfile::tempdir().unwrap();
    drop(DiskView::open(dir.path(), Partition::nth(0, 4)).unwrap());
    let err = DiskView::open(dir.path(), Partition::nth(1, 4)).unwrap_err();
    assert!(matches!(err, ViewError::WrongPartition { .. }), "{err}");
}

#[test]
fn records_that_skip_ahead_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    for n in 0..3 {
        log.append_blocking(&transaction(&vec![(n, Some(n))]))
            .unwrap();
    }
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    let records = log.read(Index::new(2), 10).unwrap();
    let err = view.apply(&records).unwrap_err();
    assert!(matches!(err, ViewError::Gap { .. }), "{err}");
    assert_eq!(view.applied_index(), Index::ZERO);
}

#[test]
fn a_page_of_mostly_deleted_edges_stops_at_its_scan_bound() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    let edge = |n: u32| ItemKey::edge("hub", "knows", format!("n{n:03}")).unwrap();
    // 40 edges written and deleted (80 versions), then one live edge after them.
    for n in 0..40 {
        log.append_blocking(&Transaction::new().write(edge(n), value(Some(1))))
            .unwrap();
        log.append_blocking(&Transaction::new().write(edge(n), Value::TOMBSTONE))
            .unwrap();
    }
    log.append_blocking(&Transaction::new().write(edge(999), value(Some(2))))
        .unwrap();
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    let rt = runtime();
    rt.block_on(follow::catch_up(&view, &log)).unwrap();
    let all = EdgeFilter::default();

    // Bounded at 10 versions, the first page reads 5 deleted edges whole and stops after
    // the fifth, with nothing to show and a cursor.
    let bounds = PageBounds {
        limit: 100,
        scan_max: 10,
        bytes_max: PAGE_VALUE_BYTES_MAX,
    };
    let page = view
        .out_edges_page_bounded("hub", all, bounds, Freshness::Any)
        .unwrap();
    assert!(page.edges.is_empty(), "{page:?}");
    assert_eq!(page.next, Some(("knows".to_owned(), "n004".to_owned())));

    // Following the cursors reaches the live edge, and then the end.
    let got = walk_edges(
        &view,
        "hub",
        view.applied_index(),
        None,
        100,
        (Some(10), None),
        &mut || {},
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, edge(999));

    // The default bound reads all 81 versions in one page.
    let page = view
        .out_edges_page("hub", all, 100, Freshness::Any)
        .unwrap();
    assert_eq!(page.edges.len(), 1);
    assert_eq!(page.next, None);
}
