//! Items too large to share (`CarouselConfig::item_shared_bytes_max`): riders read them
//! themselves, so no chunk grows with one item's history, and every rider still gets
//! exactly its versions. The large item here is large only for a projection that makes its
//! frames about 3.8 times its stored bytes (serde_json writes `1e15` as
//! `1000000000000000.0`): the bound counts the frames an item adds, not only what it reads.

mod common;

use std::sync::Arc;

use common::*;
use spindle_core::{Index, ItemKey, Partition, Record, Value};
use spindle_view::{Carousel, CarouselConfig, IterRequest};

const CHUNK_BYTES: usize = 64 << 10;

#[test]
fn an_item_whose_frames_pass_the_bound_is_read_by_each_rider() {
    let dir = tempfile::tempdir().unwrap();
    let mut records: Vec<Vec<Record>> = Vec::new();
    let mut next = 1u64;
    let mut push = |key: ItemKey, value: Value, records: &mut Vec<Vec<Record>>| {
        records.push(vec![Record {
            index: Index::new(next),
            commit: true,
            key,
            value,
        }]);
        next += 1;
    };
    let big = ItemKey::node("big").unwrap();
    // About 1,040,000 stored bytes per version, 4 versions: 4.2 MB stored, under the
    // 4 MiB bound (4,194,304 bytes) only just, and about 15.8 MB of frames projected.
    let array = vec!["1e15"; 208_000].join(",");
    for v in 0..4 {
        if v == 2 {
            for i in 0..300 {
                let value = Value::json(format!("{{\"a\":[{i}],\"pad\":\"{}\"}}", "x".repeat(200)));
                push(
                    ItemKey::node(format!("n{i}")).unwrap(),
                    value.unwrap(),
                    &mut records,
                );
            }
        }
        let value = Value::json(format!("{{\"a\":[{array}],\"v\":{v}}}")).unwrap();
        push(big.clone(), value, &mut records);
    }
    let view = Arc::new(view_with(dir.path(), Partition::ALL, &records));
    let config = CarouselConfig {
        chunk_bytes: CHUNK_BYTES,
        ..CarouselConfig::default()
    };
    let bound = config.item_shared_bytes_max;
    let carousel = Carousel::new(view.clone(), config);
    let all = IterRequest::range(Partition::ALL);
    let projected = IterRequest {
        projection: Some("/a".to_owned()),
        ..all.clone()
    };
    let latest = IterRequest {
        latest_only: true,
        ..projected.clone()
    };
    let requests = [all, projected, latest];
    let mut riders = carousel.board_all(&requests).unwrap();
    let mut dedicated = carousel.dedicated(&requests[1]).unwrap();
    let cut = view.applied_index();
    let everything = versions_upto(&records, cut, Partition::ALL);
    let check = |req: &IterRequest, chunks: &[bytes::Bytes]| {
        // A chunk holds at most `chunk_bytes`, then an item's frames up to the bound and
        // the one frame that crossed it (here a projected version of about 3.95 MB).
        let largest = chunks.iter().map(|c| c.len()).max().unwrap();
        assert!(
            largest <= CHUNK_BYTES + bound + (4 << 20),
            "{req:?}: a chunk of {largest} bytes"
        );
        let (frames, end) = decode_chunks(chunks);
        assert_eq!(end.cut, cut);
        if req.projection.is_some() {
            let projected = frames
                .iter()
                .filter(|f| f.key == big)
                .map(|f| f.value.as_ref().unwrap().len());
            assert!(
                projected.clone().count() > 0 && projected.clone().all(|len| len > 3_900_000),
                "the projection must make each version's frame about 3.95 MB"
            );
        }
        assert_eq!(
            sorted(frames),
            expected_frames(&everything, req, Partition::ALL, cut),
            "{req:?}"
        );
    };
    for (req, rider) in requests.iter().zip(riders.iter_mut()) {
        check(req, &ride_all(rider));
    }
    check(&requests[1], &ride_all(&mut dedicated));
    let status = carousel.status();
    assert!(status.large_items >= 1, "{status:?}");
    assert!(
        riders.iter().any(|r| r.stats().large_items == 1),
        "a projecting rider read the item itself"
    );
}
