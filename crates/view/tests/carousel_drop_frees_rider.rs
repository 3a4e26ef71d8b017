//! Dropping a rider mid-stream (a client that disconnects) frees its place at once: it
//! leaves the status list and stops gating the scanner, the others ride on, and when the
//! last rider leaves the scanner stops; a later rider starts it again.

mod common;

use std::sync::Arc;

use common::*;
use spindle_core::Partition;
use spindle_view::{Carousel, CarouselConfig, IterRequest};

#[test]
fn a_dropped_rider_leaves_and_the_last_stops_the_scanner() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture {
        records,
        view,
        carousel,
    } = carousel_fixture(dir.path(), 11, 600, 300, (512, 8, 4));
    assert!(!carousel.status().running, "no rider, no scan");
    let req = IterRequest::range(Partition::ALL);
    let mut riders = carousel.board_all(&[req.clone(), req.clone()]).unwrap();
    assert!(carousel.status().running);
    // In lockstep, so neither holds the other back.
    for _ in 0..2 {
        for rider in &mut riders {
            rider.next_chunk().unwrap().unwrap();
        }
    }
    let mut stay = riders.pop().unwrap();
    let gone = riders.pop().unwrap();
    let gone_id = gone.id();
    drop(gone);
    let status = carousel.status();
    assert_eq!(status.riders.len(), 1, "{status:?}");
    assert!(status.riders.iter().all(|r| r.id != gone_id));
    assert!(status.running);

    // The other rider rides on, alone on the shared scan, and leaves mid-stream too.
    for _ in 0..12 {
        stay.next_chunk().unwrap().unwrap();
    }
    assert_eq!(stay.stats().demotions, 0);
    drop(stay);
    let status = carousel.status();
    assert!(status.riders.is_empty(), "{status:?}");
    assert!(
        !status.running,
        "the scanner stops when the last rider leaves"
    );

    // A rider that boards later starts the scanner again and gets the whole view.
    let mut again = carousel.board(&req).unwrap();
    assert!(carousel.status().running);
    let (frames, end) = decode_chunks(&ride_all(&mut again));
    let cut = view.applied_index();
    assert_eq!(end.cut, cut);
    assert_eq!(
        sorted(frames),
        expected_frames(
            &versions_upto(&records, cut, Partition::ALL),
            &req,
            Partition::ALL,
            cut
        )
    );
    // A finished rider has left already, before it is dropped.
    assert!(!carousel.status().running);
    assert!(carousel.status().riders.is_empty());
    assert!(again.next_chunk().is_none());
}

#[test]
fn a_rider_dropped_before_it_reads_frees_its_place() {
    let records = random_records(&mut Rng::new(12), 300, 100);
    let dir = tempfile::tempdir().unwrap();
    let view = Arc::new(view_with(dir.path(), Partition::ALL, &records));
    let carousel = Carousel::new(view, CarouselConfig::default());
    for _ in 0..20 {
        let rider = carousel.board(&IterRequest::range(Partition::ALL)).unwrap();
        drop(rider);
        let status = carousel.status();
        assert!(status.riders.is_empty() && !status.running, "{status:?}");
    }
}
