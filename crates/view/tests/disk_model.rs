//! Model test: random transactions go through a real FileLog into a Disk View, which is
//! stepped, caught up and restarted at random; after every step its point reads (latest,
//! as-of, history, out-edges, and their pages walked with small limits, cursors and label
//! filters) equal a BTreeMap reference cut at the view's applied index.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use spindle_core::{Index, ItemKey, Partition, Value};
use spindle_view::{follow, DiskView, EdgeFilter, Freshness, Version, ViewError};

#[derive(Clone, Debug)]
enum Op {
    Append(TxnSpec),
    /// Apply the next `n` transactions, one read of the log each.
    Step(u8),
    CatchUp,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => txn_strategy().prop_map(Op::Append),
        2 => (1u8..4).prop_map(Op::Step),
        1 => Just(Op::CatchUp),
        1 => Just(Op::Restart),
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

/// Every version of `key` read page by page, `limit` at a time.
fn walk_history(view: &DiskView, key: &ItemKey, limit: usize) -> Vec<Version> {
    let mut out: Vec<Version> = Vec::new();
    loop {
        let after = out.last().map_or(Index::ZERO, |v| v.index);
        let page = view
            .history_page(key, after, limit, Freshness::Any)
            .unwrap();
        assert!(page.entries.len() <= limit);
        assert!(
            !page.more || page.entries.len() == limit,
            "a short page says more"
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

/// The out-edges of `id` as of `at` (one label, if given) read page by page.
fn walk_edges(
    view: &DiskView,
    id: &str,
    at: Index,
    label: Option<&str>,
    limit: usize,
) -> Vec<(ItemKey, Version)> {
    let mut out: Vec<(ItemKey, Version)> = Vec::new();
    loop {
        let after = match out.last() {
            Some((ItemKey::Edge { label, to, .. }, _)) => Some((label.as_str(), to.as_str())),
            _ => None,
        };
        let filter = EdgeFilter {
            at: Some(at),
            label,
            after,
        };
        let page = view
            .out_edges_page(id, filter, limit, Freshness::Any)
            .unwrap();
        if let (Some(cursor), Some((ItemKey::Edge { label, to, .. }, _))) =
            (after, page.entries.first())
        {
            assert!(
                (label.as_str(), to.as_str()) > cursor,
                "a page starts past its cursor"
            );
        }
        assert!(page.entries.len() <= limit);
        assert!(
            !page.more || page.entries.len() == limit,
            "a short page says more"
        );
        out.extend(page.entries);
        if !page.more {
            return out;
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
                walk_history(view, &key, limit),
                want,
                "history of {key} by {limit}"
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
                    let got = walk_edges(view, id, at, None, limit);
                    assert_eq!(got, want, "out-edges of {key} as of {at} by {limit}");
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
                    let got = walk_edges(view, id, at, Some(label), 2);
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
