//! Seeded power cuts under the chunk store on a simulated disk (`spindle_fs::SimFs`): puts,
//! deletes and compaction (explicit and in the background) run, several at once, until the
//! power fails at a random file-system call; after every restart the store opens (recovery
//! never refuses what a power cut leaves), every acknowledged put reads back with exactly
//! its bytes, every acknowledged delete stays deleted, an operation whose answer was lost
//! is wholly present or absent, no get returns bytes other than the chunk's own (ids are
//! the BLAKE3 of what is read, with and without id verification), no chunk appears that
//! was never put, and `verify_store` finds nothing corrupt. The store appends to 1 to 4
//! volumes at once (lanes), a quarter of the restarts change that number, and in 3 of 10 the
//! power fails again while the store opens.
//!
//! `SPINDLE_CHUNK_CUTS` sets the number of cuts (default: a short run for CI);
//! `SPINDLE_CHUNK_SEED` the first seed.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spindle_chunk::{verify_store_in, ChunkId, ChunkStore, CompactionPolicy, Options};
use spindle_fs::SimFs;

const DIR: &str = "/sim/chunks";
const LIVES_PER_SEED: u64 = 20;

/// What the store must hold, per chunk ever put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// An acknowledged put (and no later delete).
    Present,
    /// An acknowledged delete, or found absent after a restart.
    Absent,
    /// A put or delete that got no answer before the cut: either outcome.
    Unknown,
}

#[derive(Default)]
struct Model {
    bytes: HashMap<ChunkId, Vec<u8>>,
    state: HashMap<ChunkId, State>,
    acked_puts: u64,
    acked_deletes: u64,
    unknown_present: u64,
    unknown_absent: u64,
    torn_tails: u64,
    lane_changes: u64,
    cuts_in_recovery: u64,
    compactions: u64,
    /// Volumes rewritten by explicit `compact` calls that returned.
    /// Unsynced writes the cuts kept whole, dropped and tore.
    writes: [u64; 3],
}

fn options(rng: &mut StdRng) -> Options {
    Options {
        volume_bytes_max: rng.random_range(2048..=12 << 10),
        write_buffer_bytes_max: 64 << 10,
        syncs_in_flight_max: rng.random_range(1..=3),
        active_volumes: rng.random_range(1..=4),
        chunk_bytes_max: 4096,
        compaction: CompactionPolicy {
            garbage_ratio_min: 0.3,
            garbage_bytes_min: 256,
        },
        compact_in_background: rng.random_bool(0.5),
        ..Options::default()
    }
}

/// Open after a cut and check every chunk the model knows; resolve unknown outcomes.
fn check_after_restart(fs: &SimFs, opts: &Options, model: &mut Model, seed: u64) -> ChunkStore {
    let store = ChunkStore::open_in(Arc::new(fs.boot()), DIR, opts.clone())
        .unwrap_or_else(|e| panic!("seed {seed}: the store must open after a power cut: {e}"));
    model.torn_tails += store.open_report().torn_tails.len() as u64;
    let ids: Vec<ChunkId> = model.state.keys().copied().collect();
    for id in ids {
        let want = &model.bytes[&id];
        let got = store
            .get(&id)
            .unwrap_or_else(|e| panic!("seed {seed}: get {id} failed: {e}"));
        let unverified = store
            .get_with(&id, false)
            .unwrap_or_else(|e| panic!("seed {seed}: unverified get {id} failed: {e}"));
        assert_eq!(got, unverified, "seed {seed}: {id}: gets disagree");
        if let Some(b) = &got {
            assert_eq!(b, want, "seed {seed}: {id} returned other bytes");
            assert_eq!(ChunkId::of(b), id, "seed {seed}: id is not BLAKE3 of bytes");
        }
        let state = model.state.get_mut(&id).expect("listed");
        match (*state, got.is_some()) {
            (State::Present, false) => panic!("seed {seed}: acknowledged put {id} lost"),
            (State::Absent, true) => {
                panic!("seed {seed}: deleted (or absent) chunk {id} came back")
            }
            (State::Unknown, true) => {
                model.unknown_present += 1;
                *state = State::Present;
            }
            (State::Unknown, false) => {
                model.unknown_absent += 1;
                *state = State::Absent;
            }
            _ => {}
        }
    }
    for id in store.keys() {
        assert!(
            model.bytes.contains_key(&id),
            "seed {seed}: chunk {id} was never put"
        );
    }
    let report = verify_store_in(&fs.boot(), Path::new(DIR))
        .unwrap_or_else(|e| panic!("seed {seed}: verify failed: {e}"));
    assert!(
        report.is_ok(),
        "seed {seed}: verify found damage: {report:?}"
    );
    store
}

enum Op {
    Put(Vec<u8>),
    Delete(ChunkId),
    Compact,
}

/// One life: operations in small concurrent groups until the armed cut fires.
fn live(store: &ChunkStore, fs: &SimFs, model: &mut Model, rng: &mut StdRng) {
    for _ in 0..200 {
        if !fs.cut_armed() {
            return;
        }
        let n = rng.random_range(1..=4);
        let mut ops = Vec::new();
        let mut taken = Vec::new();
        for _ in 0..n {
            let op = match rng.random_range(0..10) {
                0..=5 => {
                    let data = if !model.bytes.is_empty() && rng.random_bool(0.15) {
                        // Put again something put before (maybe deleted since).
                        let k = rng.random_range(0..model.bytes.len());
                        model.bytes.values().nth(k).expect("in range").clone()
                    } else {
                        let len = rng.random_range(0..=2000);
                        (0..len).map(|_| rng.random()).collect()
                    };
                    Op::Put(data)
                }
                6..=8 => {
                    let live: Vec<ChunkId> = model
                        .state
                        .iter()
                        .filter(|(_, s)| **s != State::Absent)
                        .map(|(id, _)| *id)
                        .collect();
                    if live.is_empty() {
                        continue;
                    }
                    Op::Delete(live[rng.random_range(0..live.len())])
                }
                _ => Op::Compact,
            };
            let id = match &op {
                Op::Put(d) => Some(ChunkId::of(d)),
                Op::Delete(id) => Some(*id),
                Op::Compact => None,
            };
            if let Some(id) = id {
                if taken.contains(&id) {
                    continue;
                }
                taken.push(id);
            }
            ops.push(op);
        }
        let results: Vec<(Option<ChunkId>, Option<bool>, u64)> = std::thread::scope(|s| {
            let handles: Vec<_> = ops
                .iter()
                .map(|op| {
                    s.spawn(move || match op {
                        Op::Put(d) => {
                            // Both ways in: a borrowed slice and a handed-over buffer.
                            let r = if d.len() % 2 == 0 {
                                store.put(d)
                            } else {
                                store.put_bytes(d.clone().into())
                            };
                            if let Ok(id) = &r {
                                assert_eq!(*id, ChunkId::of(d));
                            }
                            (Some(ChunkId::of(d)), Some(true), u64::from(r.is_ok()))
                        }
                        Op::Delete(id) => {
                            (Some(*id), Some(false), u64::from(store.delete(id).is_ok()))
                        }
                        Op::Compact => (
                            None,
                            None,
                            store.compact().map_or(0, |r| r.volumes.len() as u64),
                        ),
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (op, (id, is_put, ok)) in ops.iter().zip(results) {
            if let Op::Put(d) = op {
                model
                    .bytes
                    .entry(ChunkId::of(d))
                    .or_insert_with(|| d.clone());
            }
            let (Some(id), Some(is_put)) = (id, is_put) else {
                model.compactions += ok;
                continue;
            };
            let state = match (is_put, ok == 1) {
                (true, true) => {
                    model.acked_puts += 1;
                    State::Present
                }
                (false, true) => {
                    model.acked_deletes += 1;
                    State::Absent
                }
                (_, false) => State::Unknown,
            };
            model.state.insert(id, state);
        }
    }
}

fn run_seed(seed: u64, model: &mut Model) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = SimFs::new(seed);
    let mut opts = options(&mut rng);
    let mut store = ChunkStore::open_in(Arc::new(fs.boot()), DIR, opts.clone()).unwrap();
    for _life in 0..LIVES_PER_SEED {
        fs.arm_cut_after(rng.random_range(1..=150));
        live(&store, &fs, model, &mut rng);
        if fs.cut_armed() {
            fs.power_cut();
        }
        let cut = fs.last_cut();
        model.writes[0] += cut.writes_kept;
        model.writes[1] += cut.writes_dropped;
        model.writes[2] += cut.writes_torn;
        // The process died with the machine: its threads see only failing calls.
        drop(store);
        // Now and then the store comes back with another number of lanes: a new generation
        // of volumes above the old ones, whose last volumes may hold torn tails too.
        if rng.random_bool(0.25) {
            let other = rng.random_range(1..=3);
            opts.active_volumes = if other >= opts.active_volumes {
                other + 1
            } else {
                other
            };
            model.lane_changes += 1;
        }
        // Now and then the power fails again while the store opens: inside recovery's own
        // cuts, hints, new generations and removals. Nothing was acknowledged meanwhile.
        if rng.random_bool(0.3) {
            fs.arm_cut_after(rng.random_range(1..=30));
            let attempt = ChunkStore::open_in(Arc::new(fs.boot()), DIR, opts.clone());
            // Fired inside the open, or (the open needed fewer calls) now, after it.
            let fired_inside = !fs.cut_armed();
            if !fired_inside {
                fs.power_cut();
            }
            drop(attempt);
            model.cuts_in_recovery += u64::from(fired_inside);
        }
        store = check_after_restart(&fs, &opts, model, seed);
    }
}

#[test]
fn acknowledged_chunks_survive_power_cuts_and_deleted_ones_stay_deleted() {
    let cuts: u64 = std::env::var("SPINDLE_CHUNK_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let first: u64 = std::env::var("SPINDLE_CHUNK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let seeds = cuts.div_ceil(LIVES_PER_SEED);
    let mut total = Model::default();
    let mut acked = 0;
    for seed in first..first + seeds {
        let mut model = Model::default();
        run_seed(seed, &mut model);
        if (seed - first + 1).is_multiple_of(20) {
            eprintln!("{} of {seeds} seeds done", seed - first + 1);
        }
        acked += model.state.len() as u64;
        total.acked_puts += model.acked_puts;
        total.acked_deletes += model.acked_deletes;
        total.unknown_present += model.unknown_present;
        total.unknown_absent += model.unknown_absent;
        total.torn_tails += model.torn_tails;
        total.lane_changes += model.lane_changes;
        total.cuts_in_recovery += model.cuts_in_recovery;
        total.compactions += model.compactions;
        for (t, m) in total.writes.iter_mut().zip(model.writes) {
            *t += m;
        }
    }
    println!(
        "chunk power cuts: {} over {seeds} seeds; acknowledged puts {}, deletes {}, all held; \
         distinct chunks {acked}; unknown-outcome ops found done {} / not done {}; \
         volumes rewritten by explicit compactions {}; unsynced writes at the cuts: {} kept, {} dropped, \
         {} torn; torn tails cut: {}; reopens with another number of lanes: {}; \
         power cuts inside an open: {}",
        seeds * LIVES_PER_SEED,
        total.acked_puts,
        total.acked_deletes,
        total.unknown_present,
        total.unknown_absent,
        total.compactions,
        total.writes[0],
        total.writes[1],
        total.writes[2],
        total.torn_tails,
        total.lane_changes,
        total.cuts_in_recovery,
    );
    assert!(total.acked_puts > 0 && total.writes.iter().sum::<u64>() > 0);
}
