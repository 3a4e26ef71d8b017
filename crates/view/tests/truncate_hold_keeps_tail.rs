//! Invariant 7 and retention holds: truncation never deletes an index above the safe index;
//! a boot whose hold is active keeps its log tail (cut + 1 onwards) and converges, and once
//! the hold is released the coordinator moves on and the old cut's tail may go.

mod common;

use common::*;
use spindle_core::{Index, Partition};
use spindle_view::select::Source;
use spindle_view::truncate::{safe_index, truncate, Blocker, Holds, Replica};
use spindle_view::{follow, BootProgress, DiskView, MemoryView, Plan, ViewError};

fn replicas(views: &[DiskView]) -> Vec<Replica> {
    catalog(views)
        .into_iter()
        .map(|c| Replica {
            view: c.id,
            range: c.range,
            applied: c.applied,
        })
        .collect()
}

#[test]
fn a_held_boot_keeps_its_tail_and_truncation_never_passes_the_safe_index() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let log = open_log(&dir.path().join("log"));
    for n in 0..3000u32 {
        // Enough bytes for several 64 KiB segments.
        let spec = vec![
            ((n % 200) as u8, Some((n % 251) as u8)),
            ((n % 7) as u8 + 30, None),
        ];
        log.append_blocking(&transaction(&spec)).unwrap();
    }
    let head = log.durable_index();
    // Two replicas of the whole space, both caught up; a reference replayed before any
    // truncation.
    let views: Vec<DiskView> = (0..2)
        .map(|i| DiskView::open(dir.path().join(format!("disk{i}")), Partition::ALL).unwrap())
        .collect();
    for v in &views {
        rt.block_on(follow::catch_up(v, &log)).unwrap();
    }
    let reference = MemoryView::new(Partition::ALL);
    rt.block_on(follow::catch_up(&reference, &log)).unwrap();

    // A boot at an early cut takes its hold before it iterates.
    let holds = Holds::default();
    let cut = Index::new(20);
    let hold = holds.hold(cut);
    let decision = safe_index(&replicas(&views), 2, &holds.active());
    assert_eq!(decision.safe, cut);
    assert_eq!(
        decision.blocker,
        Blocker::Hold {
            id: hold.id(),
            cut,
            owner: None
        }
    );
    let first = rt.block_on(truncate(&log, &decision)).unwrap();
    assert!(
        first <= decision.safe.next(),
        "truncated past the safe index: {first}"
    );

    let plan = Plan {
        sources: vec![Source {
            view: "disk0".into(),
            range: Partition::ALL,
            whole_view: true,
        }],
        cut,
    };
    let booted = MemoryView::boot(
        Partition::ALL,
        &plan,
        by_name(&views),
        &BootProgress::default(),
    )
    .unwrap();
    rt.block_on(follow::catch_up(&booted, &log)).unwrap();
    assert_eq!(booted.snapshot(), reference.snapshot());
    drop(hold);

    // Released: the replicas bound truncation now, and the old cut's tail may be deleted.
    let decision = safe_index(&replicas(&views), 2, &holds.active());
    assert_eq!(decision.safe, head);
    assert!(matches!(decision.blocker, Blocker::Replica { .. }));
    let first = rt.block_on(truncate(&log, &decision)).unwrap();
    assert!(
        first <= decision.safe.next(),
        "truncated past the safe index: {first}"
    );
    assert!(
        first > cut.next(),
        "segments below the head were deleted (first retained {first})"
    );
    let late = MemoryView::boot(
        Partition::ALL,
        &plan,
        by_name(&views),
        &BootProgress::default(),
    )
    .unwrap();
    let err = rt.block_on(follow::catch_up(&late, &log)).unwrap_err();
    assert!(matches!(err, ViewError::LogTruncated { .. }), "{err}");
}
