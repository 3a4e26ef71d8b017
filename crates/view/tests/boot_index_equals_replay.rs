//! An Index View booted from Disk Views with a projection (any source partitioning, writes
//! landing during the boot) and then tailed equals an Index View that replayed the whole
//! log, and both equal the property values of the live nodes.

mod common;

use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use spindle_core::{ItemKey, Partition};
use spindle_view::{follow, BootProgress, IndexView};

fn run(
    sources_n: u64,
    target: Partition,
    pointer: &str,
    before: Vec<TxnSpec>,
    during: Vec<TxnSpec>,
) {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let log = open_log(&dir.path().join("log"));
    for spec in &before {
        log.append_blocking(&transaction(spec)).unwrap();
    }
    let views = disk_views(dir.path(), &log, sources_n, &[0, 3, 9]);
    let plan = plan(&views, target, log.durable_index());
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
        IndexView::boot(target, pointer, &plan, by_name(&views), &progress).unwrap()
    });
    assert_eq!(booted.applied_index(), plan.cut);
    rt.block_on(follow::catch_up(&booted, &log)).unwrap();
    let replayed = IndexView::new(target, pointer).unwrap();
    rt.block_on(follow::catch_up(&replayed, &log)).unwrap();
    assert_eq!(booted.snapshot(), replayed.snapshot());

    let mut want = BTreeMap::new();
    for (key, versions) in replay(&log, log.durable_index(), target) {
        let (ItemKey::Node { id }, Some(json)) = (&key, versions.last().unwrap().1.as_json())
        else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        if let Some(p) = v.pointer(pointer) {
            want.insert(id.clone(), p.to_string());
        }
    }
    assert_eq!(booted.snapshot().1, want);
    for (id, value) in &want {
        let ids = booted.lookup(&serde_json::from_str(value).unwrap());
        assert!(ids.contains(id), "{id} missing under {value}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(96)))]

    #[test]
    fn a_booted_index_view_equals_a_replayed_one(
        sources_n in prop_oneof![Just(1u64), Just(4)],
        target_n in prop_oneof![Just(1u64), Just(6)],
        j in 0u64..6,
        pointer in prop_oneof![Just("/name"), Just("/n"), Just("/w/0")],
        before in proptest::collection::vec(txn_strategy(), 0..40),
        during in proptest::collection::vec(txn_strategy(), 0..10),
    ) {
        run(sources_n, Partition::nth(j % target_n, target_n), pointer, before, during);
    }
}
