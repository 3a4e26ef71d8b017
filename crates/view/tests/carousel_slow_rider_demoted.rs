//! A rider that stops reading is moved onto its own iterator instead of holding the scan
//! back: riders that keep pace finish their revolution while it is still paused, without
//! being demoted themselves; status shows the demotion; and when the slow rider resumes,
//! its output is still exactly the view up to its cut, each item once.

mod common;

use std::sync::mpsc;

use common::*;
use spindle_core::Partition;
use spindle_view::{IterRequest, RiderMode};

#[test]
fn a_paused_rider_is_demoted_and_the_others_finish() {
    let dir = tempfile::tempdir().unwrap();
    let CarouselFixture {
        records,
        view,
        carousel,
    } = carousel_fixture(dir.path(), 7, 1500, 600, (1024, 8, 4));
    let req = IterRequest::range(Partition::ALL);
    let expected = expected_frames(
        &versions_upto(&records, view.applied_index(), Partition::ALL),
        &req,
        Partition::ALL,
        view.applied_index(),
    );

    let mut slow = carousel.board(&req).unwrap();
    let slow_id = slow.id();
    let (paused_tx, paused_rx) = mpsc::channel::<()>();
    let (resume_tx, resume_rx) = mpsc::channel::<()>();
    let slow_thread = std::thread::spawn(move || {
        let mut chunks = vec![slow.next_chunk().unwrap().unwrap()];
        paused_tx.send(()).unwrap();
        resume_rx.recv().unwrap();
        chunks.extend(ride_all(&mut slow));
        (chunks, slow.stats())
    });
    paused_rx.recv().unwrap();

    // Two riders that board together and read at the same pace.
    let mut fast = carousel.board_all(&[req.clone(), req.clone()]).unwrap();
    let mut outputs = vec![Vec::new(), Vec::new()];
    let mut open = [true, true];
    while open.iter().any(|o| *o) {
        for (i, rider) in fast.iter_mut().enumerate() {
            if open[i] {
                match rider.next_chunk() {
                    Some(chunk) => outputs[i].push(chunk.unwrap()),
                    None => open[i] = false,
                }
            }
        }
    }
    // The slow rider is still paused: it has read one chunk and is now demoted.
    let status = carousel.status();
    let slow_status = status.riders.iter().find(|r| r.id == slow_id).unwrap();
    assert_eq!(slow_status.mode, RiderMode::Demoted, "{status:?}");
    assert!(slow_status.demotions >= 1);
    for (rider, chunks) in fast.iter().zip(&outputs) {
        assert_eq!(
            rider.stats().demotions,
            0,
            "a rider that kept pace was demoted"
        );
        let (frames, end) = decode_chunks(chunks);
        assert_eq!(end.cut, view.applied_index());
        assert_eq!(sorted(frames), expected);
    }
    drop(fast);

    resume_tx.send(()).unwrap();
    let (chunks, stats) = slow_thread.join().unwrap();
    assert!(stats.demotions >= 1 && stats.chunks_alone > 0, "{stats:?}");
    let (frames, end) = decode_chunks(&chunks);
    assert_eq!(end.cut, view.applied_index());
    assert_log_order_within_keys(&frames, end.cut);
    assert_eq!(
        sorted(frames),
        expected,
        "lost or repeated items across the demotion"
    );
    let status = carousel.status();
    assert!(status.riders.is_empty() && !status.running, "{status:?}");
}
