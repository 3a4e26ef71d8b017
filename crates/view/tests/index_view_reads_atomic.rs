//! An Index View lookup answers at the one applied index it reports, and never shows part
//! of a transaction: while transactions swap a value between two nodes, every lookup of
//! the value finds exactly the node that holds it at the reported index (DESIGN.md §12).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_view::IndexView;

fn write(index: u64, commit: bool, id: &str, tag: &str) -> Record {
    Record {
        index: Index::new(index),
        commit,
        key: ItemKey::node(id).unwrap(),
        value: Value::json(format!("{{\"tag\":\"{tag}\"}}")).unwrap(),
    }
}

/// Transaction `t` (from 0) sets `a` and `b`; it ends at index 2t + 2, and gives "x" to
/// `a` when `t` is even, to `b` when odd.
fn swap(t: u64) -> [Record; 2] {
    let (a, b) = if t.is_multiple_of(2) {
        ("x", "y")
    } else {
        ("y", "x")
    };
    [
        write(2 * t + 1, false, "a", a),
        write(2 * t + 2, true, "b", b),
    ]
}

#[test]
fn a_lookup_never_sees_half_a_swap() {
    const TXNS: u64 = 3000;
    let ix = IndexView::new(Partition::ALL, "/tag").unwrap();
    ix.apply(&swap(0)).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut lookups = 0u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                let (applied, ids, more) = ix.lookup_page(&json!("x"), None, 10);
                assert!(!more);
                assert_eq!(applied.get() % 2, 0, "applied {applied}: mid-transaction");
                let t = applied.get() / 2 - 1;
                let holder = if t.is_multiple_of(2) { "a" } else { "b" };
                assert_eq!(ids, [holder], "at {applied}");
                lookups += 1;
                if finished {
                    return lookups;
                }
            }
        });
        for t in 1..TXNS {
            ix.apply(&swap(t)).unwrap();
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(ix.applied_index(), Index::new(2 * TXNS));
}
