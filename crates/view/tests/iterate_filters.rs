//! Iteration filters: for random workloads and random requests (any hash range, kinds,
//! keys-only, index range with a cut, projection, latest-only) the frames are exactly the
//! matching versions of the log up to the cut, in log order within keys (invariant 6).

mod common;

use common::*;
use proptest::prelude::*;
use spindle_core::partition::HASH_SPACE as HASH_RANGE_END;
use spindle_core::{Index, Partition};
use spindle_view::{DiskView, IterRequest, Kinds};

#[derive(Clone, Debug)]
struct Filters {
    lo: u64,
    len: u64,
    kinds: Kinds,
    keys_only: bool,
    from: u64,
    to: Option<u64>,
    projection: Option<&'static str>,
    latest_only: bool,
}

fn filters() -> impl Strategy<Value = Filters> {
    (
        (0u64..HASH_RANGE_END, 1u64..=HASH_RANGE_END),
        prop_oneof![Just(Kinds::ALL), Just(Kinds::NODES), Just(Kinds::EDGES)],
        any::<bool>(),
        (0u64..40, proptest::option::of(0u64..80)),
        prop_oneof![
            Just(None),
            Just(Some("/name")),
            Just(Some("/w/1")),
            Just(Some("/n"))
        ],
        any::<bool>(),
    )
        .prop_map(
            |((lo, len), kinds, keys_only, (from, to), projection, latest_only)| Filters {
                lo,
                len,
                kinds,
                keys_only: keys_only && projection.is_none(),
                from,
                to,
                projection,
                latest_only,
            },
        )
}

fn run(partition: Partition, txns: Vec<TxnSpec>, requests: Vec<Filters>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    for spec in &txns {
        log.append_blocking(&transaction(spec)).unwrap();
    }
    let view = DiskView::open(dir.path().join("view"), partition).unwrap();
    runtime()
        .block_on(spindle_view::follow::catch_up(&view, &log))
        .unwrap();
    let applied = view.applied_index();
    let all = replay(&log, applied, partition);
    for f in requests {
        let hi = (f.lo + f.len).min(HASH_RANGE_END);
        let req = IterRequest {
            range_lo: f.lo,
            range_hi: hi,
            kinds: f.kinds,
            keys_only: f.keys_only,
            from: Index::new(f.from),
            to: f.to.map(Index::new),
            projection: f.projection.map(str::to_owned),
            latest_only: f.latest_only,
        };
        let check = req.check(partition, applied);
        let Ok(checked) = check else {
            // Refused requests are refused by `iterate` too, before any frame.
            assert!(view.iterate(&req).is_err());
            continue;
        };
        let (frames, cut) = iterate_all(&view, &req);
        assert_eq!(cut, checked.cut);
        assert_log_order_within_keys(&frames, cut);
        assert_eq!(
            sorted(frames),
            expected_frames(&all, &req, checked.range, cut),
            "{req:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(192)))]

    #[test]
    fn frames_are_the_matching_versions_up_to_the_cut(
        n in prop_oneof![Just(1u64), Just(2), Just(4)],
        i in 0u64..4,
        txns in proptest::collection::vec(txn_strategy(), 1..30),
        requests in proptest::collection::vec(filters(), 1..12),
    ) {
        run(Partition::nth(i % n, n), txns, requests);
    }
}
