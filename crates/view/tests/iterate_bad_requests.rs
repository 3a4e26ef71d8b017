//! Bad iteration requests are refused with an error that says what is wrong before any
//! frame is produced, and the view serves the next good request as if nothing happened.

mod common;

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::{follow, DiskView, IterError, IterRequest, Kinds};

#[test]
fn bad_requests_are_refused_before_data_flows() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    for n in 0..10u8 {
        log.append_blocking(&transaction(&vec![(n, Some(n))]))
            .unwrap();
    }
    let view = DiskView::open(dir.path().join("view"), Partition::nth(0, 2)).unwrap();
    runtime().block_on(follow::catch_up(&view, &log)).unwrap();
    let good = IterRequest::range(Partition::ALL);

    let mut cut_above = good.clone();
    cut_above.to = Some(Index::new(11));
    let mut empty = good.clone();
    empty.range_hi = empty.range_lo;
    let mut backwards = good.clone();
    backwards.from = Index::new(5);
    backwards.to = Some(Index::new(4));
    let mut bad_pointer = good.clone();
    bad_pointer.projection = Some("name".into());
    let mut no_kinds = good.clone();
    no_kinds.kinds = Kinds {
        nodes: false,
        edges: false,
    };
    let elsewhere = IterRequest::range(Partition::nth(1, 2));

    for (req, says) in [
        (cut_above, "above this view's applied index 10"),
        (empty, "is empty"),
        (backwards, "from 5 is above to 4"),
        (bad_pointer, "JSON Pointer"),
        (no_kinds, "no kinds"),
        (elsewhere, "does not overlap"),
    ] {
        let err = view.iterate(&req).unwrap_err();
        assert!(!matches!(err, IterError::View(_)), "{err}");
        assert!(
            err.to_string().contains(says),
            "{err:?} should say {says:?}"
        );
    }
    let (frames, cut) = iterate_all(&view, &good);
    assert_eq!(cut, Index::new(10));
    assert_eq!(
        frames_to_versions(&frames),
        replay(&log, cut, Partition::nth(0, 2))
    );
}
