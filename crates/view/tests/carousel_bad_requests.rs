//! Bad requests are refused by the carousel before any data flows, with the same errors as
//! a dedicated iteration; nothing boards and no scanner starts. Bad configurations are
//! refused with what to change.

mod common;

use std::sync::Arc;

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::{Carousel, CarouselConfig, IterError, IterRequest, Kinds};

#[test]
fn bad_requests_board_nothing() {
    let records = random_records(&mut Rng::new(5), 10, 20);
    let dir = tempfile::tempdir().unwrap();
    let view = Arc::new(view_with(dir.path(), Partition::nth(0, 2), &records));
    let applied = view.applied_index();
    let carousel = Carousel::new(view.clone(), CarouselConfig::default());
    let good = IterRequest::range(Partition::ALL);

    let mut cut_above = good.clone();
    cut_above.to = Some(applied.next());
    let mut empty = good.clone();
    empty.range_hi = empty.range_lo;
    let mut backwards = good.clone();
    backwards.from = Index::new(5);
    backwards.to = Some(Index::new(4));
    let mut bad_pointer = good.clone();
    bad_pointer.projection = Some("name".into());
    let mut projected_keys = good.clone();
    projected_keys.projection = Some("/name".into());
    projected_keys.keys_only = true;
    let mut no_kinds = good.clone();
    no_kinds.kinds = Kinds {
        nodes: false,
        edges: false,
    };
    let elsewhere = IterRequest::range(Partition::nth(1, 2));
    let above = format!("above this view's applied index {applied}");

    for (req, says) in [
        (cut_above, above.as_str()),
        (empty, "is empty"),
        (backwards, "from 5 is above to 4"),
        (bad_pointer, "JSON Pointer"),
        (projected_keys, "exclude each other"),
        (no_kinds, "no kinds"),
        (elsewhere, "does not overlap"),
    ] {
        for err in [
            carousel.board(&req).unwrap_err(),
            carousel.dedicated(&req).unwrap_err(),
            carousel
                .board_all(&[good.clone(), req.clone()])
                .unwrap_err(),
        ] {
            assert!(!matches!(err, IterError::View(_)), "{err}");
            assert!(
                err.to_string().contains(says),
                "{err:?} should say {says:?}"
            );
        }
        let status = carousel.status();
        assert!(status.riders.is_empty(), "{status:?}");
        assert!(!status.running, "a refused request started the scanner");
    }

    // The carousel serves the next good request as if nothing happened.
    let mut rider = carousel.board(&good).unwrap();
    let (frames, end) = decode_chunks(&ride_all(&mut rider));
    assert_eq!(end.cut, applied);
    assert_eq!(end.range, Partition::nth(0, 2));
    assert_eq!(
        frames_to_versions(&frames),
        versions_upto(&records, applied, Partition::nth(0, 2))
    );
}

#[test]
fn bad_configurations_are_refused_with_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let view = Arc::new(spindle_view::DiskView::open(dir.path(), Partition::ALL).unwrap());
    let bad = [
        (
            CarouselConfig {
                ring_slots: 12,
                ..CarouselConfig::default()
            },
            "power of two",
        ),
        (
            CarouselConfig {
                ring_slots: 1,
                ..CarouselConfig::default()
            },
            "power of two",
        ),
        (
            CarouselConfig {
                chunk_bytes: 0,
                ..CarouselConfig::default()
            },
            "chunk_bytes",
        ),
        (
            CarouselConfig {
                ring_slots: 64,
                rider_lag_chunks_max: 64,
                ..CarouselConfig::default()
            },
            "ring_slots - 1 = 63",
        ),
        (
            CarouselConfig {
                rider_lag_chunks_max: 1,
                ..CarouselConfig::default()
            },
            "between 2",
        ),
        (
            CarouselConfig {
                groups_max: 0,
                ..CarouselConfig::default()
            },
            "groups_max",
        ),
    ];
    for (config, says) in bad {
        let err = Carousel::try_new(view.clone(), config).unwrap_err();
        assert!(matches!(err, IterError::CarouselConfig { .. }), "{err}");
        assert!(err.to_string().contains(says), "{err} should say {says:?}");
    }
    assert!(Carousel::try_new(view, CarouselConfig::default()).is_ok());
}
