//! A demoted rider reads on with one RocksDB iterator for as long as it stays demoted, not
//! one per chunk (a fresh iterator per chunk re-reads its whole readahead each time, which
//! with direct reads multiplies the disk reads of a demoted ride): over a long ride alone
//! of many chunks, across the end of the lap, it opens at most one iterator per demotion,
//! and its output is still exactly the view up to its cut, each item once.

mod common;

use common::*;
use spindle_core::Partition;
use spindle_view::{IterRequest, RiderMode};

#[test]
fn a_demoted_rider_reads_its_ride_with_one_iterator() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture {
        records,
        view,
        carousel,
    } = carousel_fixture(dir.path(), 5, 1500, 600, (1024, 8, 4));
    let req = IterRequest::range(Partition::ALL);

    // Move the circle into the middle of a lap, so the ride below crosses the lap's end.
    let mut warm = carousel.board(&req).unwrap();
    for _ in 0..10 {
        warm.next_chunk().unwrap().unwrap();
    }
    drop(warm);

    // The slow rider reads nothing while the fast one rides its whole revolution, so it
    // is demoted at once and then reads (almost) all of its revolution alone.
    let mut riders = carousel.board_all(&[req.clone(), req.clone()]).unwrap();
    let (mut fast, mut slow) = (riders.remove(0), riders.remove(0));
    let fast_chunks = ride_all(&mut fast);
    let status = carousel.status();
    let slow_status = status.riders.iter().find(|r| r.id == slow.id()).unwrap();
    assert_eq!(slow_status.mode, RiderMode::Demoted, "{status:?}");
    drop(fast);

    let slow_chunks = ride_all(&mut slow);
    let stats = slow.stats();
    assert!(
        stats.demotions >= 1 && stats.chunks_alone >= 40,
        "the test needs a long ride alone: {stats:?}"
    );
    assert!(
        stats.iterators_opened >= 1 && stats.iterators_opened <= stats.demotions,
        "a demoted rider opened more than one iterator per demotion: {stats:?}"
    );

    let cut = view.applied_index();
    let expected = expected_frames(
        &versions_upto(&records, cut, Partition::ALL),
        &req,
        Partition::ALL,
        cut,
    );
    for chunks in [&slow_chunks, &fast_chunks] {
        let (frames, end) = decode_chunks(chunks);
        assert_eq!(end.cut, cut);
        assert_log_order_within_keys(&frames, cut);
        assert!(
            frames.windows(2).any(|w| w[1].key.hash() < w[0].key.hash()),
            "the ride did not cross the end of the lap"
        );
        assert_eq!(
            sorted(frames),
            expected,
            "lost or repeated items reading alone"
        );
    }
}
