//! `spindle bench chunks`: large immutable blobs put by concurrent writers, then read back in
//! random order three times: cold (pages dropped with posix_fadvise), again, and warm (the
//! third read: Spindle reads a large uncached chunk past the page cache the first time and
//! admits it at the second, so `get-again` is a second read from the disk for it and
//! `get-warm` its first from the cache), then listed and reopened,
//! through Spindle's chunk store and its peers in one run on the same machine:
//!
//! - `spindle`: `spindle_chunk::ChunkStore` with default options (one volume appended to at
//!   a time);
//! - `spindle-lanes`: the same with `LANES` volumes appended to at once, each group commit
//!   syncing them at the same time, to show what lanes are worth on the machine at hand;
//! - `file-per-chunk`: one file per chunk, written and fdatasync'ed (no directory fsync, which
//!   flatters it: a crash may lose the name of a file whose bytes were synced);
//! - `sqlite-blob`: SQLite, WAL, `synchronous=FULL`, one row per chunk, one connection per
//!   writer;
//! - `device`: the limits: Spindle's pattern of I/O without its work — one thread appending
//!   in batches to files of Spindle's volume size, no more chunks unsynced than there are
//!   writers, and as many syncers as Spindle has, each syncing everything written so far —
//!   and random `O_DIRECT` reads of those files.
//!
//! A round runs system by system: each one puts, reads back (`get-cold`, `get-again`,
//! `get-warm`), lists (`keys`) and reopens (`open`) its store, which is then deleted, and the
//! deletion synced, before the next one starts; before the first round the bench writes,
//! syncs and deletes one store's worth of bytes. So every system puts right after the
//! deletion of a store of the same size, with no other system's store on the disk: on the
//! virtual disk measured here, a put made while another system's store was still there ran at
//! a third to a quarter of the rate of one made right after a deletion. Before each system
//! the bench also syncs every file system and waits `--settle-ms` (default 5 s).
//! `--rounds` repeats it with fresh stores and the systems' order rotated each round, and the
//! targets are judged on the median of the per-round ratios. `device` syncs at the group
//! size Spindle reached in the same round, or, when it puts before Spindle, in the round
//! before (`--device-group` in the first round).
//!
//! Every system but `device` checks BLAKE3 of what it reads (unless `--verify false`), so no
//! system wins by skipping the work a content-addressed store must do. Files go under `--dir`
//! (default: the current directory), which should be on the disk being measured, not tmpfs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use spindle_chunk::{format, ChunkId, ChunkStore, Options};

use crate::report::{
    per_round, print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary,
    Target,
};

/// Options of `spindle bench chunks`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Chunks to put and read back.
    #[arg(long, default_value_t = 2_000)]
    pub chunks: usize,
    /// Bytes per chunk.
    #[arg(long, default_value_t = 1 << 20)]
    pub size: usize,
    /// Concurrent writers (and readers).
    #[arg(long, default_value_t = 16)]
    pub writers: usize,
    /// Systems to measure, comma-separated (spindle, spindle-lanes, file-per-chunk,
    /// sqlite-blob, device).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spindle,file-per-chunk,sqlite-blob,device"
    )]
    pub systems: Vec<String>,
    /// Directory under which a temporary directory is made for the stores (use a real disk).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Check BLAKE3 of every chunk read (all systems but `device`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub verify: bool,
    /// Chunks per fdatasync for `device` until `spindle` has put once in the run (after that:
    /// Spindle's chunks per volume sync in the latest round it ran).
    #[arg(long, default_value_t = 5)]
    pub device_group: usize,
    /// Milliseconds to wait, after syncing every file system, before each system's puts
    /// (after the previous system's store was deleted): on a virtual disk the host may go on
    /// writing back what the previous system synced.
    #[arg(long, default_value_t = 5_000)]
    pub settle_ms: u64,
    /// Rounds: every system runs every phase once per round, in an order rotated each round;
    /// targets are judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print one JSON object per (round, system, phase), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
struct Row {
    system: String,
    phase: &'static str,
    chunks: usize,
    bytes: u64,
    seconds: f64,
    mb_per_s: f64,
    p50_us: u64,
    p99_us: u64,
}

const SYSTEMS: [&str; 5] = [
    "spindle",
    "spindle-lanes",
    "file-per-chunk",
    "sqlite-blob",
    "device",
];

pub fn run(args: &Args) -> anyhow::Result<()> {
    ensure!(
        args.chunks > 0 && args.writers > 0,
        "--chunks and --writers must be positive"
    );
    ensure!(
        args.size >= 8 && args.size <= 16 << 20,
        "--size must be 8 bytes to 16 MiB"
    );
    for s in &args.systems {
        ensure!(
            SYSTEMS.contains(&s.as_str()),
            "unknown system {s:?} (known: {SYSTEMS:?})"
        );
    }
    ensure!(args.rounds > 0, "--rounds must be > 0");
    fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let data = ChunkData::new(args.size);
    let order = shuffled(args.chunks, 0x5eed);
    let names: Vec<&'static str> = SYSTEMS
        .into_iter()
        .filter(|s| args.systems.iter().any(|a| a == s))
        .collect();
    // Spindle's chunks per volume sync, which `device` syncs at (until Spindle has put once
    // in the run: `--device-group`).
    let mut group = args.device_group;
    let mut groups = Vec::new();
    let mut rounds = Vec::new();
    prime(args, &data)?;
    for round in 0..args.rounds {
        let (rows, g) = one_round(args, &data, &order, &round_order(&names, round), group)?;
        group = g;
        groups.push(g);
        rounds.push(rows);
    }
    let summaries = verdicts(&rounds);
    if args.json {
        return print_rounds_json(&rounds, &summaries);
    }
    print_markdown(&names, &rounds, &groups);
    println!();
    print_summaries(&summaries);
    Ok(())
}

/// One round with fresh stores, system by system in `names`' order, each store deleted
/// before the next system starts. Returns the rows and the group size `device` synced at (Spindle's chunks per volume sync, once known).
fn one_round(
    args: &Args,
    data: &ChunkData,
    order: &[usize],
    names: &[&'static str],
    mut group: usize,
) -> anyhow::Result<(Vec<Row>, usize)> {
    let tmp = tempfile::Builder::new()
        .prefix("spindle-bench-chunks-")
        .tempdir_in(&args.dir)?;
    let mut systems: Vec<Box<dyn System>> = Vec::new();
    for &name in names {
        let dir = tmp.path().join(name);
        fs::create_dir_all(&dir)?;
        systems.push(match name {
            "spindle" | "spindle-lanes" => Box::new(Spindle {
                name,
                dir,
                store: None,
                ids: Vec::new(),
                opts: Options {
                    active_volumes: if name == "spindle" {
                        Options::default().active_volumes
                    } else {
                        LANES
                    },
                    ..Options::default()
                },
            }),
            "file-per-chunk" => Box::new(Files {
                dir,
                ids: Vec::new(),
            }),
            "sqlite-blob" => Box::new(Sqlite::create(&dir, args.writers)?),
            "device" => Box::new(Device {
                path: dir.join("device.data"),
            }),
            _ => unreachable!("checked above"),
        });
    }
    // System by system: each one puts, reads back, lists and reopens its store, which is then
    // deleted (and the deletion synced) before the next one puts, so that every put follows
    // the deletion of a store of the same size. On the virtual disk measured here, a put made
    // while another system's store was still on disk ran at a third to a quarter of the rate
    // of one made right after a deletion (docs/benchmarks/chunks.md, "The device probe's
    // layout"). The rounds rotate the order, so drift falls on every system alike.
    let mut rows = Vec::new();
    for (mut system, name) in systems.into_iter().zip(names) {
        settle(args.settle_ms);
        for phase in PHASES {
            eprintln!("{name} {phase}");
            if let Some(row) = system.run(phase, args, data, order, group)? {
                rows.push(row);
            }
            if let Some(g) = system.group() {
                group = g;
            }
        }
        drop(system);
        let dir = tmp.path().join(name);
        fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
        rustix::fs::sync();
    }
    Ok((rows, group))
}

/// Write one store's worth of bytes (`chunks` × `size`, in chunk-sized writes), sync them and
/// delete them: the first system of the run then puts after a deletion of the same size, as
/// every later one does.
fn prime(args: &Args, data: &ChunkData) -> anyhow::Result<()> {
    let path = args.dir.join(".spindle-bench-chunks-prime");
    let written = (|| -> anyhow::Result<()> {
        let mut file = File::create(&path)?;
        let mut buf = Vec::with_capacity(args.size);
        for i in 0..args.chunks {
            data.fill(i, &mut buf);
            file.write_all(&buf)?;
        }
        file.sync_data()?;
        Ok(())
    })();
    let removed = fs::remove_file(&path);
    written.with_context(|| format!("write {}", path.display()))?;
    removed.with_context(|| format!("remove {}", path.display()))?;
    rustix::fs::sync();
    Ok(())
}

fn find<'a>(rows: &'a [Row], system: &str, phase: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system && r.phase == phase)
}

/// The targets, each judged on the median of its per-round values.
fn verdicts(rounds: &[Vec<Row>]) -> Vec<Summary> {
    let ratio = |phase: &str, peer: &str| {
        per_round(rounds, |rows| {
            Some(find(rows, "spindle", phase)?.mb_per_s / find(rows, peer, phase)?.mb_per_s)
        })
    };
    let warm = per_round(rounds, |rows| {
        Some(find(rows, "spindle", "get-warm")?.mb_per_s)
    });
    [
        Summary::judge(
            "put: spindle / device (MB/s)",
            &ratio("put", "device"),
            Target::AtLeast(0.85),
        ),
        Summary::judge(
            "put: spindle / file-per-chunk (MB/s)",
            &ratio("put", "file-per-chunk"),
            Target::AtLeast(1.2),
        ),
        Summary::judge(
            "get-cold: spindle / device (MB/s)",
            &ratio("get-cold", "device"),
            Target::AtLeast(0.9),
        ),
        Summary::judge(
            "get-cold: spindle / file-per-chunk (MB/s)",
            &ratio("get-cold", "file-per-chunk"),
            Target::AtLeast(1.1),
        ),
        Summary::judge(
            "get-warm: spindle MB/s (BLAKE3 verified)",
            &warm,
            Target::AtLeast(2500.0),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

const PHASES: [&str; 6] = ["put", "get-cold", "get-again", "get-warm", "keys", "open"];

/// One system under measurement, driven one phase at a time.
trait System {
    fn name(&self) -> &'static str;
    /// Run one phase; `None` if the phase means nothing for this system.
    fn run(
        &mut self,
        phase: &'static str,
        args: &Args,
        data: &ChunkData,
        order: &[usize],
        group: usize,
    ) -> anyhow::Result<Option<Row>>;
    /// Puts per sync this system reached, once it has put.
    fn group(&self) -> Option<usize> {
        None
    }
}

/// Distinct chunks without generating gigabytes up front: a 64 MiB random pool, chunk `i` is
/// a window of it with `i` written over its first 8 bytes.
struct ChunkData {
    pool: Vec<u8>,
    size: usize,
}

impl ChunkData {
    fn new(size: usize) -> Self {
        let len = (64 << 20).max(2 * size);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut pool = Vec::with_capacity(len);
        while pool.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            pool.extend_from_slice(&x.to_le_bytes());
        }
        Self { pool, size }
    }

    fn fill(&self, i: usize, buf: &mut Vec<u8>) {
        let start = (i.wrapping_mul(7919 * 64)) % (self.pool.len() - self.size);
        buf.clear();
        buf.extend_from_slice(&self.pool[start..start + self.size]);
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Run `f(thread, item)` for every item of `items` on `threads` threads; wall seconds and a
/// latency histogram in microseconds.
fn parallel<F>(threads: usize, items: &[usize], f: F) -> anyhow::Result<(f64, Histogram<u64>)>
where
    F: Fn(usize, usize) -> anyhow::Result<()> + Sync,
{
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let hists = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (next, f) = (&next, &f);
                s.spawn(move || -> anyhow::Result<Histogram<u64>> {
                    let mut h = Histogram::new(3)?;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&item) = items.get(i) else { break };
                        let t0 = Instant::now();
                        f(t, item)?;
                        h.record(t0.elapsed().as_micros() as u64)?;
                    }
                    Ok(h)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect::<Vec<_>>()
    });
    let seconds = start.elapsed().as_secs_f64();
    let mut all = Histogram::new(3)?;
    for h in hists {
        all.add(h?)?;
    }
    Ok((seconds, all))
}

fn row(
    system: &str,
    phase: &'static str,
    n: usize,
    size: usize,
    seconds: f64,
    h: &Histogram<u64>,
) -> Row {
    let bytes = (n * size) as u64;
    Row {
        system: system.into(),
        phase,
        chunks: n,
        bytes,
        seconds,
        mb_per_s: bytes as f64 / 1e6 / seconds,
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
    }
}

/// A phase timed once (keys, open): no bytes, the one duration as both percentiles.
fn once_row(system: &str, phase: &'static str, n: usize, seconds: f64) -> Row {
    let us = (seconds * 1e6) as u64;
    Row {
        system: system.into(),
        phase,
        chunks: n,
        bytes: 0,
        seconds,
        mb_per_s: 0.0,
        p50_us: us,
        p99_us: us,
    }
}

fn check(verify: bool, id: &ChunkId, data: &[u8], size: usize) -> anyhow::Result<()> {
    ensure!(
        data.len() == size,
        "chunk {id} read back with {} bytes",
        data.len()
    );
    if verify {
        ensure!(
            ChunkId::of(data) == *id,
            "chunk {id} read back with other bytes"
        );
    }
    Ok(())
}

/// Put every chunk with `put`, remembering the ids in chunk order. Each put is handed a
/// buffer of its own, filled for it, which it may keep.
fn put_all<P>(
    args: &Args,
    data: &ChunkData,
    put: P,
) -> anyhow::Result<(f64, Histogram<u64>, Vec<ChunkId>)>
where
    P: Fn(usize, Vec<u8>) -> anyhow::Result<ChunkId> + Sync,
{
    let ids = Mutex::new(vec![ChunkId::from_bytes([0; 32]); args.chunks]);
    let items: Vec<usize> = (0..args.chunks).collect();
    let (secs, h) = parallel(args.writers, &items, |t, i| {
        let mut buf = Vec::with_capacity(args.size);
        data.fill(i, &mut buf);
        let id = put(t, buf)?;
        ids.lock().expect("ids lock")[i] = id;
        Ok(())
    })?;
    Ok((secs, h, ids.into_inner().expect("ids lock")))
}

/// Lanes of `spindle-lanes`.
const LANES: usize = 4;

/// The chunk store; `spindle` with default options, `spindle-lanes` appending to `LANES`
/// volumes at once.
struct Spindle {
    name: &'static str,
    dir: PathBuf,
    store: Option<ChunkStore>,
    ids: Vec<ChunkId>,
    opts: Options,
}

impl System for Spindle {
    fn name(&self) -> &'static str {
        self.name
    }

    fn run(
        &mut self,
        phase: &'static str,
        args: &Args,
        data: &ChunkData,
        order: &[usize],
        _group: usize,
    ) -> anyhow::Result<Option<Row>> {
        let name = self.name();
        let (n, size) = (args.chunks, args.size);
        if self.store.is_none() {
            self.store = Some(ChunkStore::open(&self.dir, self.opts.clone())?);
        }
        let store = self.store.as_ref().expect("opened above");
        Ok(Some(match phase {
            "put" => {
                // The writer's buffer is handed over, as a server hands over a request body.
                let (secs, h, ids) =
                    put_all(args, data, |_, buf| Ok(store.put_bytes(buf.into())?))?;
                self.ids = ids;
                let stats = store.stats();
                eprintln!(
                    "{name}: {n} puts in {} group commits, {} volume syncs",
                    stats.group_commits, stats.syncs
                );
                row(name, phase, n, size, secs, &h)
            }
            "get-cold" | "get-again" | "get-warm" => {
                if phase == "get-cold" {
                    store.drop_page_cache()?;
                }
                let ids = &self.ids;
                let (secs, h) = parallel(args.writers, order, |_, i| {
                    let got = store
                        .get_with(&ids[i], args.verify)?
                        .context("chunk missing")?;
                    // `get_with` already checked BLAKE3 when asked to: do not hash twice.
                    check(false, &ids[i], &got, size)
                })?;
                row(name, phase, n, size, secs, &h)
            }
            "keys" => {
                let t0 = Instant::now();
                let keys = store.keys();
                let secs = t0.elapsed().as_secs_f64();
                ensure!(
                    keys.len() == n,
                    "spindle lists {} keys, expected {n}",
                    keys.len()
                );
                once_row(name, phase, keys.len(), secs)
            }
            "open" => {
                self.store.take().expect("open").close()?;
                let t0 = Instant::now();
                let store = ChunkStore::open(&self.dir, self.opts.clone())?;
                let secs = t0.elapsed().as_secs_f64();
                ensure!(
                    store.len() == n,
                    "reopened spindle holds {} chunks",
                    store.len()
                );
                self.store = Some(store);
                once_row(name, phase, n, secs)
            }
            _ => return Ok(None),
        }))
    }

    fn group(&self) -> Option<usize> {
        if self.name != "spindle" {
            return None;
        }
        let syncs = self.store.as_ref()?.stats().syncs;
        (!self.ids.is_empty() && syncs > 0)
            .then(|| ((self.ids.len() as f64 / syncs as f64).round() as usize).max(1))
    }
}

fn file_path(root: &Path, id: &ChunkId) -> PathBuf {
    let hex = id.to_hex();
    root.join(&hex[..2]).join(hex)
}

fn drop_file_cache(path: &Path) -> anyhow::Result<()> {
    let f = File::open(path)?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

struct Files {
    dir: PathBuf,
    ids: Vec<ChunkId>,
}

impl System for Files {
    fn name(&self) -> &'static str {
        "file-per-chunk"
    }

    fn run(
        &mut self,
        phase: &'static str,
        args: &Args,
        data: &ChunkData,
        order: &[usize],
        _group: usize,
    ) -> anyhow::Result<Option<Row>> {
        let (name, dir) = (self.name(), &self.dir);
        let (n, size) = (args.chunks, args.size);
        Ok(Some(match phase {
            "put" => {
                for b in 0..256 {
                    fs::create_dir_all(dir.join(format!("{b:02x}")))?;
                }
                let (secs, h, ids) = put_all(args, data, |_, buf| {
                    let id = ChunkId::of(&buf);
                    let mut f = File::create(file_path(dir, &id))?;
                    f.write_all(&buf)?;
                    f.sync_data()?;
                    Ok(id)
                })?;
                self.ids = ids;
                row(name, phase, n, size, secs, &h)
            }
            "get-cold" | "get-again" | "get-warm" => {
                if phase == "get-cold" {
                    for id in &self.ids {
                        drop_file_cache(&file_path(dir, id))?;
                    }
                }
                let ids = &self.ids;
                let (secs, h) = parallel(args.writers, order, |_, i| {
                    let got = fs::read(file_path(dir, &ids[i]))?;
                    check(args.verify, &ids[i], &got, size)
                })?;
                row(name, phase, n, size, secs, &h)
            }
            "keys" => {
                let t0 = Instant::now();
                let mut keys = Vec::with_capacity(n);
                for sub in fs::read_dir(dir)? {
                    for entry in fs::read_dir(sub?.path())? {
                        if let Ok(id) = entry?.file_name().to_string_lossy().parse::<ChunkId>() {
                            keys.push(id);
                        }
                    }
                }
                let secs = t0.elapsed().as_secs_f64();
                ensure!(
                    keys.len() == n,
                    "file-per-chunk lists {} keys, expected {n}",
                    keys.len()
                );
                once_row(name, phase, keys.len(), secs)
            }
            _ => return Ok(None),
        }))
    }
}

fn sqlite_open(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(600))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    Ok(c)
}

struct Sqlite {
    path: PathBuf,
    conns: Vec<Mutex<rusqlite::Connection>>,
    ids: Vec<ChunkId>,
}

impl Sqlite {
    fn create(dir: &Path, writers: usize) -> anyhow::Result<Self> {
        let path = dir.join("chunks.db");
        sqlite_open(&path)?.execute(
            "CREATE TABLE chunks (id BLOB PRIMARY KEY, data BLOB NOT NULL)",
            [],
        )?;
        let conns = (0..writers)
            .map(|_| sqlite_open(&path).map(Mutex::new))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            path,
            conns,
            ids: Vec::new(),
        })
    }
}

impl System for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite-blob"
    }

    fn run(
        &mut self,
        phase: &'static str,
        args: &Args,
        data: &ChunkData,
        order: &[usize],
        _group: usize,
    ) -> anyhow::Result<Option<Row>> {
        let name = self.name();
        let (n, size) = (args.chunks, args.size);
        let conns = &self.conns;
        Ok(Some(match phase {
            "put" => {
                let (secs, h, ids) = put_all(args, data, |t, buf| {
                    let id = ChunkId::of(&buf);
                    let c = conns[t].lock().expect("connection lock");
                    c.execute(
                        "INSERT OR IGNORE INTO chunks (id, data) VALUES (?1, ?2)",
                        rusqlite::params![&id.as_bytes()[..], &buf],
                    )?;
                    Ok(id)
                })?;
                self.ids = ids;
                row(name, phase, n, size, secs, &h)
            }
            "get-cold" | "get-again" | "get-warm" => {
                if phase == "get-cold" {
                    for suffix in ["", "-wal"] {
                        let p = PathBuf::from(format!("{}{suffix}", self.path.display()));
                        if p.exists() {
                            drop_file_cache(&p)?;
                        }
                    }
                }
                let ids = &self.ids;
                let (secs, h) = parallel(args.writers, order, |t, i| {
                    let c = conns[t].lock().expect("connection lock");
                    let got: Vec<u8> = c.query_row(
                        "SELECT data FROM chunks WHERE id = ?1",
                        [&ids[i].as_bytes()[..]],
                        |r| r.get(0),
                    )?;
                    check(args.verify, &ids[i], &got, size)
                })?;
                row(name, phase, n, size, secs, &h)
            }
            "keys" => {
                let t0 = Instant::now();
                let keys: Vec<Vec<u8>> = {
                    let c = conns[0].lock().expect("connection lock");
                    let mut stmt = c.prepare("SELECT id FROM chunks")?;
                    let rows = stmt.query_map([], |r| r.get(0))?;
                    rows.collect::<Result<_, _>>()?
                };
                let secs = t0.elapsed().as_secs_f64();
                ensure!(
                    keys.len() == n,
                    "sqlite lists {} keys, expected {n}",
                    keys.len()
                );
                once_row(name, phase, keys.len(), secs)
            }
            "open" => {
                let t0 = Instant::now();
                let c = sqlite_open(&self.path)?;
                let count: i64 = c.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?;
                once_row(name, phase, count as usize, t0.elapsed().as_secs_f64())
            }
            _ => return Ok(None),
        }))
    }
}

/// Bytes between chunk starts in the device file: a record as Spindle lays it out (its
/// header, then the chunk's bytes, the next record right behind). Measured on the virtual disk
/// here, the layout matters: a writer appending 1 MiB at 1 MiB-aligned offsets fell to about
/// 450 MiB/s after the first 1.2–1.4 GB of a 2 GB file, while the same writes each shifted by
/// 64 bytes ran at about 2,400 MiB/s throughout (docs/benchmarks/chunks.md, "The device
/// probe's layout").
fn device_stride(size: usize) -> usize {
    format::RECORD_HEADER_LEN as usize + size
}

struct Device {
    path: PathBuf,
}

impl System for Device {
    fn name(&self) -> &'static str {
        "device"
    }

    fn run(
        &mut self,
        phase: &'static str,
        args: &Args,
        data: &ChunkData,
        order: &[usize],
        group: usize,
    ) -> anyhow::Result<Option<Row>> {
        let (n, size) = (args.chunks, args.size);
        match phase {
            "put" => device_put(&self.path, n, size, args.writers, group, data).map(Some),
            "get-cold" => device_get(&self.path, args.writers, order, size).map(Some),
            _ => Ok(None),
        }
    }
}

/// The disk's limit for puts: Spindle's pattern of I/O with none of its work. One thread
/// appends the chunks to a file (as Spindle appends to its volume), never more than
/// `writers` chunks (or one group, if larger) ahead of what is synced (Spindle's writers
/// each wait for their put), and
/// hands them to the syncers `group` at a time (Spindle's chunks per volume sync in the same
/// round: its writer hands over what it drained from its queue); `syncs_in_flight_max`
/// syncers each take everything handed over so far and `fdatasync` it (Spindle's group
/// commit). A file holds at most `volume_bytes_max`
/// bytes, its blocks reserved as a volume's are; the next is started once everything is
/// synced, as Spindle seals a volume. No
/// hashing, no index, no copy into a buffer, no headers: what is left is the page-cache copy
/// and the syncs, overlapped as Spindle overlaps them. A chunk's latency runs from its write
/// to the end of the sync that covered it.
fn device_put(
    path: &Path,
    n: usize,
    size: usize,
    writers: usize,
    group: usize,
    data: &ChunkData,
) -> anyhow::Result<Row> {
    struct State {
        /// Chunks written, and when each was.
        written: Vec<Instant>,
        /// Chunks some sync has taken, and chunks a finished sync covered.
        taken: usize,
        synced: usize,
        /// The file being appended to.
        file: Arc<File>,
        failed: bool,
    }
    let stride = device_stride(size);
    let opts = Options::default();
    assert_eq!(
        opts.active_volumes, 1,
        "the probe appends to one file at a time, as Spindle does"
    );
    // Spindle's writers each wait for their put before the next: no more chunks than
    // writers are ever unsynced (its write buffer, 64 MiB, is larger here).
    let group = group.max(1);
    let in_flight = writers
        .clamp(1, (opts.write_buffer_bytes_max as usize / stride).max(1))
        .max(group);
    let state = Mutex::new(State {
        written: Vec::with_capacity(n),
        taken: 0,
        synced: 0,
        file: Arc::new(device_create(&device_file(path, 0), &opts)?),
        failed: false,
    });
    let cv = std::sync::Condvar::new();
    let h = Mutex::new(Histogram::<u64>::new(3)?);
    let start = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let syncers: Vec<_> = (0..opts.syncs_in_flight_max)
            .map(|_| {
                let (state, cv, h) = (&state, &cv, &h);
                s.spawn(move || -> anyhow::Result<()> {
                    loop {
                        let (from, to, file) = {
                            let mut st = state.lock().expect("state lock");
                            while st.taken == st.written.len() && st.taken < n && !st.failed {
                                st = cv.wait(st).expect("state lock");
                            }
                            if st.taken == n || st.failed {
                                return Ok(());
                            }
                            let from = st.taken;
                            st.taken = st.written.len();
                            (from, st.taken, Arc::clone(&st.file))
                        };
                        let synced = file.sync_data();
                        let mut st = state.lock().expect("state lock");
                        if let Err(e) = synced {
                            st.failed = true;
                            cv.notify_all();
                            return Err(e.into());
                        }
                        let now = Instant::now();
                        let recorded = {
                            let mut h = h.lock().expect("histogram lock");
                            st.written[from..to].iter().try_for_each(|t| {
                                h.record(now.duration_since(*t).as_micros() as u64)
                            })
                        };
                        st.synced = st.synced.max(to);
                        if recorded.is_err() {
                            st.failed = true;
                        }
                        cv.notify_all();
                        recorded?;
                    }
                })
            })
            .collect();
        let mut buf = Vec::with_capacity(stride);
        let mut chunk = Vec::with_capacity(size);
        let mut written = Ok(());
        let mut i = 0;
        let mut file_no = 0;
        let per_file = device_chunks_per_file(stride);
        while i < n {
            let (no, _) = device_loc(i, stride);
            let (batch_end, file) = {
                let mut st = state.lock().expect("state lock");
                if no != file_no {
                    // Where Spindle seals a volume: wait until everything written is synced,
                    // then start the next file.
                    while st.synced < i && !st.failed {
                        st = cv.wait(st).expect("state lock");
                    }
                    if !st.failed {
                        // Sealed: its blocks past the end go back, as Spindle's do.
                        let _ = spindle_fs::unreserve_blocks(&st.file);
                        match device_create(&device_file(path, no), &opts) {
                            Ok(f) => st.file = Arc::new(f),
                            Err(e) => {
                                written = Err(e);
                                st.failed = true;
                                cv.notify_all();
                            }
                        }
                        file_no = no;
                    }
                }
                while i - st.synced >= in_flight && !st.failed {
                    st = cv.wait(st).expect("state lock");
                }
                if st.failed {
                    break;
                }
                // Up to the bound, one group, and the end of this file.
                let file_end = (no + 1).saturating_mul(per_file);
                (
                    (st.synced + in_flight).min(n).min(i + group).min(file_end),
                    Arc::clone(&st.file),
                )
            };
            let mut times = Vec::with_capacity(batch_end - i);
            for j in i..batch_end {
                // A zero header where Spindle's record header would be, then the chunk.
                data.fill(j, &mut chunk);
                buf.clear();
                buf.resize(format::RECORD_HEADER_LEN as usize, 0);
                buf.extend_from_slice(&chunk);
                if let Err(e) = file.write_all_at(&buf, device_loc(j, stride).1) {
                    written = Err(e);
                    break;
                }
                times.push(Instant::now());
            }
            let mut st = state.lock().expect("state lock");
            if written.is_err() {
                st.failed = true;
                cv.notify_all();
                break;
            }
            st.written.extend(times);
            cv.notify_all();
            i = batch_end;
        }
        for t in syncers {
            t.join().expect("device syncer panicked")?;
        }
        Ok(written?)
    })?;
    let secs = start.elapsed().as_secs_f64();
    let h = h.into_inner().expect("histogram lock");
    Ok(row("device", "put", n, size, secs, &h))
}

/// A file of the probe, its blocks reserved up to `volume_bytes_max` as Spindle reserves a
/// volume's (best effort).
fn device_create(path: &Path, opts: &Options) -> std::io::Result<File> {
    let file = File::create(path)?;
    let _ = spindle_fs::reserve_blocks(&file, opts.volume_bytes_max);
    Ok(file)
}

/// Which of `device`'s files holds chunk `i`, and where: files of at most Spindle's
/// `volume_bytes_max`, as its volumes are.
fn device_loc(i: usize, stride: usize) -> (usize, u64) {
    let per_file = device_chunks_per_file(stride);
    (
        i / per_file,
        format::VOLUME_HEADER_LEN + ((i % per_file) * stride) as u64,
    )
}

fn device_chunks_per_file(stride: usize) -> usize {
    ((Options::default().volume_bytes_max - format::VOLUME_HEADER_LEN) as usize / stride).max(1)
}

fn device_file(path: &Path, no: usize) -> PathBuf {
    path.with_extension(format!("{no}"))
}

/// Sync every file system (`sync(2)`), then wait `ms` milliseconds doing nothing.
fn settle(ms: u64) {
    rustix::fs::sync();
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// Random `O_DIRECT` reads of whole chunks.
fn device_get(path: &Path, threads: usize, order: &[usize], size: usize) -> anyhow::Result<Row> {
    let stride = device_stride(size);
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    let files = (0..=device_loc(order.len().saturating_sub(1), stride).0)
        .map(|no| {
            let p = device_file(path, no);
            match OpenOptions::new().read(true).custom_flags(direct).open(&p) {
                Ok(f) => Ok(f),
                Err(e) => bail!(
                    "O_DIRECT open of {} failed ({e}); the filesystem may not support it",
                    p.display()
                ),
            }
        })
        .collect::<anyhow::Result<Vec<File>>>()?;
    let (secs, h) = parallel(threads, order, |_, i| {
        // The record's whole pages in one aligned transfer, as Spindle reads an uncached
        // chunk; the last one may end short, where the file does.
        let (no, at) = device_loc(i, stride);
        let from = at / 4096 * 4096;
        let len = ((at + stride as u64).div_ceil(4096) * 4096 - from) as usize;
        let mut raw = vec![0u8; len + 4096];
        let off = raw.as_ptr().align_offset(4096);
        let aligned = &mut raw[off..off + len];
        // One transfer: it ends short only at the end of the file.
        let got = files[no].read_at(aligned, from)?;
        let data = (at - from) as usize + format::RECORD_HEADER_LEN as usize;
        ensure!(
            got >= data + size && aligned[data..data + 8] == (i as u64).to_le_bytes(),
            "device read chunk {i} wrong"
        );
        Ok(())
    })?;
    Ok(row("device", "get-cold", order.len(), size, secs, &h))
}

fn print_markdown(names: &[&str], rounds: &[Vec<Row>], groups: &[usize]) {
    let rows: Vec<(String, Vec<_>)> = PHASES
        .iter()
        .flat_map(|&phase| {
            names.iter().filter_map(move |&system| {
                find(rounds.first()?, system, phase)?;
                let spread =
                    |f: fn(&Row) -> f64| spread_of(rounds, |rows| find(rows, system, phase), f);
                let mbs = find(rounds.first()?, system, phase)?.bytes > 0;
                Some((
                    format!("{system} {phase}"),
                    vec![
                        mbs.then(|| spread(|r| r.mb_per_s)).flatten(),
                        spread(|r| r.p50_us as f64),
                        spread(|r| r.p99_us as f64),
                        spread(|r| r.seconds),
                    ],
                ))
            })
        })
        .collect();
    print_spreads(
        "system and phase",
        &[("MB/s", 0), ("p50 µs", 0), ("p99 µs", 0), ("seconds", 3)],
        &rows,
    );
    println!();
    println!(
        "Spindle's chunks per volume sync in the rounds: {groups:?}; device put handed groups \
         of that size to its syncers (the round before's where it put before Spindle), up to \
         {} syncs at once, each syncing everything handed over so far.",
        Options::default().syncs_in_flight_max
    );
}
