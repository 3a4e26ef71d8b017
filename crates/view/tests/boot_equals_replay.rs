//! Invariant 5: a Memory View booted from Disk Views (any source partitioning, views at
//! different applied indexes, writes landing during the boot) to the plan's cut and then
//! tailed from cut + 1 equals a Memory View that replayed the whole log. Every iteration
//! of the boot checks invariant 6 (order within keys, nothing above the cut).

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use common::*;
use proptest::prelude::*;
use spindle_core::Partition;
use spindle_view::{follow, BootProgress, MemoryView};

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

    // Writes land in the log, and in the Disk Views, while the boot iterates.
    let progress = BootProgress::default();
    let booted = std::thread::scope(|s| {
        s.spawn(|| {
            for spec in &during {
                log.append_blocking(&transaction(spec)).unwrap();
                for view in &views {
                    step_to(view, &log, log.durable_index());
                }
            }
        });
        MemoryView::boot(target, &plan, by_name(&views), &progress).unwrap()
    });
    assert_eq!(booted.applied_index(), plan.cut);
    // Progress: every source finished, one frame per item written up to the cut.
    let sources = plan.sources.len() as u64;
    assert_eq!(progress.sources_total.load(Relaxed), sources);
    assert_eq!(progress.sources_done.load(Relaxed), sources);
    let items_at_cut = replay(&log, plan.cut, target).len() as u64;
    assert_eq!(progress.items.load(Relaxed), items_at_cut);
    rt.block_on(follow::catch_up(&booted, &log)).unwrap();

    let replayed = MemoryView::new(target);
    rt.block_on(follow::catch_up(&replayed, &log)).unwrap();
    assert_eq!(booted.snapshot(), replayed.snapshot());

    // And both equal the reference: the newest live version of every item in range.
    let mut want = HashMap::new();
    for (key, versions) in replay(&log, log.durable_index(), target) {
        let (index, value) = versions.last().unwrap();
        if let Some(json) = value.as_json() {
            want.insert(key, (*index, json.to_owned()));
        }
    }
    assert_eq!(booted.snapshot().1, want);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(128)))]

    #[test]
    fn a_booted_memory_view_equals_a_replayed_one(
        sources_n in prop_oneof![Just(1u64), Just(2), Just(4)],
        target_n in prop_oneof![Just(1u64), Just(4), Just(6)],
        j in 0u64..6,
        before in proptest::collection::vec(txn_strategy(), 0..40),
        during in proptest::collection::vec(txn_strategy(), 0..15),
        lags in proptest::collection::vec(0u8..12, 1..4),
    ) {
        run(sources_n, Partition::nth(j % target_n, target_n), before, during, lags);
    }
}

#[test]
fn four_way_sources_boot_a_six_way_view() {
    let before: Vec<TxnSpec> = (0..120u8)
        .map(|n| vec![(n, Some(n)), (n.wrapping_mul(7), None)])
        .collect();
    let during: Vec<TxnSpec> = (0..30u8)
        .map(|n| vec![(n, Some(n.wrapping_add(1)))])
        .collect();
    for j in 0..6 {
        run(
            4,
            Partition::nth(j, 6),
            before.clone(),
            during.clone(),
            vec![0, 5, 2],
        );
    }
}
