//! An imported data set equals the same data set loaded through the log and applied
//! normally: the same log records, Disk Views with every version of every item (byte-equal
//! iteration streams, equal histories, applied indexes and checksums), and equal Memory Views booted
//! from them. Random writes with deletes and several versions per item, over several input
//! files, through a sort with a small memory budget (so it spills). `SPINDLE_IMPORT_CASES`
//! raises the number of seeds.

mod common;

use common::*;
use spindle_core::{Index, Partition};
use spindle_log::{FileLog, LogConfig};
use spindle_view::{select, BootProgress, CatalogEntry, DiskView, IterRequest, MemoryView};
use spindle_view::{Freshness, Role, SelectRequest};

fn cases() -> u64 {
    std::env::var("SPINDLE_IMPORT_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// The whole iteration stream of a view, as bytes.
fn stream(view: &DiskView) -> Vec<u8> {
    let mut it = view.iterate(&IterRequest::range(Partition::ALL)).unwrap();
    let mut out = Vec::new();
    while !it.fill(&mut out, 1 << 16).unwrap() {}
    out
}

fn memory_view(views: &[DiskView]) -> MemoryView {
    let catalog: Vec<CatalogEntry> = views
        .iter()
        .enumerate()
        .map(|(i, v)| CatalogEntry {
            id: format!("disk{i}"),
            range: v.partition(),
            applied: v.applied_index(),
            role: Role::Iteration,
        })
        .collect();
    let request = SelectRequest {
        range: Partition::ALL,
        role: Role::Iteration,
        head: views[0].applied_index(),
        lag_records_max: u64::MAX,
    };
    let plan = select(&catalog, &request).unwrap();
    let view_of = |id: &str| views.get(id.strip_prefix("disk")?.parse::<usize>().ok()?);
    MemoryView::boot(Partition::ALL, &plan, view_of, &BootProgress::default()).unwrap()
}

fn log_records(data: &std::path::Path) -> Vec<spindle_core::Record> {
    let log = FileLog::open(data.join("log"), LogConfig::default()).unwrap();
    let mut out = Vec::new();
    while (out.len() as u64) < log.durable_index().get() {
        out.extend(log.read(Index::new(out.len() as u64 + 1), 4096).unwrap());
    }
    out
}

fn check(seed: u64, lines: usize, items: u64, partitions: u64, files: usize) {
    let dir = tempfile::tempdir().unwrap();
    let writes = random_writes(seed, lines, items);
    let inputs = write_inputs(dir.path(), &writes, files);
    let imported = dir.path().join("imported");
    let normal = dir.path().join("normal");
    let report = run_import(&imported, partitions, &inputs);
    assert_eq!(report.records, lines as u64);
    assert_eq!(report.last_index, Index::new(lines as u64));
    assert_eq!(report.partition_entries.iter().sum::<u64>(), lines as u64);
    if lines > 1000 {
        assert!(
            report.sort.passes >= 2,
            "the sort spilled: {:?}",
            report.sort
        );
    }
    load_normally(&normal, partitions, &writes);

    assert_eq!(log_records(&imported), log_records(&normal), "seed {seed}");
    let (a, b) = (
        open_views(&imported, partitions),
        open_views(&normal, partitions),
    );
    for (va, vb) in a.iter().zip(&b) {
        assert_eq!(va.applied_index(), Index::new(lines as u64));
        assert_eq!(va.applied_index(), vb.applied_index());
        assert_eq!(va.persisted_index(), va.applied_index(), "seed {seed}");
        // The import's versions bypass `apply`; its checksum is still the applied one's.
        assert_eq!(va.checksum(), vb.checksum(), "seed {seed}");
        assert_eq!(va.checkpoints(), vb.checkpoints(), "seed {seed}");
        assert!(va.verify().unwrap().ok(), "seed {seed}");
        assert_eq!(
            stream(va),
            stream(vb),
            "seed {seed}: iteration of {:?}",
            va.partition()
        );
    }
    for k in 0..items {
        let key = pool_item(k);
        let owner = |views: &[DiskView]| {
            let v = views
                .iter()
                .find(|v| v.partition().contains(key.hash()))
                .unwrap();
            v.history(&key, Freshness::Any).unwrap()
        };
        assert_eq!(owner(&a), owner(&b), "seed {seed}: history of {key}");
    }
    let (ma, mb) = (memory_view(&a), memory_view(&b));
    assert_eq!(ma.applied_index(), mb.applied_index());
    assert_eq!(ma.snapshot(), mb.snapshot(), "seed {seed}: Memory Views");
    assert!(!ma.is_empty());
}

#[test]
fn imported_views_equal_views_loaded_through_the_log() {
    for seed in 1..=cases() {
        check(seed, 3000 + seed as usize * 17, 400, 4, 3);
    }
}

#[test]
fn one_partition_and_a_single_line_import_too() {
    check(99, 1, 1, 1, 1);
    check(98, 500, 50, 1, 1);
    check(97, 200, 30, 7, 2);
}
