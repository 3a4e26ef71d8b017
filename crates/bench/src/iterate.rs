//! `spindle bench iterate`: iteration against a plain RocksDB scan of the same Disk View
//! data, and a Memory View booted from Disk Views against one built by replaying the log.
//!
//! Loads a deterministic synthetic graph (`--nodes --edges --versions --seed`; power-law
//! out-degrees, a few JSON properties per item) through the log into 4 Disk Views, then
//! measures `rocksdb-raw`, `iterate-nothing`, `iterate-all`, `boot-memory-diskviews` and
//! `boot-memory-replay` once per round (`--rounds`), in an order rotated each round (the
//! data is built once, before the first round). Prints per system the median, min and max
//! of its seconds and, per target, the median of the per-round ratios with its range; with
//! `--json` one object per measurement (`round, system, items, bytes, seconds, mib_per_s`)
//! and one summary object per target.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use spindle_core::{Index, Partition, Transaction};
use spindle_log::{FileLog, LogConfig, SyncMode};
use spindle_view::frame::{FrameReader, FrameRef};

use crate::graph::{generate, GraphSpec};
use crate::report::{
    per_round, print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary,
    Target,
};
use spindle_view::{
    follow, select, BootProgress, CatalogEntry, DiskView, IterRequest, MemoryView, Role,
    SelectRequest,
};

const VIEWS: u64 = 4;
const TXN_WRITES: usize = 64;
const FILL_BYTES: usize = 1 << 20;

/// Options of `spindle bench iterate`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Nodes in the synthetic graph.
    #[arg(long, default_value_t = 50_000)]
    pub nodes: u64,
    /// Edges (power-law out-degrees).
    #[arg(long, default_value_t = 200_000)]
    pub edges: u64,
    /// Versions per item on average.
    #[arg(long, default_value_t = 4)]
    pub versions: u64,
    /// Seed of the deterministic generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the log and the Disk Views (a real disk); removed afterwards.
    #[arg(long, default_value = ".")]
    pub dir: std::path::PathBuf,
    /// Rounds: every system runs once per round, in an order rotated each round; targets are
    /// judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Print one JSON object per measurement (with its `round`), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

fn spec(a: &Args) -> GraphSpec {
    GraphSpec {
        nodes: a.nodes,
        edges: a.edges,
        versions: a.versions,
        seed: a.seed,
    }
}

/// Append the graph's writes to `log` in transactions of `TXN_WRITES` writes. Returns the
/// number of writes.
pub(crate) fn load(spec: &GraphSpec, log: &FileLog) -> u64 {
    let mut txns = Vec::new();
    let mut txn = Transaction::new();
    let writes = generate(spec, |key, value| {
        txn = std::mem::take(&mut txn).write(key, value);
        if txn.writes.len() == TXN_WRITES {
            txns.push(std::mem::take(&mut txn));
        }
        if txns.len() == 64 {
            for r in futures_block_on(log.append_many(&txns)) {
                r.unwrap();
            }
            txns.clear();
        }
    });
    if !txn.writes.is_empty() {
        txns.push(txn);
    }
    for r in futures_block_on(log.append_many(&txns)) {
        r.unwrap();
    }
    writes
}

pub(crate) fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[derive(Debug, Serialize)]
struct Row {
    system: &'static str,
    items: u64,
    bytes: u64,
    seconds: f64,
    mib_per_s: f64,
}

const SYSTEMS: [&str; 5] = [
    "rocksdb-raw",
    "iterate-nothing",
    "iterate-all",
    "boot-memory-diskviews",
    "boot-memory-replay",
];

fn find<'a>(rows: &'a [Row], system: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system)
}

/// The targets, each judged on the median of its per-round ratios of seconds.
fn verdicts(rounds: &[Vec<Row>]) -> Vec<Summary> {
    let ratio = |a: &str, b: &str| {
        per_round(rounds, |rows| {
            Some(find(rows, a)?.seconds / find(rows, b)?.seconds)
        })
    };
    [
        Summary::judge(
            "iterate-nothing / rocksdb-raw (seconds)",
            &ratio("iterate-nothing", "rocksdb-raw"),
            Target::AtMost(1.05),
        ),
        Summary::judge(
            "iterate-all / rocksdb-raw (seconds)",
            &ratio("iterate-all", "rocksdb-raw"),
            Target::AtMost(1.15),
        ),
        Summary::judge(
            "boot-memory-replay / boot-memory-diskviews (seconds)",
            &ratio("boot-memory-replay", "boot-memory-diskviews"),
            Target::AtLeast(2.5),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn print(rounds: &[Vec<Row>]) {
    let rows: Vec<(String, Vec<_>)> = SYSTEMS
        .iter()
        .map(|&system| {
            let spread = |f: fn(&Row) -> f64| spread_of(rounds, |rows| find(rows, system), f);
            let items = rounds
                .first()
                .and_then(|rows| find(rows, system))
                .map_or(0, |r| r.items);
            (
                format!("{system} ({items} items)"),
                vec![
                    spread(|r| r.seconds),
                    spread(|r| r.mib_per_s),
                    spread(|r| r.items as f64 / r.seconds),
                ],
            )
        })
        .collect();
    print_spreads(
        "system",
        &[("seconds", 3), ("MiB/s", 1), ("items/s", 0)],
        &rows,
    );
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.nodes > 0, "--nodes must be > 0");
    anyhow::ensure!(args.versions > 0, "--versions must be > 0");
    anyhow::ensure!(args.rounds > 0, "--rounds must be > 0");
    let a = args;
    std::fs::create_dir_all(&a.dir)
        .map_err(|e| anyhow::anyhow!("creating {}: {e}", a.dir.display()))?;
    let dir = tempfile::Builder::new()
        .prefix("spindle-iterate-")
        .tempdir_in(&a.dir)
        .map_err(|e| anyhow::anyhow!("making a directory in {}: {e}", a.dir.display()))?;
    let config = LogConfig {
        sync: SyncMode::Off,
        ..LogConfig::default()
    };
    let log = FileLog::open(dir.path().join("log"), config).unwrap();
    let t = Instant::now();
    let writes = load(&spec(a), &log);
    eprintln!("loaded {writes} writes into the log in {:.1?}", t.elapsed());
    let views: Vec<DiskView> = (0..VIEWS)
        .map(|i| {
            DiskView::open(
                dir.path().join(format!("disk{i}")),
                Partition::nth(i, VIEWS),
            )
            .unwrap()
        })
        .collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for v in &views {
            let log = &log;
            s.spawn(move || futures_block_on(follow::catch_up(v, log)).unwrap());
        }
    });
    eprintln!("applied into {VIEWS} disk views in {:.1?}", t.elapsed());
    for v in &views {
        v.flush().unwrap();
    }
    let catalog: Vec<CatalogEntry> = views
        .iter()
        .enumerate()
        .map(|(i, v)| CatalogEntry {
            id: format!("disk{i}"),
            range: v.partition(),
            applied: v.applied_index(),
            role: Role::Iteration,
        })
        .collect();
    let by_id: HashMap<String, &DiskView> = catalog
        .iter()
        .map(|c| c.id.clone())
        .zip(views.iter())
        .collect();
    let boot = || {
        let plan = select(
            &catalog,
            &SelectRequest {
                range: Partition::ALL,
                role: Role::Iteration,
                head: log.durable_index(),
                lag_records_max: 0,
            },
        )
        .unwrap();
        let progress = BootProgress::default();
        let booted = MemoryView::boot(
            Partition::ALL,
            &plan,
            |id| by_id.get(id).copied(),
            &progress,
        )
        .unwrap();
        (booted, progress)
    };
    let replay = || {
        let replayed = MemoryView::new(Partition::ALL);
        futures_block_on(follow::catch_up(&replayed, &log)).unwrap();
        replayed
    };
    let log_bytes: u64 = std::fs::read_dir(dir.path().join("log"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let raw_totals = views.iter().fold((0, 0), |(i, b), v| {
        let (vi, vb) = v.raw_scan(v.partition()).unwrap(); // also warms the page cache
        (i + vi, b + vb)
    });

    // Each system returns (items, bytes) and is timed; every round runs them all, in an
    // order rotated each round, so machine noise and order effects fall on all of them.
    type Measure<'a> = Box<dyn FnMut() -> (u64, u64) + 'a>;
    let mut systems: Vec<(&'static str, Measure)> = vec![
        // A plain iterator over the same key ranges with the same read options.
        (
            "rocksdb-raw",
            Box::new(|| {
                views.iter().fold((0, 0), |(i, b), v| {
                    let (vi, vb) = v.raw_scan(v.partition()).unwrap();
                    (i + vi, b + vb)
                })
            }),
        ),
        // Scans every version, sends (almost) none: the cut is index 1. Reported against
        // what it scanned, like the raw scan.
        (
            "iterate-nothing",
            Box::new(|| {
                for v in &views {
                    let mut req = IterRequest::range(v.partition());
                    req.to = Some(Index::FIRST);
                    drain(v, &req);
                }
                raw_totals
            }),
        ),
        // Every version delivered to a consumer that walks each frame.
        (
            "iterate-all",
            Box::new(|| {
                views.iter().fold((0, 0), |(i, b), v| {
                    let (vi, vb) = drain(v, &IterRequest::range(v.partition()));
                    (i + vi, b + vb)
                })
            }),
        ),
        // Select sources, iterate them concurrently, latest only.
        (
            "boot-memory-diskviews",
            Box::new(|| {
                let (_, progress) = boot();
                let r = progress.report(std::time::Duration::from_secs(1), None);
                (r.items, r.bytes)
            }),
        ),
        // The same Memory View from the whole log.
        (
            "boot-memory-replay",
            Box::new(|| {
                replay();
                (writes, log_bytes)
            }),
        ),
    ];
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    let indexes: Vec<usize> = (0..systems.len()).collect();
    for round in 0..a.rounds {
        let mut rows = Vec::new();
        for i in round_order(&indexes, round) {
            let (system, measure) = &mut systems[i];
            let system: &'static str = system;
            eprintln!(
                "bench iterate: round {}/{}: {system} ...",
                round + 1,
                a.rounds
            );
            let t = Instant::now();
            let (items, bytes) = measure();
            let seconds = t.elapsed().as_secs_f64();
            rows.push(Row {
                system,
                items,
                bytes,
                seconds,
                mib_per_s: bytes as f64 / (1 << 20) as f64 / seconds,
            });
        }
        rounds.push(rows);
    }
    drop(systems);
    assert_eq!(
        boot().0.snapshot(),
        replay().snapshot(),
        "boot and replay must agree"
    );
    let summaries = verdicts(&rounds);
    if a.json {
        return print_rounds_json(&rounds, &summaries);
    }
    print(&rounds);
    println!();
    print_summaries(&summaries);
    Ok(())
}

/// Run an iteration to its end with a consumer that walks every frame.
fn drain(view: &DiskView, req: &IterRequest) -> (u64, u64) {
    let mut it = view.iterate(req).unwrap();
    let mut buf = Vec::with_capacity(FILL_BYTES + (64 << 10));
    let (mut frames, mut bytes) = (0u64, 0u64);
    loop {
        buf.clear();
        let done = it.fill(&mut buf, FILL_BYTES).unwrap();
        bytes += buf.len() as u64;
        // The consumer walks every frame, borrowing keys and values (no copies).
        let mut reader = FrameReader::new(&buf);
        while let Some(f) = reader.next_ref() {
            if let FrameRef::Version { .. } = f.unwrap() {
                frames += 1;
            }
        }
        if done {
            return (frames, bytes);
        }
    }
}
