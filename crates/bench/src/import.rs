//! `spindle bench import`: the offline bulk import against the online path and the log's own
//! cost, on the same `spindle gen` graph file, in one run.
//!
//! - `import`: `spindle import` (a child process) into a new data directory; afterwards a
//!   `spindle serve` child is started on it and must report every Disk View at the last
//!   index (not timed), so an import that does not serve fails the bench.
//! - `online-load`: a `spindle serve` child (Disk Views only, no Memory View, like the
//!   import) and `spindle load` of the file through the HTTP API; timed until every Disk View
//!   has applied the last write.
//! - `log-only`: the import's first pass without the sort and views: every record parsed,
//!   written into log segments and synced.
//!
//! `items` in the output counts records (lines; each is one version of one item). The input
//! is written once; `--rounds` runs the three systems once per round, in an order rotated
//! each round, and judges the target (import at least 5× the online load) on the median of
//! the per-round ratios. With `--json`: one object per system and round, `round, system,
//! items, bytes, seconds, items_per_s, mb_per_s`, then one summary object per target.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use serde::Serialize;

use crate::graph::{generate, json_line, GraphSpec};
use crate::report::{
    per_round, print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary,
    Target,
};
use crate::serve_child::ServeChild;

/// Longest wait for a node to apply everything.
const APPLY_TIMEOUT: Duration = Duration::from_secs(3600);

/// Options of `spindle bench import`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Distinct items of the graph (1 in 5 a node, the rest edges).
    #[arg(long, default_value_t = 2_000_000)]
    pub items: u64,
    /// Versions per item on average.
    #[arg(long, default_value_t = 3)]
    pub versions: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Disk View partitions.
    #[arg(long, default_value_t = 4)]
    pub disk_partitions: u64,
    /// The import's sort memory, in bytes.
    #[arg(long, default_value_t = 512 << 20)]
    pub memory: u64,
    /// Directory for the input and the data directories (a real disk); removed afterwards.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Rounds: every system runs once per round, in an order rotated each round; the target
    /// is judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print one JSON object per system and round (with its `round`), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    system: &'static str,
    items: u64,
    bytes: u64,
    seconds: f64,
    items_per_s: f64,
    mb_per_s: f64,
}

impl Row {
    fn new(system: &'static str, items: u64, bytes: u64, seconds: f64) -> Row {
        Row {
            system,
            items,
            bytes,
            seconds,
            items_per_s: items as f64 / seconds,
            mb_per_s: bytes as f64 / 1e6 / seconds,
        }
    }
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    ensure!(a.items >= 5, "--items must be at least 5");
    ensure!(a.rounds > 0, "--rounds must be > 0");
    ensure!(
        a.disk_partitions >= 1,
        "--disk-partitions must be at least 1"
    );
    std::fs::create_dir_all(&a.dir)?;
    let temp = tempfile::Builder::new()
        .prefix("spindle-import-")
        .tempdir_in(&a.dir)?;
    let base = temp.path();
    let input = base.join("items.jsonl");
    let (records, bytes) = write_input(a, &input)?;
    eprintln!("input: {records} records, {:.1} MB", bytes as f64 / 1e6);
    let exe = std::env::current_exe()?;

    let mut rounds: Vec<Vec<Row>> = Vec::new();
    for round in 0..a.rounds {
        let mut rows = Vec::new();
        for system in round_order(&SYSTEMS, round) {
            eprintln!(
                "bench import: round {}/{}: {system} ...",
                round + 1,
                a.rounds
            );
            let seconds = match system {
                "log-only" => measure_log_only(a, base, &input)?,
                "import" => measure_import(a, &exe, base, &input, records)?,
                "online-load" => measure_online(a, &exe, base, &input, records)?,
                other => unreachable!("unknown system {other}"),
            };
            eprintln!("{system}: {seconds:.2}s");
            rows.push(Row::new(system, records, bytes, seconds));
        }
        rounds.push(rows);
    }
    let find = |rows: &[Row], system: &str| rows.iter().position(|r| r.system == system);
    let speedup = per_round(&rounds, |rows| {
        Some(rows[find(rows, "online-load")?].seconds / rows[find(rows, "import")?].seconds)
    });
    let summaries: Vec<Summary> = Summary::judge(
        "online-load seconds / import seconds",
        &speedup,
        Target::AtLeast(5.0),
    )
    .into_iter()
    .collect();
    if a.json {
        return print_rounds_json(&rounds, &summaries);
    }
    let rows: Vec<(String, Vec<_>)> = SYSTEMS
        .iter()
        .map(|&system| {
            let spread = |f: fn(&Row) -> f64| {
                spread_of(&rounds, |rows| rows.iter().find(|r| r.system == system), f)
            };
            (
                format!("{system} ({records} records, {:.1} MB)", bytes as f64 / 1e6),
                vec![
                    spread(|r| r.seconds),
                    spread(|r| r.items_per_s),
                    spread(|r| r.mb_per_s),
                ],
            )
        })
        .collect();
    print_spreads(
        "system",
        &[("seconds", 2), ("records/s", 0), ("MB/s", 1)],
        &rows,
    );
    println!();
    print_summaries(&summaries);
    Ok(())
}

const SYSTEMS: [&str; 3] = ["import", "online-load", "log-only"];

/// The graph as `spindle gen` writes it. Returns (records, bytes).
fn write_input(a: &Args, path: &Path) -> anyhow::Result<(u64, u64)> {
    let nodes = (a.items / 5).max(1);
    let spec = GraphSpec {
        nodes,
        edges: a.items - nodes,
        versions: a.versions,
        seed: a.seed,
    };
    let mut out = BufWriter::new(File::create(path)?);
    let mut failed = None;
    let records = generate(&spec, |key, value| {
        if failed.is_none() {
            if let Err(e) = writeln!(out, "{}", json_line(&key, &value)) {
                failed = Some(e);
            }
        }
    });
    if let Some(e) = failed {
        return Err(e).context("writing the input");
    }
    out.flush()?;
    Ok((records, std::fs::metadata(path)?.len()))
}

fn measure_log_only(a: &Args, base: &Path, input: &Path) -> anyhow::Result<f64> {
    let data = base.join("log-only");
    let opts = spindle_sort::import::ImportOptions {
        data_dir: data.clone(),
        disk_partitions: a.disk_partitions,
        sort_memory_bytes: a.memory,
        tmp_dir: None,
        threads: 1,
        skip_bad: false,
        parse_chunk_bytes: spindle_sort::import::PARSE_CHUNK_BYTES,
        log_only: true,
    };
    let start = Instant::now();
    spindle_sort::import::import(&opts, &[input.to_path_buf()], &spindle_sort::import::Quiet)?;
    let secs = start.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&data)?;
    Ok(secs)
}

fn serve_args(a: &Args, data: &Path) -> Vec<String> {
    let mut args: Vec<String> = vec!["--data-dir".into(), data.to_string_lossy().into_owned()];
    args.extend(
        [
            "--disk-partitions",
            &a.disk_partitions.to_string(),
            "--no-memory-view",
            "--no-truncate",
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ]
        .map(str::to_owned),
    );
    args
}

/// Every Disk View has applied `records` (and the log holds exactly that many).
fn views_applied(status: &serde_json::Value, records: u64) -> bool {
    let durable = status["log"]["durable_index"].as_u64();
    durable == Some(records)
        && status["views"].as_array().is_some_and(|views| {
            let disks: Vec<_> = views.iter().filter(|v| v["kind"] == "disk").collect();
            !disks.is_empty()
                && disks
                    .iter()
                    .all(|v| v["applied_index"].as_u64() == Some(records))
        })
}

fn measure_import(
    a: &Args,
    exe: &Path,
    base: &Path,
    input: &Path,
    records: u64,
) -> anyhow::Result<f64> {
    let data = base.join("imported");
    let start = Instant::now();
    let out = Command::new(exe)
        .arg("import")
        .arg("--data")
        .arg(&data)
        .args(["--disk-partitions", &a.disk_partitions.to_string()])
        .args(["--memory", &a.memory.to_string()])
        .arg(input)
        .env("RUST_LOG", "warn")
        .output()
        .context("running spindle import")?;
    let secs = start.elapsed().as_secs_f64();
    ensure!(
        out.status.success(),
        "spindle import failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut server = ServeChild::start(exe, &serve_args(a, &data))?;
    server.wait_until("the imported Disk Views serve", APPLY_TIMEOUT, |s| {
        views_applied(s, records)
    })?;
    server.stop()?;
    std::fs::remove_dir_all(&data)?;
    Ok(secs)
}

fn measure_online(
    a: &Args,
    exe: &Path,
    base: &Path,
    input: &Path,
    records: u64,
) -> anyhow::Result<f64> {
    let data = base.join("online");
    let mut server = ServeChild::start(exe, &serve_args(a, &data))?;
    let start = Instant::now();
    let out = Command::new(exe)
        .arg("load")
        .args(["--server", &server.http_addr])
        .arg(input)
        .env("RUST_LOG", "warn")
        .output()
        .context("running spindle load")?;
    ensure!(
        out.status.success(),
        "spindle load failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    server.wait_until("every Disk View applied the load", APPLY_TIMEOUT, |s| {
        views_applied(s, records)
    })?;
    let secs = start.elapsed().as_secs_f64();
    server.stop()?;
    std::fs::remove_dir_all(&data)?;
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_count_as_applied_only_when_every_disk_view_is_at_the_end() {
        let status = |a: u64, b: u64| {
            serde_json::json!({
                "log": {"durable_index": 10},
                "views": [
                    {"kind": "disk", "applied_index": a},
                    {"kind": "disk", "applied_index": b},
                    {"kind": "memory", "applied_index": 0},
                ]
            })
        };
        assert!(views_applied(&status(10, 10), 10));
        assert!(!views_applied(&status(10, 9), 10));
        assert!(!views_applied(&status(10, 10), 11));
    }
}
