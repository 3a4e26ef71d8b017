//! What a restarted log serves as durable stays durable: after the process dies with writes
//! still only in the page cache, reopening syncs what recovery kept before publishing it, so
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
