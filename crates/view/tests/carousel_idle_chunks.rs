//! A rider whose range the scan has not reached yet (a narrow slice at the end of a large
//! view, as when a new partitioning boots from an old one) gets no frame for a long time:
//! it returns an empty chunk once `idle_chunk_ms` passed without one, so that a remote
//! consumer, which gives a source up after a while without a message, hears from it. The
//! frames it delivers are unchanged.

mod common;

use std::sync::Arc;

use common::*;
use spindle_core::Partition;
use spindle_view::{Carousel, CarouselConfig, IterRequest};

fn ride(carousel: &Carousel, req: &IterRequest) -> (Vec<bytes::Bytes>, spindle_view::RiderStats) {
    let mut rider = carousel.board(req).unwrap();
    let mut chunks = Vec::new();
    while let Some(chunk) = rider.next_chunk() {
        chunks.push(chunk.unwrap());
    }
    (chunks, rider.stats())
}

#[test]
fn a_rider_far_from_its_range_says_it_is_alive_and_loses_no_frame() {
    let dir = tempfile::tempdir().unwrap();
    let records = random_records(&mut Rng::new(11), 1500, 600);
    let view = Arc::new(view_with(dir.path(), Partition::ALL, &records));
    // The last sixty-fourth of the hash space: most of the scan is outside it.
    let req = IterRequest::range(Partition::nth(63, 64));
    let (want, _) = iterate_all(&view, &req);
    assert!(!want.is_empty(), "the test needs frames in the range");
    for idle_chunk_ms in [0, IDLE_NEVER_MS] {
        let carousel = small_chunks(&view, idle_chunk_ms);
        let (chunks, stats) = ride(&carousel, &req);
        // Every chunk it passed over before its first frame said so.
        assert!(idle_chunk_ms > 0 || chunks[0].is_empty(), "{stats:?}");
        check_idle_chunks(&chunks, &stats, idle_chunk_ms, &want);
    }
}

/// A carousel over `view` with 256-byte chunks and `idle_chunk_ms`.
fn small_chunks(view: &Arc<spindle_view::DiskView>, idle_chunk_ms: u64) -> Carousel {
    let config = CarouselConfig {
        chunk_bytes: 256,
        idle_chunk_ms,
        ..CarouselConfig::default()
    };
    Carousel::new(view.clone(), config)
}

/// Empty chunks are counted as idle ones, come (many) only when `idle_chunk_ms` is 0, and
/// change no frame.
fn check_idle_chunks(
    chunks: &[bytes::Bytes],
    stats: &spindle_view::RiderStats,
    idle_chunk_ms: u64,
    want: &[spindle_view::frame::VersionFrame],
) {
    let empty = chunks.iter().filter(|c| c.is_empty()).count() as u64;
    assert_eq!(empty, stats.idle_chunks, "{stats:?}");
    if idle_chunk_ms == 0 {
        assert!(empty > 10, "{stats:?}");
    } else {
        assert_eq!(empty, 0, "{stats:?}");
    }
    let (frames, end) = decode_chunks(chunks);
    assert_eq!(frames, want, "idle_chunk_ms {idle_chunk_ms}");
    assert_eq!(end.frames, want.len() as u64);
}

/// A dedicated rider whose filter keeps few of the versions it reads (here only the last
/// index's) says it is alive the same way: its worker sends what it has, perhaps nothing,
/// once `idle_chunk_ms` passed while it read, and the frames are unchanged.
#[test]
fn a_dedicated_rider_with_a_sparse_filter_says_it_is_alive() {
    let dir = tempfile::tempdir().unwrap();
    let records = random_records(&mut Rng::new(12), 1500, 600);
    let view = Arc::new(view_with(dir.path(), Partition::ALL, &records));
    let mut req = IterRequest::range(Partition::ALL);
    req.from = view.applied_index();
    let (want, _) = iterate_all(&view, &req);
    assert!(!want.is_empty(), "the test needs a frame at the last index");
    for idle_chunk_ms in [0, IDLE_NEVER_MS] {
        let carousel = small_chunks(&view, idle_chunk_ms);
        let mut rider = carousel.dedicated(&req).unwrap();
        let chunks = ride_all(&mut rider);
        check_idle_chunks(&chunks, &rider.stats(), idle_chunk_ms, &want);
    }
}
