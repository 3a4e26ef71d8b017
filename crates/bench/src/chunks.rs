//! `spindle bench chunks`: large immutable blobs put by concurrent writers, then read back in
//! random order three times: cold (pages dropped with posix_fadvise), again, and warm (the
//! third read: Spindle reads a large uncached chunk past the page cache the first time and
//! admits it at the second, so `get-again` is a second read from the disk for it and
//! `get-warm` its first from the cache), then listed and reopened,
//! through Spindle's chunk store and its peers in one run on the same machine:
//!
//! - `spindle`: `spindle_chunk::ChunkStore` with default options (4 lanes: 4 volumes
//!   appended to at once);
//! - `spindle-one-lane`: the same with one volume appended to at a time (the store before
//!   lanes), to show what lanes are worth;
//! - `file-per-chunk`: one file per chunk, written and fdatasync'ed (no directory fsync, which
//!   flatters it: a crash may lose the name of a file whose bytes were synced);
//! - `sqlite-blob`: SQLite, WAL, `synchronous=FULL`, one row per chunk, one connection per
//!   writer;
//! - `device`: the limits: as many files as Spindle appends to and as many syncs at once as
//!   its writer can have, each thread appending groups of Spindle's chunks per volume sync
//!   with one fdatasync per group, and random `O_DIRECT` reads of a file of the same size.
//!
//! A round is phase by phase (`put`, `get-cold`, `get-again`, `get-warm`, `keys`, `open`),
//! each phase for every system in turn, so that the systems meet the machine's noise at about the same time;
//! `--rounds` repeats it with fresh stores and the systems' order rotated each round, and the
//! targets are judged on the median of the per-round ratios. `device` syncs at the group
//! size Spindle reached in the same round, or, when it puts before Spindle, in the round
//! before (`--device-group` in the first round). All systems' files of one round exist at
//! once (about 4 × chunks × size bytes on disk); they are removed after each round.
//!
//! Every system but `device` checks BLAKE3 of what it reads (unless `--verify false`), so no
//! system wins by skipping the work a content-addressed store must do. Files go under `--dir`
//! (default: the current directory), which should be on the disk being measured, not tmpfs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use spindle_chunk::{ChunkId, ChunkStore, Options};

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
    /// Systems to measure, comma-separated (spindle, spindle-one-lane, file-per-chunk,
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
    /// Chunks per fdatasync for `device` when `spindle` is not measured in the same run.
    #[arg(long, default_value_t = 16)]
    pub device_group: usize,
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
    "spindle-one-lane",
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
    let mut group = args.device_group;
    let mut groups = Vec::new();
    let mut rounds = Vec::new();
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

/// One round with fresh stores, the systems in `names`' order in every phase. Returns the
/// rows and the group size `device` synced at (Spindle's chunks per volume sync, once known).
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
            "spindle" | "spindle-one-lane" => Box::new(Spindle {
                name,
                dir,
                store: None,
                ids: Vec::new(),
                opts: Options {
                    active_volumes: if name == "spindle" {
                        Options::default().active_volumes
                    } else {
                        1
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
    // Phase by phase, every system in turn, so that the systems meet the machine's noise
    // (other jobs, the disk's own moods) at about the same time.
    let mut rows = Vec::new();
    for phase in PHASES {
        for system in &mut systems {
            eprintln!("{} {phase}", system.name());
            if let Some(row) = system.run(phase, args, data, order, group)? {
                rows.push(row);
            }
            if let Some(g) = system.group() {
                group = g;
            }
        }
    }
    drop(systems);
    Ok((rows, group))
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

/// Put every chunk with `put`, remembering the ids in chunk order.
fn put_all<P>(
    args: &Args,
    data: &ChunkData,
    put: P,
) -> anyhow::Result<(f64, Histogram<u64>, Vec<ChunkId>)>
where
    P: Fn(usize, &[u8]) -> anyhow::Result<ChunkId> + Sync,
{
    let ids = Mutex::new(vec![ChunkId::from_bytes([0; 32]); args.chunks]);
    let items: Vec<usize> = (0..args.chunks).collect();
    let (secs, h) = parallel(args.writers, &items, |t, i| {
        let mut buf = Vec::with_capacity(args.size);
        data.fill(i, &mut buf);
        let id = put(t, &buf)?;
        ids.lock().expect("ids lock")[i] = id;
        Ok(())
    })?;
    Ok((secs, h, ids.into_inner().expect("ids lock")))
}

/// The chunk store; `spindle-one-lane` appends to one volume at a time (the store before
/// lanes), `spindle` to the default number.
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
                let (secs, h, ids) = put_all(args, data, |_, buf| Ok(store.put(buf)?))?;
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
                    let id = ChunkId::of(buf);
                    let mut f = File::create(file_path(dir, &id))?;
                    f.write_all(buf)?;
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
                    let id = ChunkId::of(buf);
                    let c = conns[t].lock().expect("connection lock");
                    c.execute(
                        "INSERT OR IGNORE INTO chunks (id, data) VALUES (?1, ?2)",
                        rusqlite::params![&id.as_bytes()[..], buf],
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

/// Bytes between chunk starts in the device file: the chunk size rounded up to 4 KiB, so
/// every `O_DIRECT` read is aligned.
fn device_stride(size: usize) -> usize {
    size.div_ceil(4096) * 4096
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
            "put" => device_put(&self.path, n, size, data, group).map(Some),
            "get-cold" => device_get(&self.path, args.writers, order, size).map(Some),
            _ => Ok(None),
        }
    }
}

/// The disk's limit for puts at Spindle's bytes per sync: as many files as Spindle appends
/// to at once (`active_volumes`) and as many `fdatasync`s at once as Spindle's writer can
/// have (`syncs_in_flight_max` group commits, each syncing every volume it wrote to). Each
/// thread takes the next `group` chunks (Spindle's chunks per volume sync), reserves their
/// space at the end of its file (thread t writes file t mod files), writes them there and
/// syncs the file, until `n` chunks are written. No hashing, no index, no hand-off between
/// threads: what is left is the page-cache copy and the syncs, as many at once and on as
/// many files as Spindle's.
fn device_put(
    path: &Path,
    n: usize,
    size: usize,
    data: &ChunkData,
    group: usize,
) -> anyhow::Result<Row> {
    let stride = device_stride(size);
    let group = group.max(1);
    let opts = Options::default();
    let files: Vec<(File, AtomicU64)> = (0..opts.active_volumes)
        .map(|f| {
            Ok((
                File::create(path.with_extension(format!("{f}")))?,
                AtomicU64::new(0),
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let next = AtomicUsize::new(0);
    let h = Mutex::new(Histogram::<u64>::new(3)?);
    let start = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..device_syncers())
            .map(|t| {
                let (next, h) = (&next, &h);
                let (f, end) = &files[t % files.len()];
                s.spawn(move || -> anyhow::Result<()> {
                    let mut buf = Vec::with_capacity(stride * group);
                    let mut one = Vec::with_capacity(stride);
                    loop {
                        let first = next.fetch_add(group, Ordering::Relaxed);
                        if first >= n {
                            return Ok(());
                        }
                        let last = (first + group).min(n);
                        let t0 = Instant::now();
                        buf.clear();
                        for i in first..last {
                            data.fill(i, &mut one);
                            one.resize(stride, 0);
                            buf.extend_from_slice(&one);
                        }
                        let at = end.fetch_add(buf.len() as u64, Ordering::Relaxed);
                        f.write_all_at(&buf, at)?;
                        f.sync_data()?;
                        h.lock()
                            .expect("histogram lock")
                            .record_n(t0.elapsed().as_micros() as u64, (last - first) as u64)?;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("device writer panicked")?;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    drop(files);
    for f in 0..opts.active_volumes {
        fs::remove_file(path.with_extension(format!("{f}")))?;
    }
    // The reads want every chunk in one file, at `i * stride`: lay it out, untimed.
    let mut f = File::create(path)?;
    let mut buf = Vec::with_capacity(stride);
    for i in 0..n {
        data.fill(i, &mut buf);
        buf.resize(stride, 0);
        f.write_all(&buf)?;
    }
    f.sync_data()?;
    let h = h.into_inner().expect("histogram lock");
    Ok(row("device", "put", n, size, secs, &h))
}

/// Syncs `device` runs at once: as many as Spindle's writer can have in flight.
fn device_syncers() -> usize {
    let o = Options::default();
    o.syncs_in_flight_max * o.active_volumes
}

/// Random `O_DIRECT` reads of whole chunks.
fn device_get(path: &Path, threads: usize, order: &[usize], size: usize) -> anyhow::Result<Row> {
    let stride = device_stride(size);
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(direct)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => bail!(
            "O_DIRECT open of {} failed ({e}); the filesystem may not support it",
            path.display()
        ),
    };
    let (secs, h) = parallel(threads, order, |_, i| {
        let mut raw = vec![0u8; stride + 4096];
        let off = raw.as_ptr().align_offset(4096);
        let aligned = &mut raw[off..off + stride];
        f.read_exact_at(aligned, (i * stride) as u64)?;
        ensure!(
            aligned[..8] == (i as u64).to_le_bytes(),
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
        "device put synced once per {groups:?} chunks in the rounds (Spindle's chunks per \
         volume sync), up to {} syncs at once on {} files.",
        device_syncers(),
        Options::default().active_volumes
    );
}
