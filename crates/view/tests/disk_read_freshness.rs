//! Reads that ask for a minimum applied index wait for it (read-your-writes across
//! threads), and when the timeout passes first they fail with an error naming the index
//! wanted and the index applied, leaving the view unchanged.

mod common;

use std::time::Duration;

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::{follow, DiskView, Freshness, ViewError};

#[test]
fn a_read_waits_for_its_index_and_sees_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    let key = item(0);
    let commit = log
        .append_blocking(&transaction(&vec![(0, Some(7))]))
        .unwrap();
    let fresh = Freshness::AtLeast {
        index: commit,
        timeout: Duration::from_secs(60),
    };
    let got = std::thread::scope(|s| {
        let reader = s.spawn(|| view.latest(&key, fresh).unwrap());
        // The reader may be waiting already or not yet: either way it must see the write.
        runtime().block_on(follow::catch_up(&view, &log)).unwrap();
        reader.join().unwrap()
    });
    assert_eq!(got.unwrap().index, commit);
}

#[test]
fn a_read_that_times_out_says_what_it_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let view = DiskView::open(dir.path(), Partition::ALL).unwrap();
    let fresh = Freshness::AtLeast {
        index: Index::new(5),
        timeout: Duration::ZERO,
    };
    for err in [
        view.latest(&item(0), fresh).unwrap_err(),
        view.history(&item(1), fresh).unwrap_err(),
        view.as_of(&item(2), Index::new(3), fresh).unwrap_err(),
        view.out_edges("a", None, fresh).unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                ViewError::NotYetApplied {
                    wanted,
                    applied: Index::ZERO,
                    ..
                } if wanted == Index::new(5)
            ),
            "{err}"
        );
        assert!(err.to_string().contains("not 5"), "{err}");
    }
    // As-of above the applied index without waiting is refused the same way.
    let err = view
        .as_of(&item(0), Index::new(1), Freshness::Any)
        .unwrap_err();
    assert!(matches!(err, ViewError::NotYetApplied { .. }), "{err}");
    assert_eq!(view.applied_index(), Index::ZERO);
}

#[test]
fn an_async_wait_resolves_when_the_index_is_applied_and_times_out_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    let commit = log
        .append_blocking(&transaction(&vec![(3, Some(1))]))
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let applied = rt.block_on(async {
        let waiter = view.wait_applied_async(commit, Duration::from_secs(60));
        let (waited, caught_up) = tokio::join!(waiter, follow::catch_up(&view, &log));
        caught_up.unwrap();
        waited.unwrap()
    });
    assert_eq!(applied, commit);
    let err = rt
        .block_on(view.wait_applied_async(commit.next(), Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(err, ViewError::NotYetApplied { applied, .. } if applied == commit),
        "{err}"
    );
}
