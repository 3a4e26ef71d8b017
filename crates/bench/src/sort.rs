//! `spindle bench sort`: `spindle sort` against GNU sort (`LC_ALL=C sort -S <memory>
//! --parallel=<cores> -T <dir>`) and a `device` probe (read the input and write it, twice,
//! with O_DIRECT and reads overlapped with writes: the 2R+2W floor of an external sort), on
//! the same generated ASCII records in one run.
//!
//! Every output is validated with the checker (sorted, same record count and checksum as
//! the input); a failed validation fails the bench. Both sorts run as child processes, and
//! bytes read and written come from this process's `/proc/self/io`, which includes reaped
//! children. The input is flushed and dropped from the page cache before each system.
//!
//! `--rounds` runs every system once per round on the same input, in an order rotated each
//! round, and judges the targets on the median of the per-round ratios.

mod device;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use serde::Serialize;
use spindle_sort::records::check::{check_file, CheckReport};
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{IoCounters, RECORD_BYTES};

use crate::report::{
    per_round, print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary,
    Target,
};

/// Options of `spindle bench sort`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Input size (rounded down to whole 100-byte records), e.g. 4GiB.
    #[arg(long, default_value = "4GiB", value_parser = spindle_sort::parse_bytes)]
    pub size: u64,
    /// Working memory of both sorts, e.g. 512MiB.
    #[arg(long, default_value = "512MiB", value_parser = spindle_sort::parse_bytes)]
    pub memory: u64,
    /// Directory for the input, outputs and temporary files (default: a new temporary
    /// directory in the system's temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Skewed keys.
    #[arg(long)]
    pub skew: bool,
    /// Systems to run, comma-separated (spindle, gnu-sort, device).
    #[arg(long, value_delimiter = ',', default_value = "spindle,gnu-sort,device")]
    pub systems: Vec<String>,
    /// Rounds: every system runs once per round, in an order rotated each round; targets are
    /// judged on the median of the per-round ratios.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print one JSON object per system and round (with its `round`), then one per target
    /// (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

/// One system's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub system: String,
    pub bytes: u64,
    pub memory_bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub passes: Option<u32>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let owned_dir;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            owned_dir = tempfile::tempdir()?;
            owned_dir.path().to_path_buf()
        }
    };
    let records = args.size / RECORD_BYTES as u64;
    let bytes = records * RECORD_BYTES as u64;
    let input = dir.join("bench-sort-input");
    eprintln!(
        "generating {records} ASCII records ({bytes} bytes){}",
        if args.skew { ", skewed" } else { "" }
    );
    generate(
        &input,
        &GenOptions {
            records,
            ascii: true,
            skew: args.skew,
            seed: 42,
        },
    )?;
    let expected = check_file(&input)?;
    let output = dir.join("bench-sort-output");
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    let result = (|| {
        for round in 0..args.rounds {
            let mut rows = Vec::new();
            for system in round_order(&args.systems, round) {
                eprintln!(
                    "bench sort: round {}/{}: {system} ...",
                    round + 1,
                    args.rounds
                );
                rows.push(one(&system, args, &dir, &input, &output, bytes, &expected)?);
            }
            rounds.push(rows);
        }
        anyhow::Ok(())
    })();
    let _ = std::fs::remove_file(&output);
    let _ = std::fs::remove_file(&input);
    result?;
    let summaries = verdicts(&rounds);
    if args.json {
        return print_rounds_json(&rounds, &summaries);
    }
    let rows: Vec<(String, Vec<_>)> = args
        .systems
        .iter()
        .map(|system| {
            let spread = |f: &dyn Fn(&Row) -> f64| spread_of(&rounds, |rows| find(rows, system), f);
            let per_input = |b: u64| b as f64 / bytes.max(1) as f64;
            (
                system.clone(),
                vec![
                    spread(&|r| r.seconds),
                    spread(&|r| r.mb_per_s),
                    spread(&|r| per_input(r.read_bytes)),
                    spread(&|r| per_input(r.write_bytes)),
                ],
            )
        })
        .collect();
    print_spreads(
        "system",
        &[
            ("seconds", 2),
            ("MB/s", 1),
            ("read / input", 2),
            ("write / input", 2),
        ],
        &rows,
    );
    println!();
    print_summaries(&summaries);
    Ok(())
}

fn find<'a>(rows: &'a [Row], system: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system)
}

/// The targets of `spindle sort` (docs/benchmarks/sort.md), each judged on the median of
/// its per-round values.
fn verdicts(rounds: &[Vec<Row>]) -> Vec<Summary> {
    let ratio = |a: &str, b: &str, f: fn(&Row) -> f64| {
        per_round(rounds, |rows| Some(f(find(rows, a)?) / f(find(rows, b)?)))
    };
    let spindle = |f: fn(&Row) -> u64| {
        per_round(rounds, |rows| {
            let r = find(rows, "spindle")?;
            Some(f(r) as f64 / r.bytes.max(1) as f64)
        })
    };
    [
        Summary::judge(
            "spindle / gnu-sort (MB/s)",
            &ratio("spindle", "gnu-sort", |r| r.mb_per_s),
            Target::AtLeast(3.0),
        ),
        Summary::judge(
            "spindle / device (seconds)",
            &ratio("spindle", "device", |r| r.seconds),
            Target::AtMost(1.35),
        ),
        Summary::judge(
            "spindle read bytes / input",
            &spindle(|r| r.read_bytes),
            Target::AtMost(2.1),
        ),
        Summary::judge(
            "spindle write bytes / input",
            &spindle(|r| r.write_bytes),
            Target::AtMost(2.1),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// One system on the input, its output validated and removed.
fn one(
    system: &str,
    args: &Args,
    dir: &Path,
    input: &Path,
    output: &Path,
    bytes: u64,
    expected: &CheckReport,
) -> anyhow::Result<Row> {
    drop_cache(input);
    let io = IoCounters::now();
    let start = Instant::now();
    let passes = match system {
        "spindle" => run_spindle(input, output, dir, args.memory)?,
        "gnu-sort" => run_gnu_sort(input, output, dir, args.memory)?,
        "device" => run_device(input, output)?,
        other => bail!("unknown system {other:?} (spindle, gnu-sort, device)"),
    };
    let seconds = start.elapsed().as_secs_f64();
    let io = IoCounters::now().since(&io);
    if system != "device" {
        validate(system, output, expected)?;
    }
    let _ = std::fs::remove_file(output);
    Ok(Row {
        system: system.to_owned(),
        bytes,
        memory_bytes: args.memory,
        seconds,
        mb_per_s: bytes as f64 / 1e6 / seconds,
        read_bytes: io.read_bytes,
        write_bytes: io.write_bytes,
        passes,
    })
}

fn validate(system: &str, output: &Path, expected: &CheckReport) -> anyhow::Result<()> {
    let got = check_file(output).with_context(|| format!("checking {system}'s output"))?;
    ensure!(
        got.is_sorted(),
        "{system}: output not sorted at offset {:?}",
        got.first_unsorted_offset
    );
    ensure!(
        (got.records, got.checksum) == (expected.records, expected.checksum),
        "{system}: output differs from input (records {} vs {}, checksum {:x} vs {:x})",
        got.records,
        expected.records,
        got.checksum,
        expected.checksum
    );
    Ok(())
}

/// Flushes a file and drops it from the page cache, so each system reads it from disk.
fn drop_cache(path: &Path) {
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.sync_all();
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
    }
}

fn run_spindle(
    input: &Path,
    output: &Path,
    dir: &Path,
    memory: u64,
) -> anyhow::Result<Option<u32>> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .arg("sort")
        .arg("--memory")
        .arg(memory.to_string())
        .arg("--tmp")
        .arg(dir)
        .arg(input)
        .arg(output)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "spindle sort failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{text}");
    let passes = text
        .split_once(" in ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    Ok(passes)
}

fn run_gnu_sort(
    input: &Path,
    output: &Path,
    dir: &Path,
    memory: u64,
) -> anyhow::Result<Option<u32>> {
    ensure_gnu_sort()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let status = Command::new("sort")
        .env("LC_ALL", "C")
        .arg("-S")
        .arg(format!("{memory}b"))
        .arg(format!("--parallel={cores}"))
        .arg("-T")
        .arg(dir)
        .arg("-o")
        .arg(output)
        .arg(input)
        .status()?;
    ensure!(status.success(), "GNU sort failed: {status}");
    Ok(None)
}

/// Installs coreutils with apt-get if `sort` is missing.
fn ensure_gnu_sort() -> anyhow::Result<()> {
    if Command::new("sort").arg("--version").output().is_ok() {
        return Ok(());
    }
    let ok = Command::new("apt-get")
        .args(["install", "-y", "coreutils"])
        .status()?
        .success();
    ensure!(
        ok,
        "GNU sort is missing and apt-get install coreutils failed"
    );
    Ok(())
}

/// Reads the input and writes a copy, then reads the copy and writes `output`: 2R+2W.
fn run_device(input: &Path, output: &Path) -> anyhow::Result<Option<u32>> {
    let middle = output.with_extension("device-copy");
    let result = device::copy(input, &middle).and_then(|()| {
        drop_cache(&middle);
        device::copy(&middle, output)
    });
    let _ = std::fs::remove_file(&middle);
    result?;
    Ok(Some(2))
}
