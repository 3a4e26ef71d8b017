//! Prefix truncation deletes whole segments only, never an index at or above the requested
//! bound, and reads below the first retained index return `Truncated { first }`.

mod common;

use common::*;
use spindle_log::{Index, ReadError};

#[test]
fn truncation_deletes_whole_segments_and_reads_below_fail_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    for i in 0..300u64 {
        log.append_blocking(&put(&format!("n{i}"), i)).unwrap();
    }
    let segments_before = spindle_log::segment::list_segments(dir.path())
        .unwrap()
        .len();
    let below = Index::new(150);
    let first = futures::executor::block_on(log.truncate_prefix(below)).unwrap();
    assert!(
        first <= below,
        "never deletes an index at or above the bound"
    );
    assert!(first > Index::FIRST);
    assert_eq!(log.first_index(), first);
    assert!(
        spindle_log::segment::list_segments(dir.path())
            .unwrap()
            .len()
            < segments_before
    );
    match log.read(Index::FIRST, 10) {
        Err(ReadError::Truncated { first: f }) => assert_eq!(f, first),
        other => panic!("expected Truncated, got {other:?}"),
    }
    let rest = log.read(first, usize::MAX).unwrap();
    assert_eq!(rest.first().unwrap().index, first);
    assert_eq!(rest.last().unwrap().index, Index::new(300));
    drop(log);
    let log = open(dir.path(), small_segments());
    assert_eq!(log.first_index(), first);
    assert_eq!(log.durable_index(), Index::new(300));
    assert!(matches!(
        log.read(first.prev(), 1),
        Err(ReadError::Truncated { .. })
    ));
    assert_eq!(
        log.append_blocking(&put("after", 0)).unwrap(),
        Index::new(301)
    );
}

#[test]
fn truncating_everything_keeps_the_tail_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), small_segments());
    for i in 0..100u64 {
        log.append_blocking(&put("x", i)).unwrap();
    }
    let first = futures::executor::block_on(log.truncate_prefix(Index::MAX)).unwrap();
    assert!(first <= Index::new(100));
    assert_eq!(
        log.read(Index::new(100), 1).unwrap()[0].index,
        Index::new(100)
    );
}
