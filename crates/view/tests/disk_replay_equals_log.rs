//! Invariant 4: a Disk View at applied index N holds exactly the versions a replay of the
//! log from 1 to N yields in its partition — while it follows a log that is being written,
//! when it is stopped at an arbitrary point, and after a restart mid-stream it resumes and
//! converges.

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use spindle_core::{Index, Partition};
use spindle_view::{follow, DiskView, IterRequest};

fn assert_equals_replay(view: &DiskView, log: &spindle_log::FileLog) {
    let applied = view.applied_index();
    let (frames, cut) = iterate_all(view, &IterRequest::range(view.partition()));
    assert_eq!(cut, applied);
    assert_log_order_within_keys(&frames, cut);
    assert_eq!(
        frames_to_versions(&frames),
        replay(log, applied, view.partition())
    );
}

fn run(partition: Partition, txns: Vec<TxnSpec>, stop_after: usize) {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let log = open_log(&dir.path().join("log"));
    let view_dir = dir.path().join("view");
    let view = Arc::new(DiskView::open(&view_dir, partition).unwrap());
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let follower = {
        let (view, log) = (view.clone(), log.clone());
        rt.spawn(async move { follow::follow(&*view, log, stop_rx).await })
    };
    // Writes race the follower; stop it part-way, wherever it happens to be.
    let stop_after = stop_after % (txns.len() + 1);
    for (n, spec) in txns.iter().enumerate() {
        if n == stop_after {
            stop.send_replace(true);
        }
        rt.block_on(log.append(&transaction(spec))).unwrap();
    }
    stop.send_replace(true);
    let stopped_at = rt.block_on(follower).unwrap().unwrap();
    assert_eq!(stopped_at, view.applied_index());
    assert!(stopped_at <= log.durable_index());
    assert_equals_replay(&view, &log);

    // Restart mid-stream: the view resumes from its applied index and converges.
    drop(view);
    let view = DiskView::open(&view_dir, partition).unwrap();
    assert_eq!(view.applied_index(), stopped_at);
    let applied = rt.block_on(follow::catch_up(&view, &log)).unwrap();
    assert_eq!(applied, log.durable_index());
    assert_equals_replay(&view, &log);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn a_view_at_n_equals_the_replay_to_n(
        n in prop_oneof![Just(1u64), Just(4)],
        i in 0u64..4,
        txns in proptest::collection::vec(txn_strategy(), 1..60),
        stop_after in any::<usize>(),
    ) {
        run(Partition::nth(i % n, n), txns, stop_after);
    }
}

#[test]
fn an_empty_log_gives_an_empty_view() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    let view = DiskView::open(dir.path().join("view"), Partition::ALL).unwrap();
    assert_eq!(
        runtime().block_on(follow::catch_up(&view, &log)).unwrap(),
        Index::ZERO
    );
    assert_equals_replay(&view, &log);
}
