//! Seeded power cuts on a simulated disk (`SimFs`): random transactions with conditions,
//! concurrent appends in flight and prefix truncation run until the power fails at a random
//! file-system call; after each restart every acknowledged transaction is present with
//! identical bytes at its index, no transaction is partial, indexes are dense, unacknowledged
//! transactions are wholly present or absent, the version table agrees with a replay of what
//! survived, and the first retained index is never above what truncation was asked for.
//!
//! `SPINDLE_FAULT_CUTS` sets the number of cuts (default: a short run for CI);
//! `SPINDLE_FAULT_SEED` the first seed.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spindle_core::{ItemKey, Record, Transaction};
use spindle_log::fs::Fs;
use spindle_log::sim_fs::SimFs;
use spindle_log::{AppendError, FileLog, Index, LogConfig, ReadError};

const KEYS: usize = 12;
const DIR: &str = "/sim/log";

/// What the log must hold: every record known to be in it, and each key's version.
#[derive(Default)]
struct Model {
    records: BTreeMap<u64, Record>,
    versions: HashMap<ItemKey, u64>,
    last: u64,
    /// The highest `below` truncation was asked for.
    truncate_asked: u64,
    acknowledged: u64,
    survived_unknown: u64,
    lost_unknown: u64,
    /// Reopens that cut a torn tail.
    torn_tails: u64,
    /// Unsynced writes the cuts kept whole, dropped and tore.
    writes: [u64; 3],
}

impl Model {
    fn version(&self, key: &ItemKey) -> Index {
        Index::new(self.versions.get(key).copied().unwrap_or(0))
    }

    /// Apply a transaction whose commit index is `commit`.
    fn apply(&mut self, txn: &Transaction, commit: u64) {
        let n = txn.writes.len() as u64;
        assert_eq!(commit, self.last + n, "indexes are dense in commit order");
        for (i, w) in txn.writes.iter().enumerate() {
            let index = self.last + 1 + i as u64;
            self.records.insert(
                index,
                Record {
                    index: Index::new(index),
                    commit: i as u64 + 1 == n,
                    key: w.key.clone(),
                    value: w.value.clone(),
                },
            );
            self.versions.insert(w.key.clone(), index);
        }
        self.last = commit;
    }
}

fn key(i: usize) -> ItemKey {
    node(&format!("k{i}"))
}

fn config(rng: &mut StdRng) -> LogConfig {
    LogConfig {
        segment_bytes: 4096 * rng.random_range(1..=4u64),
        unsynced_bytes_max: if rng.random_bool(0.5) { 4096 } else { 1 << 20 },
        ..LogConfig::default()
    }
}

/// A group of transactions with disjoint write sets; conditions name only keys the group
/// does not write, so each outcome is the same in whatever order the writer takes them.
fn group(rng: &mut StdRng, model: &Model, serial: &mut u64) -> Vec<(Transaction, bool)> {
    let mut pool: Vec<usize> = (0..KEYS).collect();
    for i in (1..pool.len()).rev() {
        pool.swap(i, rng.random_range(0..=i));
    }
    let n = rng.random_range(1..=4usize);
    let (written, rest) = pool.split_at(n * 2);
    let mut out = Vec::new();
    for t in 0..n {
        let mut txn = Transaction::new();
        for &k in &written[t * 2..t * 2 + rng.random_range(1..=2)] {
            *serial += 1;
            txn = txn.write(key(k), obj(*serial));
        }
        let mut ok = true;
        let first = rng.random_range(0..rest.len());
        for c in 0..rng.random_range(0..=2) {
            let k = key(rest[(first + c) % rest.len()]);
            let actual = model.version(&k);
            if rng.random_bool(0.15) {
                ok = false;
                txn = txn.condition(k, Index::new(actual.get() + 1));
            } else {
                txn = txn.condition(k, actual);
            }
        }
        out.push((txn, ok));
    }
    out
}

/// Run one life of the log until its power is cut; returns the transactions whose outcome
/// is unknown.
fn live(
    rng: &mut StdRng,
    log: &FileLog,
    sim: &SimFs,
    model: &mut Model,
    serial: &mut u64,
) -> Vec<Transaction> {
    let cuts_before = sim.cuts();
    sim.arm_cut_after(rng.random_range(1..=120));
    for _ in 0..200 {
        if sim.cuts() > cuts_before {
            break;
        }
        if rng.random_bool(0.1) {
            let below = rng.random_range(1..=model.last + 1);
            model.truncate_asked = model.truncate_asked.max(below);
            match futures::executor::block_on(log.truncate_prefix(Index::new(below))) {
                Ok(first) => assert!(first.get() <= model.truncate_asked.max(1)),
                Err(_) => break,
            }
            continue;
        }
        let txns = group(rng, model, serial);
        let results = futures::executor::block_on(futures::future::join_all(
            txns.iter().map(|(t, _)| log.append(t)),
        ));
        let mut unknown = Vec::new();
        let mut acked: Vec<(u64, &Transaction)> = Vec::new();
        for ((txn, ok), result) in txns.iter().zip(results) {
            match result {
                Ok(commit) => {
                    assert!(ok, "a condition that does not hold was accepted: {txn:?}");
                    acked.push((commit.get(), txn));
                }
                Err(AppendError::Conflict { failed }) => {
                    assert!(!ok, "a condition that holds was refused: {failed:?}");
                    for f in failed {
                        assert_eq!(f.actual, model.version(&f.key), "version table");
                    }
                }
                Err(AppendError::Failed { .. }) => unknown.push(txn.clone()),
                // A new segment that could not be made (here: the cut's dead handles):
                // refused with nothing written, so `check` fails if it ever shows up.
                Err(AppendError::NotWritten { .. }) => {}
                Err(e) => panic!("unexpected append error {e}"),
            }
        }
        acked.sort_by_key(|a| a.0);
        for (commit, txn) in acked {
            model.apply(txn, commit);
            model.acknowledged += 1;
        }
        if !unknown.is_empty() {
            return unknown;
        }
    }
    if sim.cuts() == cuts_before {
        sim.power_cut();
    }
    Vec::new()
}

/// After a restart: check every invariant and fold the survivors into the model.
fn check(log: &FileLog, model: &mut Model, unknown: &[Transaction], seed: u64) {
    let durable = log.durable_index().get();
    let first = log.first_index().get();
    assert!(
        durable >= model.last,
        "seed {seed}: acknowledged records lost: durable {durable} < {}",
        model.last
    );
    assert!(
        first <= model.truncate_asked.max(1),
        "seed {seed}: first retained {first} above what truncation asked ({})",
        model.truncate_asked
    );
    assert!(
        first <= model.last + 1,
        "seed {seed}: retained nothing known"
    );
    if first > 1 {
        assert!(matches!(
            log.read(Index::new(first - 1), 1),
            Err(ReadError::Truncated { .. })
        ));
    }
    let records = log.read(Index::new(first), usize::MAX).unwrap();
    assert_eq!(
        records.len() as u64,
        durable + 1 - first,
        "seed {seed}: dense"
    );
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.index.get(), first + i as u64, "seed {seed}: dense");
    }
    if let Some(last) = records.last() {
        assert!(last.commit, "seed {seed}: a partial transaction is visible");
    }
    for r in records.iter().filter(|r| r.index.get() <= model.last) {
        assert_eq!(
            Some(r),
            model.records.get(&r.index.get()),
            "seed {seed}: acknowledged record changed"
        );
    }
    // Past the acknowledged end: whole unknown transactions, each at most once.
    let acked_end = model.last;
    let mut beyond = records.iter().filter(|r| r.index.get() > acked_end);
    let mut used = vec![false; unknown.len()];
    let mut survived = 0;
    while let Some(r) = beyond.next() {
        let mut txn = vec![r];
        while !txn.last().unwrap().commit {
            txn.push(beyond.next().expect("commit record"));
        }
        let found = (0..unknown.len())
            .find(|&u| {
                !used[u]
                    && unknown[u].writes.len() == txn.len()
                    && unknown[u]
                        .writes
                        .iter()
                        .zip(&txn)
                        .all(|(w, r)| w.key == r.key && w.value == r.value)
            })
            .unwrap_or_else(|| panic!("seed {seed}: records {txn:?} were never appended"));
        used[found] = true;
        let found = &unknown[found];
        let commit = txn.last().unwrap().index.get();
        model.apply(found, commit);
        survived += 1;
    }
    model.survived_unknown += survived;
    model.lost_unknown += unknown.len() as u64 - survived;
    // The version table agrees with the replay: a transaction conditioned on every key's
    // modelled version must be accepted.
    let mut probe = Transaction::new().write(node("probe"), obj(durable));
    for k in 0..KEYS {
        probe = probe.condition(key(k), model.version(&key(k)));
    }
    let commit = log
        .append_blocking(&probe)
        .unwrap_or_else(|e| panic!("seed {seed}: version table disagrees with replay: {e}"));
    model.apply(&probe, commit.get());
}

/// One seed: `cuts` power cuts of one simulated disk.
fn run_seed(seed: u64, cuts: u64) -> Model {
    let mut rng = StdRng::seed_from_u64(seed);
    let sim = SimFs::new(seed);
    let config = LogConfig {
        // From the seed, not the generator, so every other draw of a seed stays as it was.
        writer_syncs_when_idle: seed.is_multiple_of(2),
        ..config(&mut rng)
    };
    let mut model = Model::default();
    let mut serial = 0;
    let mut unknown = Vec::new();
    for _ in 0..cuts {
        let fs: Arc<dyn Fs> = Arc::new(sim.boot());
        let log = FileLog::open_in(fs, Path::new(DIR), config.clone())
            .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
        model.torn_tails += u64::from(log.open_report().torn_tail.is_some());
        check(&log, &mut model, &unknown, seed);
        unknown = live(&mut rng, &log, &sim, &mut model, &mut serial);
        drop(log);
        let cut = sim.last_cut();
        model.writes[0] += cut.writes_kept;
        model.writes[1] += cut.writes_dropped;
        model.writes[2] += cut.writes_torn;
    }
    model
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn acknowledged_transactions_survive_seeded_power_cuts() {
    let total = env_u64("SPINDLE_FAULT_CUTS", 300);
    let first_seed = env_u64("SPINDLE_FAULT_SEED", 1);
    let per_seed = 20;
    let seeds = total.div_ceil(per_seed);
    let (mut acked, mut survived, mut lost, mut cuts, mut torn) = (0, 0, 0, 0, 0);
    let mut writes = [0u64; 3];
    for seed in first_seed..first_seed + seeds {
        let model = run_seed(seed, per_seed);
        acked += model.acknowledged;
        survived += model.survived_unknown;
        lost += model.lost_unknown;
        torn += model.torn_tails;
        for (w, m) in writes.iter_mut().zip(model.writes) {
            *w += m;
        }
        cuts += per_seed;
    }
    println!(
        "power cuts: {cuts} over {seeds} seeds; acknowledged transactions {acked}, all \
         present; unknown-outcome transactions {survived} survived whole, {lost} absent; \
         unsynced writes at the cuts: {} kept, {} dropped, {} torn; reopens that cut a \
         torn tail: {torn}",
        writes[0], writes[1], writes[2]
    );
    assert!(acked > 0);
}
