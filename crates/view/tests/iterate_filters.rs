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

/// Every version frame after the first of its item in a batch leaves the key out (a
/// same-item frame), and the first frame of every batch carries its key: in one large
/// batch the keys sent are exactly the items; in small batches each batch starts with one.
#[test]
fn an_item_key_is_sent_once_per_item_and_batch() {
    use spindle_view::frame::{FrameReader, FrameRef, FLAG_SAME_ITEM, TAG_VERSION};
    let dir = tempfile::tempdir().unwrap();
    let records = random_records(&mut common::Rng::new(11), 400, 30);
    let view = view_with(dir.path(), Partition::ALL, &records);
    let versions: usize = records.iter().map(Vec::len).sum();
    let items = versions_upto(&records, view.applied_index(), Partition::ALL).len();
    assert!(
        versions > 2 * items,
        "the test needs items with several versions"
    );
    // (frames, frames carrying a key) of every batch of an iteration in `bytes_max` batches.
    let batches = |bytes_max: usize| {
        let mut it = view.iterate(&IterRequest::range(Partition::ALL)).unwrap();
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            let done = it.fill(&mut buf, bytes_max).unwrap();
            let (mut frames, mut keyed) = (0, 0);
            let mut reader = FrameReader::new(&buf);
            let mut at = 0;
            while let Some(frame) = reader.next_ref() {
                if let FrameRef::Version { .. } = frame.unwrap() {
                    assert_eq!(buf[at], TAG_VERSION);
                    frames += 1;
                    if buf[at + 1] & FLAG_SAME_ITEM == 0 {
                        keyed += 1;
                    }
                }
                at = reader.offset();
            }
            out.push((frames, keyed));
            if done {
                return out;
            }
        }
    };
    let one = batches(64 << 20);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0], (versions, items));
    let small = batches(256);
    assert!(small.len() > 10, "{}", small.len());
    let frames: usize = small.iter().map(|b| b.0).sum();
    let keyed: usize = small.iter().map(|b| b.1).sum();
    assert_eq!(frames, versions);
    // At most one more key per batch than items: a batch that starts inside an item.
    assert!(
        keyed >= items && keyed <= items + small.len(),
        "{keyed} keys"
    );
}
