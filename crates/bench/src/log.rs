//! `spindle bench log`: durable appends of the event-store workload, Spindle against peers
//! measured in the same run.
//!
//! Workload: `--events` events of `{"Type":"ItemCreated","ItemId":"1324"}`, each its own
//! one-record transaction on node `users/{j mod 10000}`, with `--concurrency` appends
//! outstanding. Systems: `spindle` (the file log; the client hands over `--group`
//! transactions per submission), `spindle-nosync` (same, no fdatasync), `spindle-single`
//! (one future per append, time-bounded), `spindle-lone` (a lone writer: one append
//! outstanding, time-bounded), `rocksdb-wal-sync` (64 threads, `sync=true` puts),
//! `sqlite-full` (WAL, synchronous=FULL, one transaction per event), `device` (raw append +
//! fdatasync at Spindle's bytes per sync) and `device-lone` (the same at one event's frame
//! per sync: the floor of a lone writer's latency).
//!
//! Every system runs once per round (`--rounds`), in an order rotated each round; the
//! targets are judged on the median of the per-round ratios.
//! `mb_per_s` counts the event's user bytes (key + JSON value) per second.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use serde::Serialize;
use spindle_core::{ItemKey, Transaction, Value};
use spindle_log::{FileLog, LogConfig, SyncMode};

use crate::report::{
    print_rounds_json, print_summaries, print_table, round_order, Spread, Summary, Target,
};

const EVENT_JSON: &str = r#"{"Type":"ItemCreated","ItemId":"1324"}"#;
const NODES: u64 = 10_000;
const SYSTEMS: [&str; 8] = [
    "spindle",
    "spindle-nosync",
    "spindle-single",
    "spindle-lone",
    "rocksdb-wal-sync",
    "sqlite-full",
    "device",
    "device-lone",
];

/// Options of `spindle bench log`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Events to append per system (peers far slower than Spindle run for `--peer-seconds`).
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Appends outstanding at once.
    #[arg(long, default_value_t = 10_000)]
    pub concurrency: usize,
    /// Transactions per client submission (`FileLog::append_many`); each is still its own
    /// transaction with its own commit index. 1 makes every append its own future.
    #[arg(long, default_value_t = 1000)]
    pub group: usize,
    /// Time limit for the slow peers (RocksDB, SQLite) and the device probe.
    #[arg(long, default_value_t = 20)]
    pub peer_seconds: u64,
    /// Comma-separated systems to run.
    #[arg(
        long,
        default_value = "spindle,spindle-nosync,spindle-single,spindle-lone,rocksdb-wal-sync,sqlite-full,device,device-lone"
    )]
    pub systems: String,
    /// Directory for the benchmark's files (a real disk, not tmpfs). Removed afterwards.
    #[arg(long, default_value = "spindle-bench-data")]
    pub dir: PathBuf,
    /// Rounds: every system runs once per round, in an order rotated each round; targets
    /// are judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print one JSON object per system and round, then one per target (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

/// One system's result.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub system: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    pub mb_per_s: f64,
    pub p50_ack_us: f64,
    pub p99_ack_us: f64,
    pub events_per_fsync: f64,
    /// How the run was bounded or anything else a reader must know.
    pub note: String,
}

fn key_of(j: u64) -> String {
    format!("users/{}", j % NODES)
}

fn user_bytes(j: u64) -> u64 {
    let node = j % NODES;
    let digits = if node == 0 {
        1
    } else {
        node.ilog10() as u64 + 1
    };
    "users/".len() as u64 + digits + EVENT_JSON.len() as u64
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn row(
    system: &str,
    events: u64,
    bytes: u64,
    elapsed: Duration,
    h: &Histogram<u64>,
    per_sync: f64,
    note: String,
) -> Row {
    let s = elapsed.as_secs_f64();
    Row {
        system: system.to_owned(),
        events,
        seconds: s,
        events_per_s: events as f64 / s,
        mb_per_s: bytes as f64 / s / 1e6,
        p50_ack_us: h.value_at_quantile(0.5) as f64,
        p99_ack_us: h.value_at_quantile(0.99) as f64,
        events_per_fsync: per_sync,
        note,
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.events > 0 && args.concurrency > 0,
        "--events and --concurrency must be > 0"
    );
    let systems: Vec<&str> = args.systems.split(',').map(str::trim).collect();
    for system in &systems {
        anyhow::ensure!(
            SYSTEMS.contains(system),
            "unknown system {system:?}; known: {}",
            SYSTEMS.join(", ")
        );
    }
    anyhow::ensure!(args.rounds > 0, "--rounds must be > 0");
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    // The device probe syncs at the bytes per sync Spindle reached; if it runs before
    // Spindle in the first round, a short Spindle run measures that first.
    let mut spindle_batch_bytes = None;
    if systems.contains(&"device") && systems.first() != Some(&"spindle") {
        let warm = Args {
            events: (args.events / 10).max(1),
            ..args.clone()
        };
        let dir = tempfile::Builder::new()
            .prefix("calibrate")
            .tempdir_in(&args.dir)?;
        eprintln!("bench log: measuring Spindle's bytes per sync for the device probe ...");
        spindle_batch_bytes = Some(
            spindle(
                "spindle",
                &warm,
                dir.path(),
                SyncMode::Data,
                args.group,
                false,
            )?
            .1,
        );
    }
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    for round in 0..args.rounds {
        let mut rows = Vec::new();
        for system in round_order(&systems, round) {
            let dir = tempfile::Builder::new()
                .prefix(system)
                .tempdir_in(&args.dir)?;
            eprintln!(
                "bench log: round {}/{}: running {system} ...",
                round + 1,
                args.rounds
            );
            let row = match system {
                "spindle" => {
                    let (row, batch) =
                        spindle(system, args, dir.path(), SyncMode::Data, args.group, false)?;
                    spindle_batch_bytes = Some(batch);
                    row
                }
                "spindle-nosync" => {
                    spindle(system, args, dir.path(), SyncMode::Off, args.group, false)?.0
                }
                "spindle-single" => spindle(system, args, dir.path(), SyncMode::Data, 1, true)?.0,
                "spindle-lone" => {
                    let lone = Args {
                        concurrency: 1,
                        ..args.clone()
                    };
                    spindle(system, &lone, dir.path(), SyncMode::Data, 1, true)?.0
                }
                "rocksdb-wal-sync" => rocksdb_peer(args, dir.path())?,
                "sqlite-full" => sqlite_peer(args, dir.path())?,
                "device" => {
                    let batch =
                        spindle_batch_bytes.unwrap_or((args.concurrency as u64 * 70).max(70));
                    device(system, args, dir.path(), batch)?
                }
                "device-lone" => device(system, args, dir.path(), frame_bytes_per_event())?,
                other => anyhow::bail!("unknown system {other:?}"),
            };
            eprintln!("bench log: {system}: {:.0} events/s", row.events_per_s);
            rows.push(row);
        }
        rounds.push(rows);
    }
    let _ = std::fs::remove_dir(&args.dir);
    let summaries = verdicts(&rounds);
    if args.json {
        return print_rounds_json(&rounds, &summaries);
    }
    print_medians(&systems, &rounds);
    println!();
    print_summaries(&summaries);
    Ok(())
}

/// The row of `system` in one round.
fn find<'a>(rows: &'a [Row], system: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system)
}

/// Per round, `f(a, b)` where both systems ran.
fn per_round(rounds: &[Vec<Row>], a: &str, b: &str, f: impl Fn(&Row, &Row) -> f64) -> Vec<f64> {
    crate::report::per_round(rounds, |rows| Some(f(find(rows, a)?, find(rows, b)?)))
}

/// The targets of `bench log` (issue bars), each judged on the median of its rounds.
fn verdicts(rounds: &[Vec<Row>]) -> Vec<Summary> {
    let rate = |a: &Row, b: &Row| a.events_per_s / b.events_per_s;
    let spindle_rate: Vec<f64> = rounds
        .iter()
        .filter_map(|rows| Some(find(rows, "spindle")?.events_per_s))
        .collect();
    [
        Summary::judge(
            "spindle / spindle-nosync (events/s)",
            &per_round(rounds, "spindle", "spindle-nosync", rate),
            Target::AtLeast(0.85),
        ),
        Summary::judge(
            "spindle / device (events/s at the same bytes per sync)",
            &per_round(rounds, "spindle", "device", rate),
            Target::AtLeast(0.90),
        ),
        Summary::judge(
            "spindle durable events/s",
            &spindle_rate,
            Target::AtLeast(3_000_000.0),
        ),
        Summary::judge(
            "spindle-lone p50 ack / device-lone p50 fdatasync",
            &per_round(rounds, "spindle-lone", "device-lone", |a, b| {
                a.p50_ack_us / b.p50_ack_us
            }),
            Target::AtMost(1.25),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One line per system: the median, smallest and largest of its rounds.
fn print_medians(systems: &[&str], rounds: &[Vec<Row>]) {
    let spread = |system: &str, f: &dyn Fn(&Row) -> f64| {
        let v: Vec<f64> = rounds
            .iter()
            .filter_map(|rows| find(rows, system).map(f))
            .collect();
        Spread::of(&v)
    };
    let table: Vec<Vec<String>> = systems
        .iter()
        .map(|&system| {
            let rate = spread(system, &|r| r.events_per_s);
            let p50 = spread(system, &|r| r.p50_ack_us);
            let p99 = spread(system, &|r| r.p99_ack_us);
            let per_sync = spread(system, &|r| r.events_per_fsync);
            let median = |s: Option<Spread>, digits: usize| {
                s.map_or("-".into(), |s| format!("{:.digits$}", s.median))
            };
            let note = rounds
                .last()
                .and_then(|rows| find(rows, system))
                .map_or(String::new(), |r| r.note.clone());
            vec![
                system.to_owned(),
                median(rate, 0),
                rate.map_or("-".into(), |s| format!("{:.0} – {:.0}", s.min, s.max)),
                median(p50, 0),
                median(p99, 0),
                median(per_sync, 1),
                note,
            ]
        })
        .collect();
    print_table(
        &[
            "system",
            "events/s (median)",
            "range",
            "p50 ack µs",
            "p99 ack µs",
            "events/fsync",
            "note (last round)",
        ],
        &table,
    );
}

/// Spindle's file log driven by one client thread keeping `concurrency` transactions in
/// flight, handed over in submissions of up to `group` independent transactions (each with
/// its own commit index and outcome). With `group = 1` every append is its own future.
fn spindle(
    system: &str,
    args: &Args,
    dir: &std::path::Path,
    sync: SyncMode,
    group: usize,
    bounded: bool,
) -> anyhow::Result<(Row, u64)> {
    let log = FileLog::open(
        dir,
        LogConfig {
            sync,
            ..LogConfig::default()
        },
    )?;
    let value = Value::json(EVENT_JSON)?;
    // Every event on node users/j is the same transaction: build each once and reuse it.
    let txns: Vec<Transaction> = (0..NODES)
        .map(|j| {
            Ok(Transaction::single(
                ItemKey::node(key_of(j))?,
                value.clone(),
            ))
        })
        .collect::<Result<_, spindle_core::InputError>>()?;
    let group = group.clamp(1, args.concurrency);
    let limit = Duration::from_secs(args.peer_seconds);
    let mut h = histogram();
    let mut bytes = 0u64;
    let start = Instant::now();
    let done = futures::executor::block_on(async {
        let mut inflight = FuturesUnordered::new();
        let (mut next, mut done, mut outstanding) = (0u64, 0u64, 0usize);
        loop {
            let open = !bounded || start.elapsed() < limit;
            while open && next < args.events && outstanding + group <= args.concurrency.max(group) {
                let s = (next % NODES) as usize;
                let n = group
                    .min(NODES as usize - s)
                    .min((args.events - next) as usize);
                let slice = &txns[s..s + n];
                let log = &log;
                inflight.push(async move {
                    let t = Instant::now();
                    let r = log.append_many(slice).await;
                    (r, t.elapsed())
                });
                bytes += (next..next + n as u64).map(user_bytes).sum::<u64>();
                next += n as u64;
                outstanding += n;
            }
            let Some((results, took)) = inflight.next().await else {
                break;
            };
            let micros = (took.as_micros() as u64).max(1);
            for r in &results {
                r.as_ref()
                    .map_err(|e| anyhow::anyhow!("append failed: {e}"))?;
                h.record(micros)?;
            }
            outstanding -= results.len();
            done += results.len() as u64;
        }
        anyhow::Ok(done)
    })?;
    let elapsed = start.elapsed();
    let stats = log.stats();
    let syncs = stats.syncs.load(std::sync::atomic::Ordering::Relaxed);
    let batches = stats
        .batches
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(1);
    let durable_bytes = log_bytes(dir)?;
    log.close();
    let per_sync = if syncs > 0 {
        done as f64 / syncs as f64
    } else {
        0.0
    };
    let mut note = match sync {
        SyncMode::Data => format!(
            "{syncs} fdatasyncs, {:.0} B per sync",
            durable_bytes as f64 / syncs.max(1) as f64
        ),
        SyncMode::Off => "no fdatasync: not durable".to_owned(),
    };
    note = format!("submissions of {group}; {note}");
    let deadline = deadline_note(done, args.events, args.peer_seconds);
    if bounded && !deadline.is_empty() {
        note = format!("{note}; {deadline}");
    }
    let per_sync_bytes = durable_bytes / if syncs > 0 { syncs } else { batches };
    Ok((
        row(system, done, bytes, elapsed, &h, per_sync, note),
        per_sync_bytes,
    ))
}

/// Bytes of frames in the log's segments.
fn log_bytes(dir: &std::path::Path) -> anyhow::Result<u64> {
    let report = spindle_log::inspect::inspect(dir)?;
    Ok(report
        .segments
        .iter()
        .map(|s| s.used_bytes - spindle_log::segment::SEGMENT_HEADER_BYTES)
        .sum())
}

fn deadline_note(done: u64, wanted: u64, secs: u64) -> String {
    if done < wanted {
        format!("time-bounded: {secs} s, {done} of {wanted} events")
    } else {
        String::new()
    }
}

/// RocksDB: 64 threads doing `sync=true` puts (RocksDB group-commits its WAL across them).
fn rocksdb_peer(args: &Args, dir: &std::path::Path) -> anyhow::Result<Row> {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.enable_statistics();
    let db = rocksdb::DB::open(&opts, dir)?;
    let threads = 64u64;
    let limit = Duration::from_secs(args.peer_seconds);
    let start = Instant::now();
    let results: Vec<anyhow::Result<(u64, u64, Histogram<u64>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = &db;
                s.spawn(move || {
                    let mut wo = rocksdb::WriteOptions::default();
                    wo.set_sync(true);
                    let mut h = histogram();
                    let (mut n, mut bytes) = (0u64, 0u64);
                    let mut j = t;
                    while j < args.events && start.elapsed() < limit {
                        let t0 = Instant::now();
                        db.put_opt(key_of(j).as_bytes(), EVENT_JSON.as_bytes(), &wo)?;
                        h.record((t0.elapsed().as_micros() as u64).max(1))?;
                        n += 1;
                        bytes += user_bytes(j);
                        j += threads;
                    }
                    Ok((n, bytes, h))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rocksdb thread"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut h = histogram();
    let (mut n, mut bytes) = (0, 0);
    for r in results {
        let (tn, tb, th) = r?;
        n += tn;
        bytes += tb;
        h.add(th)?;
    }
    let syncs = opts.get_ticker_count(rocksdb::statistics::Ticker::WalFileSynced);
    let per_sync = if syncs > 0 {
        n as f64 / syncs as f64
    } else {
        0.0
    };
    let mut note = deadline_note(n, args.events, args.peer_seconds);
    note = format!("64 threads; {note}");
    Ok(row(
        "rocksdb-wal-sync",
        n,
        bytes,
        elapsed,
        &h,
        per_sync,
        note,
    ))
}

/// SQLite: WAL, synchronous=FULL, one transaction per event, one connection.
fn sqlite_peer(args: &Args, dir: &std::path::Path) -> anyhow::Result<Row> {
    let conn = rusqlite::Connection::open(dir.join("events.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, item TEXT NOT NULL, value TEXT NOT NULL)",
        [],
    )?;
    let limit = Duration::from_secs(args.peer_seconds);
    let mut stmt = conn.prepare("INSERT INTO events (item, value) VALUES (?1, ?2)")?;
    let mut h = histogram();
    let (mut n, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    while n < args.events && start.elapsed() < limit {
        let t0 = Instant::now();
        conn.execute_batch("BEGIN")?;
        stmt.execute((key_of(n), EVENT_JSON))?;
        conn.execute_batch("COMMIT")?;
        h.record((t0.elapsed().as_micros() as u64).max(1))?;
        bytes += user_bytes(n);
        n += 1;
    }
    let elapsed = start.elapsed();
    let note = deadline_note(n, args.events, args.peer_seconds);
    Ok(row("sqlite-full", n, bytes, elapsed, &h, 1.0, note))
}

/// Bytes one event takes in the log: frame header and record header, then the payload.
fn frame_bytes_per_event() -> u64 {
    16 + 1 + 3 + 4 + user_bytes(1)
}

/// The device limit: append `batch_bytes` and fdatasync, repeatedly, into a preallocated
/// file, as the log does; events/s assumes Spindle's bytes per event.
fn device(
    system: &str,
    args: &Args,
    dir: &std::path::Path,
    batch_bytes: u64,
) -> anyhow::Result<Row> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("device.probe");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    // Allocated up front as the log allocates its segments (a sparse file would make every
    // sync also allocate blocks, or none at all where the file system defers it).
    let size = 1u64 << 30;
    rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, size)
        .with_context(|| format!("allocating {size} bytes for {}", path.display()))?;
    let buf = vec![0x5au8; batch_bytes.max(1) as usize];
    let per_event = frame_bytes_per_event() as usize;
    let events_per_batch = (batch_bytes as f64 / per_event as f64).max(1.0);
    let limit = Duration::from_secs(args.peer_seconds.min(10));
    let mut h = histogram();
    let (mut batches, mut offset) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < limit && (batches as f64 * events_per_batch) < args.events as f64 {
        if offset + batch_bytes > size {
            offset = 0;
        }
        let t0 = Instant::now();
        file.write_all_at(&buf, offset)?;
        file.sync_data()?;
        h.record((t0.elapsed().as_micros() as u64).max(1))?;
        offset += batch_bytes;
        batches += 1;
    }
    let elapsed = start.elapsed();
    let events = (batches as f64 * events_per_batch) as u64;
    let bytes = events * user_bytes(1);
    let note = format!("{batches} writes of {batch_bytes} B + fdatasync; p50/p99 are per sync");
    Ok(row(
        system,
        events,
        bytes,
        elapsed,
        &h,
        events_per_batch,
        note,
    ))
}
