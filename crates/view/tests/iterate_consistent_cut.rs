//! An iteration's cut is fixed when it starts: versions the view applies while the scan
//! runs never appear, so the frames are exactly the log up to the cut (invariant 6), and a
//! consumer that continues from cut + 1 misses and repeats nothing.

mod common;

use common::*;
use spindle_core::Partition;
use spindle_view::frame::{Frame, FrameReader};
use spindle_view::{follow, DiskView, IterRequest};

#[test]
fn writes_during_a_scan_stay_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let log = open_log(&dir.path().join("log"));
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    for n in 0..200u8 {
        log.append_blocking(&transaction(&vec![(n, Some(n)), (n / 2, Some(n / 3))]))
            .unwrap();
    }
    rt.block_on(follow::catch_up(&view, &log)).unwrap();
    let cut = view.applied_index();

    let mut it = view.iterate(&IterRequest::range(Partition::ALL)).unwrap();
    assert_eq!(it.cut(), cut);
    let mut buf = Vec::new();
    let mut more_writes = 0u8..100;
    // Interleave: a little scanning, then more versions of every item land in the view.
    while !it.fill(&mut buf, 256).unwrap() {
        if let Some(n) = more_writes.next() {
            log.append_blocking(&transaction(&vec![(n, Some(n)), (n.wrapping_add(7), None)]))
                .unwrap();
            rt.block_on(follow::catch_up(&view, &log)).unwrap();
        }
    }
    assert!(
        view.applied_index() > cut,
        "the test must apply writes during the scan"
    );
    let mut frames = Vec::new();
    for f in FrameReader::new(&buf) {
        match f.unwrap() {
            Frame::Version(v) => frames.push(v),
            Frame::End(end) => assert_eq!(end.cut, cut),
        }
    }
    assert_log_order_within_keys(&frames, cut);
    assert_eq!(
        frames_to_versions(&frames),
        replay(&log, cut, Partition::ALL)
    );

    // The consumer continues from cut + 1: together they are the whole log.
    let rest = log.read(cut.next(), 1).unwrap();
    assert_eq!(rest.first().map(|r| r.index), Some(cut.next()));
}
