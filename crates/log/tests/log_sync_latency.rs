//! The log times every fdatasync of appends: the percentiles over its recent window count
//! each sync once (up to the window) and are ordered p50 ≤ p99 ≤ max.

mod common;

use std::sync::atomic::Ordering;

use spindle_log::{LogConfig, SYNC_LATENCY_WINDOW};

#[tokio::test]
async fn every_sync_is_timed_and_percentiles_are_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let log = common::open(dir.path(), LogConfig::default());
    assert_eq!(log.stats().sync_latency.percentiles(), None, "no sync yet");
    for n in 0..20 {
        log.append(&common::put(&format!("k{n}"), n)).await.unwrap();
    }
    let syncs = log.stats().syncs.load(Ordering::Relaxed);
    assert!(syncs >= 1);
    let p = log.stats().sync_latency.percentiles().unwrap();
    assert_eq!(p.count as u64, syncs.min(SYNC_LATENCY_WINDOW as u64));
    assert!(p.p50_us <= p.p99_us && p.p99_us <= p.max_us, "{p:?}");
    assert!(p.max_us > 0, "an fdatasync takes some time: {p:?}");
}

#[test]
fn the_window_keeps_the_most_recent_syncs() {
    let lat = spindle_log::SyncLatency::default();
    for us in 1..=(SYNC_LATENCY_WINDOW as u64 + 100) {
        lat.record(std::time::Duration::from_micros(us));
    }
    let p = lat.percentiles().unwrap();
    assert_eq!(p.count, SYNC_LATENCY_WINDOW);
    // The window holds 101 ..= 1124: nearest-rank p50 is its 512th value, p99 its 1014th.
    assert_eq!(p.p50_us, 100 + 512);
    assert_eq!(p.p99_us, 100 + 1014);
    assert_eq!(p.max_us, SYNC_LATENCY_WINDOW as u64 + 100);
}

/// A lone appender's batches are synced by the writer itself (one thread wake-up fewer),
/// unless turned off; either way every append is synced and durable when acknowledged.
#[tokio::test]
async fn a_lone_appender_is_synced_by_the_writer_unless_turned_off() {
    for inline in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            writer_syncs_when_idle: inline,
            ..LogConfig::default()
        };
        let log = common::open(dir.path(), config);
        for n in 0..20 {
            let at = log.append(&common::put(&format!("k{n}"), n)).await.unwrap();
            assert!(log.durable_index() >= at, "acknowledged before durable");
        }
        let stats = log.stats();
        let by_writer = stats.batches_synced_by_writer.load(Ordering::Relaxed);
        assert_eq!(
            stats.syncs.load(Ordering::Relaxed),
            20,
            "one sync per lone append"
        );
        if inline {
            assert_eq!(by_writer, 20, "every lone batch synced by the writer");
        } else {
            assert_eq!(by_writer, 0, "turned off");
        }
    }
}
