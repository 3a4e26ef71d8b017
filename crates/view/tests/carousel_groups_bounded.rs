//! A carousel encodes for at most `groups_max` distinct filter groups: a rider that would
//! add one more is refused (and nothing boards), riders that share a group aboard's filter
//! and dedicated riders still board, and a group's seat comes back when its riders leave.

mod common;

use std::sync::Arc;

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::{Carousel, CarouselConfig, IterError, IterRequest};

#[test]
fn a_rider_beyond_the_group_bound_is_refused() {
    let records = random_records(&mut Rng::new(21), 200, 80);
    let dir = tempfile::tempdir().unwrap();
    let view = Arc::new(view_with(dir.path(), Partition::ALL, &records));
    let config = CarouselConfig {
        groups_max: 2,
        ..CarouselConfig::default()
    };
    let carousel = Carousel::new(view, config);
    let all = IterRequest::range(Partition::ALL);
    let from = |i: u64| IterRequest {
        from: Index::new(i),
        ..all.clone()
    };
    let a = carousel.board(&all).unwrap();
    let b = carousel.board(&from(5)).unwrap();
    let refused = carousel.board(&from(6)).unwrap_err();
    assert!(
        matches!(refused, IterError::CarouselGroupsFull { groups: 2 }),
        "{refused}"
    );
    // All or nothing: a batch with one new group boards none.
    let refused = carousel.board_all(&[all.clone(), from(7)]).unwrap_err();
    assert!(matches!(refused, IterError::CarouselGroupsFull { .. }));
    assert_eq!(carousel.status().riders.len(), 2);
    // The same filters share their groups; a dedicated rider uses none.
    let same = carousel.board_all(&[all.clone(), from(5)]).unwrap();
    let dedicated = carousel.dedicated(&from(9)).unwrap();
    assert_eq!(carousel.status().riders.len(), 5);
    // When a group's riders leave, another filter may board.
    drop(b);
    drop(same);
    let mut c = carousel.board(&from(6)).unwrap();
    drop((a, dedicated));
    let (_, end) = decode_chunks(&ride_all(&mut c));
    assert!(end.cut > Index::ZERO);
}
