//! A view filled from table files takes the checksum its importer summed while writing them
//! (`finish_ingest_summed`) instead of scanning them back: the result must equal the scan's
//! (`finish_ingest`), sums made for another applied index or checkpoint interval must not be
//! used, and sums that miss a version are stored as given and caught by `verify` (the
//! scrub's job).

use std::path::{Path, PathBuf};

use rocksdb::SstFileWriter;
use spindle_core::{Index, ItemKey, Partition, Value};
use spindle_view::disk_ingest::IngestChecksum;
use spindle_view::{keys, Checkpoint, Checksum, DiskView};

/// 3,000 versions of 500 nodes (so the checkpoints at 1024 and 2048 count), sorted as a
/// table file needs them.
fn versions() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = (1..=3000u64)
        .map(|i| {
            let key = ItemKey::node(format!("n{}", i % 500)).unwrap();
            let value = if i % 7 == 0 {
                Value::TOMBSTONE
            } else {
                Value::json(format!("{{\"v\":{i}}}")).unwrap()
            };
            let mut v = Vec::new();
            keys::encode_value(&value, &mut v);
            (keys::version_key(&key, Index::new(i)), v)
        })
        .collect();
    out.sort();
    out
}

fn table_file(dir: &Path, entries: &[(Vec<u8>, Vec<u8>)]) -> PathBuf {
    let path = dir.join("t.sst");
    let opts = DiskView::table_file_options();
    let mut w = SstFileWriter::create(&opts);
    w.open(&path).unwrap();
    for (k, v) in entries {
        w.put(k, v).unwrap();
    }
    w.finish().unwrap();
    path
}

/// Ingest `entries` into a new view in `dir` and finish it with `finish`.
fn ingested(
    dir: &Path,
    entries: &[(Vec<u8>, Vec<u8>)],
    finish: impl FnOnce(&DiskView),
) -> (Checksum, Vec<Checkpoint>, bool) {
    std::fs::create_dir_all(dir).unwrap();
    let file = table_file(dir, entries);
    let view = DiskView::open(dir.join("view"), Partition::ALL).unwrap();
    view.ingest_tables(&[file]).unwrap();
    finish(&view);
    assert_eq!(view.applied_index(), Index::new(3000));
    let report = view.verify().unwrap();
    (view.checksum().checksum, view.checkpoints(), report.ok())
}

#[test]
fn summed_checksums_equal_a_scan_and_wrong_ones_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let entries = versions();
    let applied = Index::new(3000);
    let sums_of = |skip: usize| {
        let mut sums = IngestChecksum::new(applied);
        for (k, v) in entries.iter().skip(skip) {
            sums.add(k, v);
        }
        sums
    };

    let scanned = ingested(&dir.path().join("scan"), &entries, |v| {
        v.finish_ingest(applied).unwrap()
    });
    assert!(scanned.2, "a scanned view verifies");
    assert_eq!(scanned.1.len(), 2, "checkpoints at 1024 and 2048");

    let summed = ingested(&dir.path().join("summed"), &entries, |v| {
        v.finish_ingest_summed(applied, &sums_of(0)).unwrap()
    });
    assert_eq!(summed, scanned, "summed while written equals a scan");

    // Sums made for another applied index are not used: the view scans. (These miss a
    // version too, so using them would show.)
    let stale = ingested(&dir.path().join("stale"), &entries, |v| {
        let mut sums = IngestChecksum::new(Index::new(2999));
        for (k, v) in entries.iter().skip(1) {
            sums.add(k, v);
        }
        v.finish_ingest_summed(applied, &sums).unwrap()
    });
    assert_eq!(stale, scanned);

    // Nor are sums made for another checkpoint interval: a view checkpointing every 512
    // indexes scans, and keeps its own checkpoints.
    let other_interval = ingested(&dir.path().join("interval"), &entries, |v| {
        v.set_checkpoint_interval(512);
        v.finish_ingest_summed(applied, &sums_of(1)).unwrap()
    });
    assert_eq!(other_interval.0, scanned.0, "the scan's checksum");
    assert_eq!(
        other_interval
            .1
            .iter()
            .map(|c| c.index.get())
            .collect::<Vec<_>>(),
        [512, 1024, 1536, 2048, 2560]
    );
    assert!(other_interval.2);

    // Sums that miss a version are stored as given; the scrub finds the difference.
    let short = ingested(&dir.path().join("short"), &entries, |v| {
        v.finish_ingest_summed(applied, &sums_of(1)).unwrap()
    });
    assert_ne!(short.0, scanned.0);
    assert!(!short.2, "verify catches a checksum that misses a version");
}
