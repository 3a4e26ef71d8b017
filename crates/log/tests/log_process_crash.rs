//! What a restarted log serves as durable stays durable: after the process dies with writes
//! still only in the page cache (data, or a new segment's name), reopening syncs what
//! recovery kept (the last segment and the directory) before publishing it, so
//! a power cut afterwards loses nothing that was served (and the clean-close hint never claims
//! unsynced bytes).

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use spindle_log::fs::Fs;
use spindle_log::sim_fs::SimFs;
use spindle_log::FileLog;

fn open_sim(sim: &SimFs) -> FileLog {
    let fs: Arc<dyn Fs> = Arc::new(sim.boot());
    FileLog::open_in(fs, Path::new("/sim/log"), small_segments()).unwrap()
}

#[test]
fn records_served_after_a_process_crash_survive_a_later_power_cut() {
    let mut unsynced_served = 0;
    for seed in 0..60u64 {
        let sim = SimFs::new(seed);
        let log = open_sim(&sim);
        for i in 0..3 {
            log.append_blocking(&put("a", i)).unwrap();
        }
        // Die at the 1st or 2nd call of the next append: after its write, before its sync.
        sim.arm_crash_after(1 + seed % 2);
        let txns: Vec<_> = (0..4).map(|i| put("b", i)).collect();
        let _ = futures::executor::block_on(futures::future::join_all(
            txns.iter().map(|t| log.append(t)),
        ));
        drop(log);

        let log = open_sim(&sim);
        let served = log.durable_index();
        unsynced_served += u64::from(served.get() > 3);
        drop(log);
        sim.power_cut();
        let log = open_sim(&sim);
        assert!(
            log.durable_index() >= served,
            "seed {seed}: served {served} as durable, {} after a power cut",
            log.durable_index()
        );
    }
    assert!(
        unsynced_served > 0,
        "no case left unsynced records to serve"
    );
}

/// How many appends of `put("a", i)` fit before the next one opens a new segment.
fn appends_before_roll(seed: u64) -> u64 {
    let sim = SimFs::new(seed);
    let log = open_sim(&sim);
    let dir = Path::new("/sim/log");
    let segments = |sim: &SimFs| sim.boot().list(dir).unwrap().len();
    let before = segments(&sim);
    for i in 0.. {
        log.append_blocking(&put("a", i)).unwrap();
        if segments(&sim) > before {
            return i;
        }
    }
    unreachable!()
}

/// The process dies while rolling to a new segment, after the new segment's rename but before
/// its directory is synced. The restarted log finds the segment (its name is in the page
/// cache) and appends into it; what it acknowledges there must survive a power cut, so open
/// must make the names it found durable before acknowledging anything.
#[test]
fn appends_into_a_segment_whose_creation_a_dead_process_left_unsynced_survive_a_power_cut() {
    let mut lost = Vec::new();
    let mut rolled_unsynced = 0;
    for seed in 0..16u64 {
        let fill = appends_before_roll(seed);
        // Crash in place of each call of the roll in turn (sync of the old segment, create,
        // header, allocate, sync, rename, directory sync).
        for call in 1..=8u64 {
            let sim = SimFs::new(seed);
            let log = open_sim(&sim);
            for i in 0..fill {
                log.append_blocking(&put("a", i)).unwrap();
            }
            sim.arm_crash_after(call);
            let _ = log.append_blocking(&put("a", fill));
            drop(log);

            let log = open_sim(&sim);
            let segments = log.open_report().segments;
            let acked = log.append_blocking(&put("b", 1)).unwrap();
            rolled_unsynced += u64::from(segments > 1);
            // Power fails while the log runs (a clean close would sync the directory).
            sim.power_cut();
            drop(log);
            let log = open_sim(&sim);
            if log.durable_index() < acked {
                lost.push(format!(
                    "seed {seed}, crash at call {call}: acknowledged {acked}, durable {} after \
                     a power cut",
                    log.durable_index()
                ));
            }
        }
    }
    assert!(rolled_unsynced > 0, "no crash left a new segment behind");
    assert!(
        lost.is_empty(),
        "acknowledged appends lost:\n{}",
        lost.join("\n")
    );
}
