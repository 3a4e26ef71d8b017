//! Puts acknowledged into a volume whose creation a dead process left unsynced survive a
//! power cut: the process dies while rolling to a new volume, after the volume's header is
//! synced but before its directory is; the restarted store finds the volume (its name is in
//! the page cache) and appends into it, so open must make the names it found durable before
//! acknowledging anything there.

use std::path::Path;
use std::sync::Arc;

use spindle_chunk::{ChunkStore, Options};
use spindle_fs::{Fs, SimFs};

const DIR: &str = "/sim/chunks";

fn options() -> Options {
    Options {
        volume_bytes_max: 2048,
        write_buffer_bytes_max: 64 << 10,
        chunk_bytes_max: 4096,
        compact_in_background: false,
        ..Options::default()
    }
}

fn open(sim: &SimFs) -> ChunkStore {
    ChunkStore::open_in(Arc::new(sim.boot()), DIR, options()).unwrap()
}

fn chunk(i: u64) -> Vec<u8> {
    (0..300).map(|b| (b as u64 * 31 + i) as u8).collect()
}

fn volumes(sim: &SimFs) -> usize {
    let names = sim.boot().list(Path::new(DIR)).unwrap();
    names.iter().filter(|n| n.ends_with(".volume")).count()
}

/// How many puts fit before the next one opens a new volume.
fn puts_before_roll(seed: u64) -> u64 {
    let sim = SimFs::new(seed);
    let store = open(&sim);
    let before = volumes(&sim);
    for i in 0.. {
        store.put(&chunk(i)).unwrap();
        if volumes(&sim) > before {
            return i;
        }
    }
    unreachable!()
}

#[test]
fn puts_into_a_volume_a_dead_process_created_unsynced_survive_a_power_cut() {
    let mut lost = Vec::new();
    let mut rolled = 0;
    for seed in 0..8u64 {
        let fill = puts_before_roll(seed);
        // Crash in place of each call of the roll in turn (the sealed volume's hint: create,
        // write, sync, rename, directory sync; the new volume: create, header, sync,
        // directory sync).
        for call in 1..=10u64 {
            let sim = SimFs::new(seed);
            let store = open(&sim);
            for i in 0..fill {
                store.put(&chunk(i)).unwrap();
            }
            sim.arm_crash_after(call);
            let _ = store.put(&chunk(fill));
            drop(store);

            let store = open(&sim);
            let vols = volumes(&sim);
            let data = chunk(1_000_000 + call);
            let id = store.put(&data).unwrap();
            rolled += u64::from(vols > 1);
            // Power fails while the store runs (a clean close would sync the directory).
            sim.power_cut();
            drop(store);
            let store = open(&sim);
            if store.get(&id).unwrap().as_deref() != Some(&data[..]) {
                lost.push(format!(
                    "seed {seed}, crash at call {call}: acknowledged put {id} lost after a \
                     power cut"
                ));
            }
        }
    }
    assert!(rolled > 0, "no crash left a new volume behind");
    assert!(
        lost.is_empty(),
        "acknowledged puts lost:\n{}",
        lost.join("\n")
    );
}

/// The process dies after a put's or a delete's record reached the page cache but before its
/// sync. The restarted store serves what it finds (the chunk present, or deleted); a power cut
/// afterwards must not take that back.
#[test]
fn what_a_restart_serves_after_a_process_crash_survives_a_power_cut() {
    let mut changed = Vec::new();
    let mut served_unsynced = 0;
    for seed in 0..8u64 {
        for call in 1..=3u64 {
            for delete in [false, true] {
                let sim = SimFs::new(seed);
                let store = open(&sim);
                let kept = chunk(seed);
                let kept_id = store.put(&kept).unwrap();
                let data = chunk(100 + seed);
                sim.arm_crash_after(call);
                let id = if delete {
                    let _ = store.delete(&kept_id);
                    kept_id
                } else {
                    let _ = store.put(&data);
                    spindle_chunk::ChunkId::of(&data)
                };
                drop(store);

                let store = open(&sim);
                let seen = store.get(&id).unwrap();
                served_unsynced += u64::from(seen.is_some() != delete);
                sim.power_cut();
                drop(store);
                let store = open(&sim);
                let after = store.get(&id).unwrap();
                if after != seen {
                    changed.push(format!(
                        "seed {seed}, crash at call {call}, {}: served {} after the crash, {} \
                         after a power cut",
                        if delete { "delete" } else { "put" },
                        if seen.is_some() { "present" } else { "absent" },
                        if after.is_some() { "present" } else { "absent" },
                    ));
                }
            }
        }
    }
    assert!(
        served_unsynced > 0,
        "no crash left an unsynced record to serve"
    );
    assert!(
        changed.is_empty(),
        "served state changed:\n{}",
        changed.join("\n")
    );
}
