//! Frames are encoded once and shared: riders with equal filters that board together get
//! every chunk as the same allocation (zero-copy), a rider with other filters gets its own
//! encoding, and the scanner encodes one chunk per filter group per ring slot.

mod common;

use common::*;
use spindle_core::Partition;
use spindle_view::IterRequest;

#[test]
fn riders_with_equal_filters_share_every_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture { carousel, .. } = carousel_fixture(dir.path(), 3, 800, 400, (2048, 16, 8));
    let all = IterRequest::range(Partition::ALL);
    // Other filters, but a frame for every item: it reads at the same pace.
    let mut keys = all.clone();
    keys.keys_only = true;
    let mut riders = carousel
        .board_all(&[all.clone(), all.clone(), keys])
        .unwrap();
    let mut outputs = [Vec::new(), Vec::new(), Vec::new()];
    let mut open = [true; 3];
    // Read in lockstep, so nobody falls behind.
    while open.iter().any(|o| *o) {
        if outputs[0].len() == 3 {
            let status = carousel.status();
            assert_eq!(status.groups, 2, "{status:?}");
        }
        for (i, rider) in riders.iter_mut().enumerate() {
            if open[i] {
                match rider.next_chunk() {
                    Some(chunk) => outputs[i].push(chunk.unwrap()),
                    None => open[i] = false,
                }
            }
        }
    }
    let (a, b, n) = (&outputs[0], &outputs[1], &outputs[2]);
    assert!(a.len() > 10, "the test needs a revolution of many chunks");
    assert_eq!(a.len(), b.len());
    // Every data chunk is the same allocation; only the end frames are each rider's own.
    for (x, y) in a.iter().zip(b).take(a.len() - 1) {
        assert_eq!(x.as_ptr(), y.as_ptr(), "equal filters got separate copies");
        assert_eq!(x.len(), y.len());
    }
    for x in n {
        assert!(
            !a.iter().any(|y| y.as_ptr() == x.as_ptr()),
            "another filter got the same bytes"
        );
    }
    for rider in &riders {
        let stats = rider.stats();
        assert_eq!(stats.demotions, 0, "{stats:?}");
        assert_eq!(stats.chunks_shared + 1, stats.chunks, "{stats:?}");
    }
    assert_eq!(decode_chunks(a), decode_chunks(b));
    // One encoding per group per slot: two groups, never three.
    let status = carousel.status();
    assert!(
        status.chunks_encoded <= 2 * status.ring_cursor,
        "{status:?}"
    );
}

/// The ring lets go of a chunk once every rider aboard has read past it: the chunk a rider
/// holds becomes its only reference as soon as both riders moved on, not a ring's length
/// later, so its memory is freed and reused while still cached. Until the slower rider has
/// read it, the ring keeps it. (The ring is larger than the revolution's chunks, so only a
/// release frees one before the end; the lag bound is small, so the scanner must publish,
/// and release, while the riders read on, however the threads are scheduled: with a bound
/// larger than the revolution, a scanner that had run ahead and was not scheduled again
/// before the riders finished released nothing.)
#[test]
fn chunks_every_rider_passed_are_released_by_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture { carousel, .. } =
        carousel_fixture(dir.path(), 5, 800, 400, (2048, 256, 8));
    let all = IterRequest::range(Partition::ALL);
    let mut riders = carousel.board_all(&[all.clone(), all]).unwrap();
    let mut next = |i: usize| riders[i].next_chunk().unwrap().unwrap();
    drop((next(0), next(1)));
    let held = next(0);
    // The scanner publishes on while the leader reads; the other rider has not read `held`.
    drop((next(0), next(0)));
    assert!(!held.is_unique(), "released a chunk a rider has not read");
    let theirs = next(1);
    assert_eq!(theirs.as_ptr(), held.as_ptr(), "one shared chunk");
    drop((theirs, next(1)));
    // Both passed it: the next publish releases it (reading on makes the scanner publish).
    while !held.is_unique() {
        let read_on = riders.iter_mut().filter_map(|r| r.next_chunk()).count();
        assert!(
            read_on > 0,
            "the revolution ended and the ring still held a chunk both riders read past"
        );
    }
}

/// When the last rider leaves, the stopped scanner empties the ring: the chunks it held
/// (read by one rider and not the other, or published ahead of both) are freed then, not
/// kept until someone boards again. A rider boarding later reads a whole revolution.
#[test]
fn a_carousel_nobody_rides_holds_no_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture {
        carousel,
        records,
        view,
    } = carousel_fixture(dir.path(), 5, 800, 400, (2048, 256, 8));
    let all = IterRequest::range(Partition::ALL);
    let mut riders = carousel.board_all(&[all.clone(), all.clone()]).unwrap();
    let held = riders[0].next_chunk().unwrap().unwrap();
    assert!(
        !held.is_unique(),
        "the ring let go of a chunk a rider has not read"
    );
    drop(riders);
    assert!(!carousel.status().running, "the scanner stopped");
    assert!(
        held.is_unique(),
        "the ring of a carousel nobody rides still holds a chunk"
    );
    let mut rider = carousel.board(&all).unwrap();
    let (frames, end) = decode_chunks(&ride_all(&mut rider));
    let cut = view.applied_index();
    assert_eq!(end.cut, cut);
    let want = expected_frames(
        &versions_upto(&records, cut, Partition::ALL),
        &all,
        Partition::ALL,
        cut,
    );
    assert_eq!(sorted(frames), sorted(want));
}
