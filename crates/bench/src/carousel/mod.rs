//! `spindle bench carousel`: Beam's Appendices A and B in one run. One Disk View of
//! `--items` items (several versions each) is served by a `spindle serve` child that reads
//! it as a view larger than memory would be read: table files with O_DIRECT and a block
//! cache much smaller than the data, so concurrent scans really compete for the disk.
//! Riders are separate `spindle ride` processes over loopback gRPC that only count what
//! they receive.
//!
//! Four runs, `--rounds` times, their order rotated each round (the first round: one rider
//! on the carousel, one on a dedicated iterator, then `--riders` riders started together on
//! the carousel, then as many on dedicated iterators). For each rider its time and MiB/s;
//! for each run the bytes the server read from storage and its CPU seconds
//! (`/proc/<pid>/io` and `/proc/<pid>/stat`, before and after). Prints Markdown tables and
//! the targets judged on the median of the per-round ratios, or with `--json` one object
//! per rider (`round, mode, riders, rider, seconds, mib_per_s`) and one per run (`round,
//! mode, riders, storage_read_bytes, data_bytes, server_cpu_s, demotions`), then one summary
//! object per target.
//!
//! The data is built offline first (the log, then the view in `views/disk-0-of-1`, the
//! layout `spindle serve` opens), flushed and compacted into settled levels, so the node
//! reads nothing of its own while it is measured. `data_bytes` is the size of the view's
//! table files: what one full scan must read from storage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use serde_json::Value;

use crate::graph::GraphSpec;
use crate::serve_child::ServeChild;

mod data;
mod report;

/// The one Disk View `spindle serve --disk-partitions 1` serves.
const VIEW: &str = "disk-0";
/// Longest the node may take to open and catch up with the log.
const READY_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest the carousel may take to stop after its last rider left.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a run looks at the carousel's riders for demotions.
const STATUS_POLL: Duration = Duration::from_millis(250);
const MIB: f64 = (1 << 20) as f64;

/// Options of `spindle bench carousel`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Items (nodes + edges) in the synthetic graph; a fifth of them are nodes.
    #[arg(long, default_value_t = 2_000_000)]
    pub items: u64,
    /// Versions per item on average.
    #[arg(long, default_value_t = 3)]
    pub versions: u64,
    /// Seed of the deterministic generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Riders started together in the multi-rider runs.
    #[arg(long, default_value_t = 5)]
    pub riders: usize,
    /// Rounds: the four runs once each per round, in an order rotated each round; targets
    /// are judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// RocksDB block cache of the served view, in bytes (much smaller than the data).
    #[arg(long, default_value_t = 8 << 20)]
    pub block_cache_bytes: usize,
    /// Read the table files through the page cache instead of with O_DIRECT (their pages
    /// are dropped before every run either way).
    #[arg(long)]
    pub buffered: bool,
    /// Directory on a real disk for the data (default: the system's temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the data in DIR/spindle-carousel-ITEMS-VERSIONS-SEED and reuse it when it is
    /// there (instead of a temporary directory removed afterwards).
    #[arg(long)]
    pub keep: bool,
    /// Print one JSON object per rider and per run (with its `round`), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

fn spec(a: &Args) -> GraphSpec {
    let nodes = (a.items / 5).max(1);
    GraphSpec {
        nodes,
        edges: a.items - nodes,
        versions: a.versions,
        seed: a.seed,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Carousel,
    Dedicated,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Carousel => "carousel",
            Mode::Dedicated => "dedicated",
        }
    }
}

/// What one `spindle ride --json` reported.
#[derive(Clone, Copy, Debug)]
struct Ride {
    seconds: f64,
    bytes: u64,
    frames: u64,
    mib_per_s: f64,
}

/// One run: its riders and what the server spent on them.
#[derive(Debug)]
struct Run {
    round: usize,
    mode: Mode,
    rides: Vec<Ride>,
    storage_read_bytes: u64,
    server_cpu_s: f64,
    /// From starting the first rider to the exit of the last.
    wall_s: f64,
    /// Carousel riders seen moved onto their own iterator (the status is polled, so a
    /// demotion of a rider that left between two looks is missed).
    demotions: u64,
}

impl Run {
    fn name(&self) -> String {
        format!("{}-{}", self.mode.name(), self.rides.len())
    }

    fn slowest(&self) -> Ride {
        *self
            .rides
            .iter()
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
            .expect("a run has riders")
    }

    fn fastest(&self) -> Ride {
        *self
            .rides
            .iter()
            .min_by(|a, b| a.seconds.total_cmp(&b.seconds))
            .expect("a run has riders")
    }

    fn mib(&self) -> f64 {
        self.rides.iter().map(|r| r.bytes as f64).sum::<f64>() / MIB
    }
}

/// The data, as built or found.
#[derive(Debug)]
struct Data {
    writes: u64,
    /// Seconds the build took; `None` when a kept directory was reused.
    build_s: Option<f64>,
    tables: Vec<PathBuf>,
    bytes: u64,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    ensure!(a.items >= 2, "--items must be at least 2");
    ensure!(a.versions > 0, "--versions must be > 0");
    ensure!(a.riders >= 2, "--riders must be at least 2");
    ensure!(a.rounds > 0, "--rounds must be > 0");
    ensure!(a.block_cache_bytes > 0, "--block-cache-bytes must be > 0");
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base)?;
    let (_temp, dir) = if a.keep {
        let s = spec(a);
        let name = format!("spindle-carousel-{}-{}-{}", a.items, s.versions, s.seed);
        (None, base.join(name))
    } else {
        let temp = tempfile::Builder::new()
            .prefix("spindle-carousel-")
            .tempdir_in(&base)?;
        let path = temp.path().to_owned();
        (Some(temp), path)
    };
    let data = data::prepare(&dir, a)?;
    if !a.buffered {
        data::check_direct_reads(&dir)?;
    }
    let exe = std::env::current_exe()?;
    let mut server = ServeChild::start(&exe, &serve_args(&dir, a))?;
    server.wait_until("the Disk View has applied the log", READY_TIMEOUT, |s| {
        view_caught_up(s, data.writes)
    })?;
    let mut runs = Vec::new();
    let kinds = [
        (Mode::Carousel, 1),
        (Mode::Dedicated, 1),
        (Mode::Carousel, a.riders),
        (Mode::Dedicated, a.riders),
    ];
    for round in 0..a.rounds {
        for (mode, riders) in crate::report::round_order(&kinds, round) {
            let run = measure(&mut server, &exe, &data, round, mode, riders)?;
            eprintln!(
                "round {} {}: {:.1}s, slowest rider {:.1} MiB/s, read {:.0} MiB, CPU {:.1}s",
                round + 1,
                run.name(),
                run.wall_s,
                run.slowest().mib_per_s,
                run.storage_read_bytes as f64 / MIB,
                run.server_cpu_s
            );
            runs.push(run);
        }
    }
    server.stop()?;
    same_frames(&runs)?;
    if a.json {
        report::print_json(a, &runs, &data)?;
    } else {
        report::print_markdown(a, &runs, &data);
    }
    if a.keep {
        eprintln!("data kept in {}", dir.display());
    }
    Ok(())
}

fn serve_args(dir: &Path, a: &Args) -> Vec<String> {
    let mut args: Vec<String> = vec!["--data-dir".into(), dir.to_string_lossy().into_owned()];
    args.extend(
        [
            "--disk-partitions",
            "1",
            "--no-memory-view",
            "--no-truncate",
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--disk-block-cache-bytes",
        ]
        .map(str::to_owned),
    );
    args.push(a.block_cache_bytes.to_string());
    if !a.buffered {
        args.push("--disk-direct-reads".into());
    }
    args
}

fn view_caught_up(status: &Value, writes: u64) -> bool {
    let durable = status["log"]["durable_index"].as_u64();
    status["views"].as_array().is_some_and(|views| {
        views.iter().any(|v| {
            v["id"] == VIEW && v["applied_index"].as_u64() == durable && durable >= Some(writes)
        })
    })
}

fn carousel(status: &Value) -> Option<&Value> {
    status["carousels"]
        .as_array()?
        .iter()
        .find(|c| c["view"] == VIEW)
}

/// The scanner stopped and nobody rides (a run's reads and CPU are all in).
fn carousel_idle(status: &Value) -> bool {
    carousel(status)
        .is_some_and(|c| c["running"] == false && c["riders"].as_array().is_some_and(Vec::is_empty))
}

/// One run: drop the table files' cached pages, start the riders together, wait for them.
fn measure(
    server: &mut ServeChild,
    exe: &Path,
    data: &Data,
    round: usize,
    mode: Mode,
    riders: usize,
) -> anyhow::Result<Run> {
    for t in &data.tables {
        let f = std::fs::File::open(t)?;
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    }
    server.wait_until("the carousel is idle", IDLE_TIMEOUT, carousel_idle)?;
    let before = server.sample()?;
    let start = Instant::now();
    let children = (0..riders)
        .map(|_| spawn_rider(exe, &server.grpc, mode))
        .collect::<anyhow::Result<Vec<Child>>>()?;
    let (outputs, wall_s, demotions) = std::thread::scope(|s| {
        let waiter = s.spawn(move || {
            let outputs: Vec<std::io::Result<Output>> =
                children.into_iter().map(Child::wait_with_output).collect();
            (outputs, start.elapsed().as_secs_f64())
        });
        let mut demotions = BTreeMap::new();
        while !waiter.is_finished() {
            if let Some(riders) = server
                .status()
                .ok()
                .and_then(|s| Some(carousel(&s)?["riders"].as_array()?.clone()))
            {
                for r in riders {
                    let (id, d) = (r["id"].as_u64(), r["demotions"].as_u64().unwrap_or(0));
                    let seen = demotions.entry(id).or_insert(0);
                    *seen = d.max(*seen);
                }
            }
            std::thread::sleep(STATUS_POLL);
        }
        let (outputs, wall_s) = waiter.join().expect("waiting for riders does not panic");
        (outputs, wall_s, demotions.values().sum::<u64>())
    });
    server.wait_until("the carousel is idle", IDLE_TIMEOUT, carousel_idle)?;
    let after = server.sample()?;
    let rides = outputs
        .into_iter()
        .enumerate()
        .map(|(i, out)| parse_ride(i + 1, out?))
        .collect::<anyhow::Result<Vec<Ride>>>()?;
    Ok(Run {
        round,
        mode,
        rides,
        storage_read_bytes: after.read_bytes - before.read_bytes,
        server_cpu_s: after.cpu_s - before.cpu_s,
        wall_s,
        demotions,
    })
}

fn spawn_rider(exe: &Path, grpc: &str, mode: Mode) -> anyhow::Result<Child> {
    let mut cmd = Command::new(exe);
    cmd.args(["ride", "--server", grpc, "--view", VIEW, "--json"]);
    if mode == Mode::Dedicated {
        cmd.arg("--dedicated");
    }
    cmd.env("RUST_LOG", "warn")
        .env_remove("SPINDLE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting a rider")
}

fn parse_ride(rider: usize, out: Output) -> anyhow::Result<Ride> {
    ensure!(
        out.status.success(),
        "rider {rider} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let line = String::from_utf8(out.stdout)?;
    let v: Value = serde_json::from_str(line.trim())
        .with_context(|| format!("rider {rider} printed {line:?}"))?;
    let num = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("rider {rider}: no {k} in {v}"))
    };
    Ok(Ride {
        seconds: num("seconds")?,
        bytes: num("bytes")? as u64,
        frames: num("frames")? as u64,
        mib_per_s: num("mib_per_s")?,
    })
}

/// Nothing writes during the runs, so every ride must have received the same frames. (Not
/// the same bytes: the first frame of every chunk carries its item's key, and where chunks
/// are cut depends on the mode and on demotions.)
fn same_frames(runs: &[Run]) -> anyhow::Result<()> {
    let first = runs[0].rides[0];
    for run in runs {
        for (i, r) in run.rides.iter().enumerate() {
            ensure!(
                r.frames == first.frames,
                "rider {} of {} received {} frames; the first rider {}",
                i + 1,
                run.name(),
                r.frames,
                first.frames
            );
        }
    }
    Ok(())
}
