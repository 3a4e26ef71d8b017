//! A demoted rider that catches up rejoins the shared scan at a chunk that starts exactly
//! where it stands, and its output stays exact across demotion and rejoin (nothing lost or
//! repeated). Deterministic: the rider that keeps reading leads, so the paused one is
//! demoted; then the leader pauses at the bound (a lone shared rider is never demoted, so
//! the ring stands still) and the demoted rider catches up to it alone.

mod common;

use common::*;
use spindle_core::Partition;
use spindle_view::{IterRequest, RiderMode};

#[test]
fn a_demoted_rider_that_catches_up_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture {
        records,
        view,
        carousel,
    } = carousel_fixture(dir.path(), 21, 1500, 600, (1024, 16, 8));
    let req = IterRequest::range(Partition::ALL);
    let mut riders = carousel.board_all(&[req.clone(), req.clone()]).unwrap();
    let (mut lead, mut late) = (riders.remove(0), riders.remove(0));
    let mut lead_chunks = Vec::new();
    // The scanner cannot publish more than 8 chunks past the late rider without demoting
    // it, so after 10 chunks read by the leader the late rider is demoted.
    for _ in 0..10 {
        lead_chunks.push(lead.next_chunk().unwrap().unwrap());
    }
    let status = carousel.status();
    let late_status = status.riders.iter().find(|r| r.id == late.id()).unwrap();
    assert_eq!(late_status.mode, RiderMode::Demoted, "{status:?}");

    let late_chunks = ride_all(&mut late);
    let stats = late.stats();
    assert!(stats.demotions >= 1, "{stats:?}");
    assert!(
        stats.rejoins >= 1,
        "the late rider never rejoined: {stats:?}"
    );
    assert!(
        stats.chunks_alone > 0 && stats.chunks_shared > 0,
        "{stats:?}"
    );
    lead_chunks.extend(ride_all(&mut lead));

    let cut = view.applied_index();
    let expected = expected_frames(
        &versions_upto(&records, cut, Partition::ALL),
        &req,
        Partition::ALL,
        cut,
    );
    for chunks in [&late_chunks, &lead_chunks] {
        let (frames, end) = decode_chunks(chunks);
        assert_eq!(end.cut, cut);
        assert_log_order_within_keys(&frames, cut);
        assert_eq!(sorted(frames), expected);
    }
}
