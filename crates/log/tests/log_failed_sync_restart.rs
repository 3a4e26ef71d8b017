//! A restart after a failed sync serves only what is on the disk. When `fdatasync` fails, the
//! kernel marks the pages clean and keeps them cached: a log reopened by a restarted process
//! (the machine still up) would read the failed batch from the cache, serve it as durable,
//! and a sync would not write it. Open reads the last segment past the cache, so nothing it
//! serves can vanish at the next power cut.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use spindle_log::fs::Fs;
use spindle_log::sim_fs::SimFs;
use spindle_log::{AppendError, FileLog, LogConfig};

/// Even seeds sync a lone append's batch on the writer, odd ones on the syncer thread.
fn open_sim(sim: &SimFs, seed: u64) -> FileLog {
    let fs: Arc<dyn Fs> = Arc::new(sim.boot());
    let config = LogConfig {
        writer_syncs_when_idle: seed.is_multiple_of(2),
        ..small_segments()
    };
    FileLog::open_in(fs, Path::new("/sim/log"), config).unwrap()
}

#[test]
fn records_of_a_failed_sync_are_not_served_after_a_restart() {
    let mut vanished = Vec::new();
    for seed in 0..8u64 {
        let sim = SimFs::new(seed);
        let log = open_sim(&sim, seed);
        for i in 0..3 {
            log.append_blocking(&put("a", i)).unwrap();
        }
        sim.fail_next_sync();
        let failed = log.append_blocking(&put("b", seed));
        assert!(
            matches!(failed, Err(AppendError::Failed { .. })),
            "seed {seed}: {failed:?}"
        );
        drop(log);

        // The process restarts; the machine stays up.
        let log = open_sim(&sim, seed);
        let served = log.durable_index();
        let acked = log.append_blocking(&put("c", seed)).unwrap();
        sim.power_cut();
        drop(log);
        let log = open_sim(&sim, seed);
        let records = log.read(spindle_log::Index::new(1), usize::MAX).unwrap();
        let kept = records
            .iter()
            .any(|r| r.index == acked && r.key == node("c"));
        if log.durable_index() < served || !kept {
            vanished.push(format!(
                "seed {seed}: served {served} and acknowledged {acked} after the restart; after \
                 a power cut the log ends at {} and the acknowledged record is {}",
                log.durable_index(),
                if kept { "there" } else { "gone" }
            ));
        }
    }
    assert!(vanished.is_empty(), "{}", vanished.join("\n"));
}
