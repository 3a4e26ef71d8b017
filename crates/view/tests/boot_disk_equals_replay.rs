//! A new Disk View booted from other Disk Views (any partitioning, including 4 → 6; sources
//! at different applied indexes; writes landing during the boot) holds exactly the log up
//! to the plan's cut, and after following the log it equals a replay of the whole log
//! (invariants 4 and 5 for Disk Views), with the checksum a replay has. A boot refuses a view that already holds state.

mod common;

use common::*;
use proptest::prelude::*;
use spindle_core::Partition;
use spindle_view::{follow, BootProgress, DiskView, IterRequest, ViewError};

fn assert_equals_replay(view: &DiskView, log: &spindle_log::FileLog) {
    let (frames, cut) = iterate_all(view, &IterRequest::range(view.partition()));
    assert_eq!(cut, view.applied_index());
    assert_log_order_within_keys(&frames, cut);
    assert_eq!(
        frames_to_versions(&frames),
        replay(log, cut, view.partition())
    );
    // The boot's versions came around `apply`; its checksum still equals a replay's.
    let (sum, checkpoints) = checksum_by_replay(
        log,
        cut,
        view.partition(),
        spindle_view::checksum::CHECKPOINT_INTERVAL_INDEXES,
    );
    assert_eq!(view.checksum().applied, cut);
    assert_eq!(view.checksum().checksum, sum);
    assert_eq!(view.checkpoints(), checkpoints);
    assert!(view.verify().unwrap().ok());
}

fn run(
    sources_n: u64,
    target: Partition,
    before: Vec<TxnSpec>,
    during: Vec<TxnSpec>,
    lags: Vec<u8>,
) {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let log = open_log(&dir.path().join("log"));
    for spec in &before {
        log.append_blocking(&transaction(spec)).unwrap();
    }
    let views = disk_views(dir.path(), &log, sources_n, &lags);
    let plan = plan(&views, target, log.durable_index());
    let booted = std::thread::scope(|s| {
        s.spawn(|| {
            for spec in &during {
                log.append_blocking(&transaction(spec)).unwrap();
                for view in &views {
                    step_to(view, &log, log.durable_index());
                }
            }
        });
        let progress = BootProgress::default();
        DiskView::boot(
            dir.path().join("new"),
            target,
            &plan,
            by_name(&views),
            &progress,
        )
        .unwrap()
    });
    assert_eq!(booted.applied_index(), plan.cut);
    assert_equals_replay(&booted, &log);
    rt.block_on(follow::catch_up(&booted, &log)).unwrap();
    assert_equals_replay(&booted, &log);

    // Reopened, it is an ordinary view; a second boot into it is refused.
    drop(booted);
    let reopened = DiskView::open(dir.path().join("new"), target).unwrap();
    assert_eq!(reopened.applied_index(), log.durable_index());
    drop(reopened);
    if !log.durable_index().is_zero() {
        let err = DiskView::boot(
            dir.path().join("new"),
            target,
            &plan,
            by_name(&views),
            &BootProgress::default(),
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                spindle_view::IterError::View(ViewError::NotEmpty { .. })
            ),
            "{err}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(96)))]

    #[test]
    fn a_booted_disk_view_equals_the_log(
        sources_n in prop_oneof![Just(1u64), Just(4)],
        target_n in prop_oneof![Just(1u64), Just(4), Just(6)],
        j in 0u64..6,
        before in proptest::collection::vec(txn_strategy(), 0..40),
        during in proptest::collection::vec(txn_strategy(), 0..10),
        lags in proptest::collection::vec(0u8..12, 1..4),
    ) {
        run(sources_n, Partition::nth(j % target_n, target_n), before, during, lags);
    }
}
