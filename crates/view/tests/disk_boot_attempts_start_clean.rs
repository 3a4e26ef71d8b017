//! What one attempt at a boot source writes does not outlive it: a source that fails part
//! way (after more than one write batch of frames, so some reached RocksDB) and is tried
//! again, or a boot that failed and is run again, leaves a view holding exactly what the
//! successful attempt sent: the log up to the cut, with a replay's checksum.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use common::*;
use spindle_core::{Index, ItemKey, Partition};
use spindle_view::boot::{BootSource, FrameBatches};
use spindle_view::disk_boot::DISK_BOOT_BATCH_BYTES;
use spindle_view::frame::{encode_version, FLAG_VALUE};
use spindle_view::{follow, BootProgress, DiskView, IterError, IterRequest};

/// Frames of items the log never held, more bytes of them than one boot write batch.
struct Ghosts {
    sent: bool,
    retry: bool,
}

impl FrameBatches for Ghosts {
    fn fill(&mut self, buf: &mut Vec<u8>, _bytes_max: usize) -> Result<bool, IterError> {
        if self.sent {
            return Err(IterError::Remote {
                view: "flaky".into(),
                detail: "connection reset".into(),
                retry: self.retry,
            });
        }
        self.sent = true;
        let pad = "g".repeat(64 << 10);
        let value = format!("{{\"pad\":\"{pad}\"}}");
        let mut written = 0;
        let mut n = 0;
        while written <= DISK_BOOT_BATCH_BYTES + (1 << 20) {
            let mut key = Vec::new();
            ItemKey::node(format!("ghost{n}")).unwrap().encode(&mut key);
            encode_version(buf, FLAG_VALUE, Index::FIRST, &key, Some(value.as_bytes()));
            written += value.len() + key.len();
            n += 1;
        }
        Ok(false)
    }
}

/// A Disk View whose first iteration sends ghosts and then fails (retryably or not); later
/// ones are the view's own.
struct Flaky<'v> {
    view: &'v DiskView,
    opened: AtomicU32,
    retry: bool,
}

impl BootSource for Flaky<'_> {
    fn name(&self) -> String {
        "flaky".into()
    }

    fn open(&self, req: &IterRequest) -> Result<Box<dyn FrameBatches + '_>, IterError> {
        if self.opened.fetch_add(1, Ordering::SeqCst) == 0 {
            return Ok(Box::new(Ghosts {
                sent: false,
                retry: self.retry,
            }));
        }
        BootSource::open(self.view, req)
    }

    fn corrupt(&self, what: String) -> IterError {
        BootSource::corrupt(self.view, what)
    }

    fn may_retry(&self, error: &IterError) -> bool {
        matches!(error, IterError::Remote { retry: true, .. })
    }
}

fn assert_equals_replay(view: &DiskView, log: &spindle_log::FileLog) {
    let (frames, cut) = iterate_all(view, &IterRequest::range(view.partition()));
    assert_eq!(cut, view.applied_index());
    assert_eq!(
        frames_to_versions(&frames),
        replay(log, cut, view.partition()),
        "the booted view holds what the failed attempt sent"
    );
    let (sum, _) = checksum_by_replay(
        log,
        cut,
        view.partition(),
        spindle_view::checksum::CHECKPOINT_INTERVAL_INDEXES,
    );
    assert_eq!(view.checksum().checksum, sum);
    assert!(view.verify().unwrap().ok());
}

fn fixture() -> (tempfile::TempDir, spindle_log::FileLog, Vec<DiskView>) {
    let dir = tempfile::tempdir().unwrap();
    let log = open_log(&dir.path().join("log"));
    for i in 0..40u8 {
        let spec = vec![(i, Some(i)), (i.wrapping_mul(7), Some(i.wrapping_add(1)))];
        log.append_blocking(&transaction(&spec)).unwrap();
    }
    let views = disk_views(dir.path(), &log, 1, &[0]);
    (dir, log, views)
}

#[test]
fn a_source_tried_again_leaves_nothing_of_its_failed_attempt() {
    let (dir, log, views) = fixture();
    let plan = plan(&views, Partition::ALL, log.durable_index());
    let flaky = Flaky {
        view: &views[0],
        opened: AtomicU32::new(0),
        retry: true,
    };
    let progress = BootProgress::default();
    let booted = DiskView::boot(
        dir.path().join("new"),
        Partition::ALL,
        &plan,
        |_| Some(&flaky),
        &progress,
    )
    .unwrap();
    assert_eq!(flaky.opened.load(Ordering::SeqCst), 2, "tried again once");
    assert_eq!(booted.applied_index(), plan.cut);
    assert_equals_replay(&booted, &log);
    runtime().block_on(follow::catch_up(&booted, &log)).unwrap();
    assert_equals_replay(&booted, &log);
}

#[test]
fn a_boot_run_again_leaves_nothing_of_the_failed_one() {
    let (dir, log, views) = fixture();
    let plan = plan(&views, Partition::ALL, log.durable_index());
    let flaky = Flaky {
        view: &views[0],
        opened: AtomicU32::new(0),
        retry: false,
    };
    let progress = BootProgress::default();
    let target = dir.path().join("new");
    let err =
        DiskView::boot(&target, Partition::ALL, &plan, |_| Some(&flaky), &progress).unwrap_err();
    assert!(err.to_string().contains("connection reset"), "{err}");
    // The failed boot is refused on open, then run again from an honest source.
    assert!(DiskView::open(&target, Partition::ALL).is_err());
    let booted = DiskView::boot(
        &target,
        Partition::ALL,
        &plan,
        by_name(&views),
        &BootProgress::default(),
    )
    .unwrap();
    assert_equals_replay(&booted, &log);
}
