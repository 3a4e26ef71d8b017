//! One seed drives a whole node through simulated power cuts: transactions with right and
//! deliberately wrong conditions, deletes, chunk puts and truncation runs, several at once,
//! until the power fails at a random file-system call of the log or the chunk store (both on
//! `SimFs`, which loses, keeps or tears every unsynced write); the Disk Views are cut at their
//! sync points (RocksDB checkpoints taken at every `persist`/`flush`, as in
//! `power_cut_truncation.rs`). After each restart, with the Memory View booted again from the
//! Disk Views, it checks the invariants of DESIGN.md §12 that apply: every acknowledged
//! append present with its bytes at its index (1); the log ends on a commit and every record
//! past what was acknowledged belongs to one whole unanswered transaction (2); indexes dense
//! from the first retained one (3); every Disk View and the booted Memory View equal a
//! replay of the log (4, 5); truncation never went past what the views had persisted, so
//! the node opens and the replay is complete (7); every acknowledged chunk reads back with
//! its bytes and every id is the BLAKE3 of what is read (8). Conditions: a right one is
//! never refused, a wrong one never accepted, across restarts and truncation.
//!
//! `SPINDLE_NODE_CUTS` sets the number of cuts (default: a short run for CI);
//! `SPINDLE_NODE_SEED` the first seed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spindle_chunk::ChunkId;
use spindle_core::{Index, ItemKey, Record, Transaction, Value};
use spindle_log::sim_fs::SimFs;
use spindle_log::AppendError;
use spindle_server::{Node, ServerConfig};
use spindle_view::disk::SyncObserver;
use spindle_view::Freshness;

const LIVES_PER_SEED: u64 = 10;
const KEYS: u64 = 24;
const WAIT: Duration = Duration::from_secs(60);

fn config(dir: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: dir.to_owned(),
        log_segment_bytes: 8 << 10,
        disk_partitions: 2,
        memory_view: true,
        truncate: true,
        ..ServerConfig::default()
    }
}

fn key(k: u64) -> ItemKey {
    ItemKey::node(format!("n{k}")).unwrap()
}

/// A transaction sent without an answer: its writes, to find it after the restart.
#[derive(Clone, Debug)]
struct Sent {
    writes: Vec<(ItemKey, Value)>,
}

#[derive(Default)]
struct Model {
    /// Every record known to be in the log (acknowledged, or found after a restart).
    history: BTreeMap<u64, Record>,
    /// Transactions without an answer, not yet found or ruled out.
    unknown: Vec<Sent>,
    chunks: HashMap<ChunkId, Vec<u8>>,
    /// Chunks acknowledged, or found after a restart.
    chunks_held: HashSet<ChunkId>,
    chunks_unknown: HashSet<ChunkId>,
    next_op: u64,
    // Counters for the report.
    acked_txns: u64,
    wrong_refused: u64,
    unknown_landed: u64,
    unknown_lost: u64,
    acked_chunks: u64,
    truncations: u64,
    /// The highest first retained index seen, less one.
    truncated_records: u64,
    checks: u64,
}

impl Model {
    fn last(&self) -> u64 {
        self.history.keys().next_back().copied().unwrap_or(0)
    }

    /// Replay of everything known: each key's latest (index, value).
    fn replay(&self) -> BTreeMap<ItemKey, (Index, Value)> {
        let mut out = BTreeMap::new();
        for r in self.history.values() {
            out.insert(r.key.clone(), (r.index, r.value.clone()));
        }
        out
    }

    fn version(&self, k: &ItemKey) -> Index {
        self.history
            .values()
            .rev()
            .find(|r| &r.key == k)
            .map_or(Index::ZERO, |r| r.index)
    }

    fn insert(&mut self, r: Record, seed: u64) {
        if let Some(old) = self.history.get(&r.index.get()) {
            assert_eq!(old, &r, "seed {seed}: index {} changed", r.index);
        }
        self.history.insert(r.index.get(), r);
    }

    fn acked(&mut self, writes: &[(ItemKey, Value)], commit: Index, seed: u64) {
        let n = writes.len() as u64;
        let first = commit.get() + 1 - n;
        for (i, (k, v)) in writes.iter().enumerate() {
            self.insert(
                Record {
                    index: Index::new(first + i as u64),
                    commit: i as u64 + 1 == n,
                    key: k.clone(),
                    value: v.clone(),
                },
                seed,
            );
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Snapshot each Disk View into `snaps/<dir name>` at its sync points while the power is on.
fn snapshot_at_syncs(
    node: &Node,
    snaps: &Path,
    fs: &SimFs,
    taken: &Arc<Mutex<BTreeMap<String, Index>>>,
) {
    let cuts = fs.cuts();
    for d in &node.disks {
        let name = d.view.dir().file_name().unwrap().to_owned();
        let target = snaps.join(&name);
        let staging = snaps.join(format!("{}.new", name.to_string_lossy()));
        let (taken, fs, id) = (taken.clone(), fs.clone(), d.id.clone());
        // Truncation runs may sync a view from two threads at once: one snapshot at a time.
        let one = Mutex::new(());
        let observer: SyncObserver = Arc::new(move |view, persisted| {
            let _one = one.lock();
            if fs.cuts() != cuts {
                return;
            }
            let _ = std::fs::remove_dir_all(&staging);
            view.checkpoint(&staging).unwrap();
            let _ = std::fs::remove_dir_all(&target);
            std::fs::rename(&staging, &target).unwrap();
            let mut taken = taken.lock();
            let at = taken.entry(id.clone()).or_insert(persisted);
            *at = (*at).max(persisted);
        });
        d.view.observe_syncs(Some(observer));
    }
}

/// After a restart: the log, the views, the Memory View and the chunks against the model.
fn check_restart(node: &Node, rt: &tokio::runtime::Runtime, model: &mut Model, seed: u64) {
    let log = &node.log;
    let durable = log.durable_index();
    let acked_last = model.last();
    assert!(
        durable.get() >= acked_last,
        "seed {seed}: durable {durable} below the last known record {acked_last}"
    );
    // Read the retained log: dense, ends on a commit, equal where known.
    let first = log.first_index();
    model.truncated_records = model.truncated_records.max(first.get() - 1);
    let mut found = Vec::new();
    let mut at = first;
    while at <= durable {
        let batch = log.read(at, 1024).unwrap();
        assert!(
            !batch.is_empty(),
            "seed {seed}: read at {at} returned nothing"
        );
        for r in batch {
            assert_eq!(r.index, at, "seed {seed}: indexes not dense");
            at = at.next();
            found.push(r);
        }
    }
    if let Some(r) = found.last() {
        assert!(r.commit, "seed {seed}: the log ends inside a transaction");
    }
    // Records beyond what is known: whole unanswered transactions, each at most once.
    let mut txn: Vec<Record> = Vec::new();
    for r in found {
        if r.index.get() <= acked_last {
            let known = model.history.get(&r.index.get());
            assert_eq!(known, Some(&r), "seed {seed}: record {} differs", r.index);
            continue;
        }
        let commit = r.commit;
        txn.push(r);
        if !commit {
            continue;
        }
        let writes: Vec<(ItemKey, Value)> = txn
            .iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        let pos = model
            .unknown
            .iter()
            .position(|s| s.writes == writes)
            .unwrap_or_else(|| panic!("seed {seed}: records {:?} were never sent", txn));
        model.unknown.remove(pos);
        model.unknown_landed += 1;
        for r in txn.drain(..) {
            model.insert(r, seed);
        }
    }
    model.unknown_lost += model.unknown.len() as u64;
    model.unknown.clear();
    // The replay is complete: every index up to the durable one is known.
    assert_eq!(
        model.history.len() as u64,
        durable.get(),
        "seed {seed}: records below the first retained index {first} were never seen: \
         truncation passed what survived"
    );
    // Views equal the replay.
    let replay = model.replay();
    for d in &node.disks {
        d.view.wait_applied(durable, WAIT).unwrap();
    }
    for k in 0..KEYS {
        let key = key(k);
        let want = replay.get(&key);
        let got = node
            .disk_for(&key)
            .unwrap()
            .view
            .as_of(&key, durable, Freshness::Any)
            .unwrap()
            .map(|v| (v.index, v.value));
        assert_eq!(
            got.as_ref(),
            want,
            "seed {seed}: Disk View differs from the replay for {key:?}"
        );
        model.checks += 1;
    }
    // The Memory View, booted from the Disk Views and tailed, equals the replay.
    rt.block_on(node.memory.wait_applied(durable, WAIT))
        .unwrap();
    // The boot publishes its applied index just before its view; at index 0 the wait above
    // does not wait for the boot at all.
    let deadline = std::time::Instant::now() + WAIT;
    let memory = loop {
        if let Some(m) = node.memory.get() {
            break m.clone();
        }
        assert!(
            node.memory.stall.reason().is_none() && std::time::Instant::now() < deadline,
            "seed {seed}: the Memory View did not boot: {:?}",
            node.memory.stall.reason()
        );
        std::thread::yield_now();
    };
    for k in 0..KEYS {
        let key = key(k);
        let want = replay
            .get(&key)
            .filter(|(_, v)| !v.is_tombstone())
            .map(|(i, v)| (*i, v.as_json().unwrap().to_owned()));
        assert_eq!(
            memory.get(&key),
            want,
            "seed {seed}: Memory View differs for {key:?}"
        );
        model.checks += 1;
    }
    // Chunks: acknowledged ones held with their bytes; unanswered ones resolved.
    for id in model.chunks_unknown.drain() {
        if node.chunks.has(&id) {
            model.chunks_held.insert(id);
        }
    }
    for id in &model.chunks_held {
        let got = node.chunks.get(id).unwrap();
        assert_eq!(
            got.as_ref(),
            Some(&model.chunks[id]),
            "seed {seed}: chunk {id} lost or changed"
        );
        model.checks += 1;
    }
    for id in node.chunks.keys() {
        let bytes = node.chunks.get_with(&id, false).unwrap().expect("listed");
        assert_eq!(
            ChunkId::of(&bytes),
            id,
            "seed {seed}: id is not BLAKE3 of its bytes"
        );
        assert!(
            model.chunks.contains_key(&id),
            "seed {seed}: chunk {id} never put"
        );
    }
}

enum Op {
    Txn {
        sent: Sent,
        conditions: Vec<(ItemKey, Index)>,
        right: bool,
    },
    Chunk(Vec<u8>),
    Truncate,
}

enum Outcome {
    Txn(Result<Index, AppendError>),
    Chunk(bool),
    Truncate,
}

fn pick_op(model: &mut Model, rng: &mut StdRng, used: &mut HashSet<u64>) -> Option<Op> {
    match rng.random_range(0..10) {
        0..=5 => {
            let n = rng.random_range(1..=3);
            let mut writes = Vec::new();
            let mut conditions = Vec::new();
            let right = rng.random_range(0..8) != 0;
            for _ in 0..n {
                let k = rng.random_range(0..KEYS);
                if !used.insert(k) {
                    continue;
                }
                model.next_op += 1;
                let value = if rng.random_range(0..5) == 0 {
                    Value::TOMBSTONE
                } else {
                    let pad = "p".repeat(rng.random_range(0..300));
                    Value::json(format!("{{\"op\":{},\"pad\":\"{pad}\"}}", model.next_op)).unwrap()
                };
                if rng.random_bool(0.6) {
                    let v = model.version(&key(k));
                    conditions.push((key(k), if right { v } else { v.plus(7) }));
                }
                writes.push((key(k), value));
            }
            if writes.is_empty() {
                return None;
            }
            let right = right || conditions.is_empty();
            Some(Op::Txn {
                sent: Sent { writes },
                conditions,
                right,
            })
        }
        6..=8 => {
            let len = rng.random_range(0..=8192);
            Some(Op::Chunk((0..len).map(|_| rng.random()).collect()))
        }
        _ => Some(Op::Truncate),
    }
}

fn run(node: &Node, op: &Op, rt: &tokio::runtime::Runtime) -> Outcome {
    match op {
        Op::Txn {
            sent, conditions, ..
        } => {
            let mut txn = Transaction::new();
            for (k, v) in &sent.writes {
                txn = txn.write(k.clone(), v.clone());
            }
            for (k, i) in conditions {
                txn = txn.condition(k.clone(), *i);
            }
            Outcome::Txn(node.log.append_blocking(&txn))
        }
        Op::Chunk(d) => Outcome::Chunk(node.chunks.put(d).is_ok()),
        Op::Truncate => {
            rt.block_on(node.truncate_once());
            Outcome::Truncate
        }
    }
}

/// One life: groups of concurrent operations until the armed cut fires.
fn live(
    node: &Node,
    fs: &SimFs,
    rt: &tokio::runtime::Runtime,
    taken: &Mutex<BTreeMap<String, Index>>,
    model: &mut Model,
    rng: &mut StdRng,
    seed: u64,
) {
    for _ in 0..120 {
        if !fs.cut_armed() {
            return;
        }
        let mut used = HashSet::new();
        let ops: Vec<Op> = (0..rng.random_range(1..=3))
            .filter_map(|_| pick_op(model, rng, &mut used))
            .collect();
        let outcomes: Vec<Outcome> = std::thread::scope(|s| {
            let handles: Vec<_> = ops.iter().map(|op| s.spawn(|| run(node, op, rt))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (op, outcome) in ops.into_iter().zip(outcomes) {
            match (op, outcome) {
                (Op::Txn { sent, right, .. }, Outcome::Txn(result)) => match result {
                    Ok(commit) => {
                        assert!(right, "seed {seed}: a wrong condition was accepted");
                        model.acked(&sent.writes, commit, seed);
                        model.acked_txns += 1;
                    }
                    Err(AppendError::Conflict { failed }) => {
                        assert!(
                            !right,
                            "seed {seed}: a right condition was refused: {failed:?}"
                        );
                        model.wrong_refused += 1;
                    }
                    Err(_) => model.unknown.push(sent),
                },
                (Op::Chunk(d), Outcome::Chunk(ok)) => {
                    let id = ChunkId::of(&d);
                    model.chunks.entry(id).or_insert(d);
                    if ok {
                        model.chunks_held.insert(id);
                        model.acked_chunks += 1;
                    } else if !model.chunks_held.contains(&id) {
                        model.chunks_unknown.insert(id);
                    }
                }
                (Op::Truncate, Outcome::Truncate) => {
                    if fs.cut_armed() && node.truncation.lock().error.is_none() {
                        model.truncations += 1;
                    }
                    // Truncation never passes what every view has persisted.
                    let first = node.log.first_index();
                    for d in &node.disks {
                        let persisted = taken.lock().get(&d.id).copied().unwrap_or(Index::ZERO);
                        assert!(
                            persisted.next() >= first,
                            "seed {seed}: {} persisted {persisted}, log truncated below {first}",
                            d.id
                        );
                    }
                }
                _ => unreachable!("outcomes follow their ops"),
            }
        }
    }
}

fn run_seed(seed: u64, model: &mut Model, rt: &tokio::runtime::Runtime) {
    let mut rng = StdRng::seed_from_u64(seed);
    let fs = SimFs::new(seed);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let snaps = work.path().join("snaps");
    std::fs::create_dir_all(&snaps).unwrap();
    let taken = Arc::new(Mutex::new(BTreeMap::new()));
    for life in 0..=LIVES_PER_SEED {
        let node = Node::open_on(config(&data), Arc::new(fs.boot()))
            .unwrap_or_else(|e| panic!("seed {seed} life {life}: the node must open: {e}"));
        check_restart(&node, rt, model, seed);
        if life == LIVES_PER_SEED {
            node.shutdown();
            break;
        }
        snapshot_at_syncs(&node, &snaps, &fs, &taken);
        fs.arm_cut_after(rng.random_range(1..=250));
        live(&node, &fs, rt, &taken, model, &mut rng, seed);
        if fs.cut_armed() {
            fs.power_cut();
        }
        for d in &node.disks {
            d.view.observe_syncs(None);
        }
        node.shutdown();
        drop(node);
        // What the power cut left of the Disk Views: their last sync points.
        let views = data.join("views");
        std::fs::remove_dir_all(&views).unwrap();
        std::fs::create_dir_all(&views).unwrap();
        for entry in std::fs::read_dir(&snaps).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if !name.to_string_lossy().ends_with(".new") {
                copy_dir(&entry.path(), &views.join(name));
            }
        }
    }
}

#[test]
fn a_seeded_node_survives_power_cuts_with_every_invariant() {
    let cuts: u64 = std::env::var("SPINDLE_NODE_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let first: u64 = std::env::var("SPINDLE_NODE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let seeds = cuts.div_ceil(LIVES_PER_SEED);
    let mut totals = [0u64; 9];
    for seed in first..first + seeds {
        let mut model = Model::default();
        run_seed(seed, &mut model, &rt);
        if (seed - first + 1).is_multiple_of(20) {
            eprintln!("{} of {seeds} seeds done", seed - first + 1);
        }
        for (t, v) in totals.iter_mut().zip([
            model.acked_txns,
            model.wrong_refused,
            model.unknown_landed,
            model.unknown_lost,
            model.acked_chunks,
            model.truncations,
            model.history.len() as u64,
            model.checks,
            model.truncated_records,
        ]) {
            *t += v;
        }
    }
    println!(
        "node power cuts: {} over {seeds} seeds; acknowledged transactions {}, all present; \
         wrong conditions refused {}; unanswered transactions landed whole {} / absent {}; \
         acknowledged chunks {}, all held; truncation runs {}, records truncated {}; log \
         records replayed {}; view and chunk checks {}",
        seeds * LIVES_PER_SEED,
        totals[0],
        totals[1],
        totals[2],
        totals[3],
        totals[4],
        totals[5],
        totals[8],
        totals[6],
        totals[7]
    );
    assert!(
        totals[0] > 0 && totals[8] > 0,
        "the run must acknowledge and truncate to mean anything"
    );
}
