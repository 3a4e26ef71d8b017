//! `spindle bench chunks`: large immutable blobs put by concurrent writers, then read back in
//! random order cold (pages dropped with posix_fadvise) and warm, then listed and reopened,
//! through Spindle's chunk store and its peers in one run on the same machine:
//!
//! - `spindle`: `spindle_chunk::ChunkStore` with default options;
//! - `file-per-chunk`: one file per chunk, written and fdatasync'ed (no directory fsync, which
//!   flatters it: a crash may lose the name of a file whose bytes were synced);
//! - `sqlite-blob`: SQLite, WAL, `synchronous=FULL`, one row per chunk, one connection per
//!   writer;
//! - `device`: the limits: appends with one fdatasync per group of the size Spindle reached,
//!   and random `O_DIRECT` reads of a file of the same size.
//!
//! Every system but `device` checks BLAKE3 of what it reads (unless `--verify false`), so no
//! system wins by skipping the work a content-addressed store must do. Files go under `--dir`
//! (default: the current directory), which should be on the disk being measured, not tmpfs.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use hdrhistogram::Histogram;
use serde::Serialize;
use spindle_chunk::{ChunkId, ChunkStore, Options};

use crate::report::{print_json, print_table};

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
    /// Systems to measure, comma-separated (spindle, file-per-chunk, sqlite-blob, device).
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
    /// Print one JSON object per (system, phase).
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

const SYSTEMS: [&str; 4] = ["spindle", "file-per-chunk", "sqlite-blob", "device"];

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
    fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix("spindle-bench-chunks-")
        .tempdir_in(&args.dir)?;
    let data = ChunkData::new(args.size);
    let order = shuffled(args.chunks, 0x5eed);
    let mut rows = Vec::new();
    let mut group = args.device_group;
    for system in SYSTEMS
        .iter()
        .filter(|s| args.systems.iter().any(|a| a == *s))
    {
        let dir = tmp.path().join(system);
        fs::create_dir_all(&dir)?;
        eprintln!("measuring {system} in {}", dir.display());
        match *system {
            "spindle" => {
                let (r, g) = bench_spindle(args, &dir, &data, &order)?;
                group = g;
                rows.extend(r);
            }
            "file-per-chunk" => rows.extend(bench_files(args, &dir, &data, &order)?),
            "sqlite-blob" => rows.extend(bench_sqlite(args, &dir, &data, &order)?),
            "device" => rows.extend(bench_device(args, &dir, &data, &order, group)?),
            _ => unreachable!("checked above"),
        }
        fs::remove_dir_all(&dir)?;
    }
    if args.json {
        print_json(&rows)
    } else {
        print_markdown(&rows, group);
        Ok(())
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

fn bench_spindle(
    args: &Args,
    dir: &Path,
    data: &ChunkData,
    order: &[usize],
) -> anyhow::Result<(Vec<Row>, usize)> {
    let name = "spindle";
    let (n, size) = (args.chunks, args.size);
    let store = ChunkStore::open(dir, Options::default())?;
    let (secs, h, ids) = put_all(args, data, |_, buf| Ok(store.put(buf)?))?;
    let syncs = store.stats().syncs.max(1);
    let group = (n as f64 / syncs as f64).round().max(1.0) as usize;
    eprintln!("spindle: {n} puts in {syncs} syncs, {group} puts per sync on average");
    let mut rows = vec![row(name, "put", n, size, secs, &h)];
    store.drop_page_cache()?;
    for phase in ["get-cold", "get-warm"] {
        let (secs, h) = parallel(args.writers, order, |_, i| {
            let got = store
                .get_with(&ids[i], args.verify)?
                .context("chunk missing")?;
            check(args.verify, &ids[i], &got, size)
        })?;
        rows.push(row(name, phase, n, size, secs, &h));
    }
    let t0 = Instant::now();
    let keys = store.keys();
    rows.push(once_row(
        name,
        "keys",
        keys.len(),
        t0.elapsed().as_secs_f64(),
    ));
    ensure!(
        keys.len() == n,
        "spindle lists {} keys, expected {n}",
        keys.len()
    );
    store.close()?;
    let t0 = Instant::now();
    let store = ChunkStore::open(dir, Options::default())?;
    rows.push(once_row(
        name,
        "open",
        store.len(),
        t0.elapsed().as_secs_f64(),
    ));
    ensure!(
        store.len() == n,
        "reopened spindle holds {} chunks",
        store.len()
    );
    Ok((rows, group))
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

fn bench_files(
    args: &Args,
    dir: &Path,
    data: &ChunkData,
    order: &[usize],
) -> anyhow::Result<Vec<Row>> {
    let name = "file-per-chunk";
    let (n, size) = (args.chunks, args.size);
    for b in 0..256 {
        fs::create_dir_all(dir.join(format!("{b:02x}")))?;
    }
    let (secs, h, ids) = put_all(args, data, |_, buf| {
        let id = ChunkId::of(buf);
        let path = file_path(dir, &id);
        let mut f = File::create(&path)?;
        f.write_all(buf)?;
        f.sync_data()?;
        Ok(id)
    })?;
    let mut rows = vec![row(name, "put", n, size, secs, &h)];
    for id in &ids {
        drop_file_cache(&file_path(dir, id))?;
    }
    for phase in ["get-cold", "get-warm"] {
        let (secs, h) = parallel(args.writers, order, |_, i| {
            let got = fs::read(file_path(dir, &ids[i]))?;
            check(args.verify, &ids[i], &got, size)
        })?;
        rows.push(row(name, phase, n, size, secs, &h));
    }
    let t0 = Instant::now();
    let mut keys = Vec::with_capacity(n);
    for sub in fs::read_dir(dir)? {
        for entry in fs::read_dir(sub?.path())? {
            if let Ok(id) = entry?.file_name().to_string_lossy().parse::<ChunkId>() {
                keys.push(id);
            }
        }
    }
    rows.push(once_row(
        name,
        "keys",
        keys.len(),
        t0.elapsed().as_secs_f64(),
    ));
    ensure!(
        keys.len() == n,
        "file-per-chunk lists {} keys, expected {n}",
        keys.len()
    );
    Ok(rows)
}

fn sqlite_open(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(std::time::Duration::from_secs(600))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    Ok(c)
}

fn bench_sqlite(
    args: &Args,
    dir: &Path,
    data: &ChunkData,
    order: &[usize],
) -> anyhow::Result<Vec<Row>> {
    let name = "sqlite-blob";
    let (n, size) = (args.chunks, args.size);
    let path = dir.join("chunks.db");
    sqlite_open(&path)?.execute(
        "CREATE TABLE chunks (id BLOB PRIMARY KEY, data BLOB NOT NULL)",
        [],
    )?;
    let conns = (0..args.writers)
        .map(|_| sqlite_open(&path).map(Mutex::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (secs, h, ids) = put_all(args, data, |t, buf| {
        let id = ChunkId::of(buf);
        let c = conns[t].lock().expect("connection lock");
        c.execute(
            "INSERT OR IGNORE INTO chunks (id, data) VALUES (?1, ?2)",
            rusqlite::params![&id.as_bytes()[..], buf],
        )?;
        Ok(id)
    })?;
    let mut rows = vec![row(name, "put", n, size, secs, &h)];
    for suffix in ["", "-wal"] {
        let p = PathBuf::from(format!("{}{suffix}", path.display()));
        if p.exists() {
            drop_file_cache(&p)?;
        }
    }
    for phase in ["get-cold", "get-warm"] {
        let (secs, h) = parallel(args.writers, order, |t, i| {
            let c = conns[t].lock().expect("connection lock");
            let got: Vec<u8> = c.query_row(
                "SELECT data FROM chunks WHERE id = ?1",
                [&ids[i].as_bytes()[..]],
                |r| r.get(0),
            )?;
            check(args.verify, &ids[i], &got, size)
        })?;
        rows.push(row(name, phase, n, size, secs, &h));
    }
    let t0 = Instant::now();
    let keys: Vec<Vec<u8>> = {
        let c = conns[0].lock().expect("connection lock");
        let mut stmt = c.prepare("SELECT id FROM chunks")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<Result<_, _>>()?
    };
    rows.push(once_row(
        name,
        "keys",
        keys.len(),
        t0.elapsed().as_secs_f64(),
    ));
    ensure!(
        keys.len() == n,
        "sqlite lists {} keys, expected {n}",
        keys.len()
    );
    drop(conns);
    let t0 = Instant::now();
    let c = sqlite_open(&path)?;
    let count: i64 = c.query_row("SELECT count(*) FROM chunks", [], |r| r.get(0))?;
    rows.push(once_row(
        name,
        "open",
        count as usize,
        t0.elapsed().as_secs_f64(),
    ));
    Ok(rows)
}

/// Bytes between chunk starts in the device file: the chunk size rounded up to 4 KiB, so
/// every `O_DIRECT` read is aligned.
fn device_stride(size: usize) -> usize {
    size.div_ceil(4096) * 4096
}

fn bench_device(
    args: &Args,
    dir: &Path,
    data: &ChunkData,
    order: &[usize],
    group: usize,
) -> anyhow::Result<Vec<Row>> {
    let name = "device";
    let (n, size) = (args.chunks, args.size);
    let stride = device_stride(size);
    let path = dir.join("device.data");
    let mut f = File::create(&path)?;
    let mut h = Histogram::<u64>::new(3)?;
    let mut buf = Vec::with_capacity(stride);
    let start = Instant::now();
    for first in (0..n).step_by(group.max(1)) {
        let t0 = Instant::now();
        let last = (first + group.max(1)).min(n);
        for i in first..last {
            data.fill(i, &mut buf);
            buf.resize(stride, 0);
            f.write_all(&buf)?;
        }
        f.sync_data()?;
        let us = t0.elapsed().as_micros() as u64;
        h.record_n(us, (last - first) as u64)?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(f);
    let mut rows = vec![row(name, "put", n, size, secs, &h)];
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&path);
    let f = match f {
        Ok(f) => f,
        Err(e) => bail!(
            "O_DIRECT open of {} failed ({e}); the filesystem may not support it",
            path.display()
        ),
    };
    let (secs, h) = parallel(args.writers, order, |_, i| {
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
    rows.push(row(name, "get-cold", n, size, secs, &h));
    Ok(rows)
}

fn print_markdown(rows: &[Row], group: usize) {
    let device = |phase: &str| {
        rows.iter()
            .find(|r| r.system == "device" && r.phase == phase)
            .map(|r| r.mb_per_s)
    };
    let header = [
        "system",
        "phase",
        "chunks",
        "MB/s",
        "vs device",
        "p50 µs",
        "p99 µs",
        "seconds",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let vs = match (r.mb_per_s > 0.0, device(r.phase)) {
                (true, Some(d)) if d > 0.0 => format!("{:.0}%", 100.0 * r.mb_per_s / d),
                _ => "".into(),
            };
            let mbs = if r.bytes > 0 {
                format!("{:.0}", r.mb_per_s)
            } else {
                "".into()
            };
            vec![
                r.system.clone(),
                r.phase.into(),
                r.chunks.to_string(),
                mbs,
                vs,
                r.p50_us.to_string(),
                r.p99_us.to_string(),
                format!("{:.3}", r.seconds),
            ]
        })
        .collect();
    print_table(&header, &table);
    println!();
    println!(
        "device put syncs once per {group} chunks (Spindle's average group commit in this run)."
    );
}
