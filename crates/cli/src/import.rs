//! `spindle import`: bulk-load JSON-lines writes into a new data directory, offline, with a
//! progress bar per phase (docs/sort.md, "Bulk import").

use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use spindle_sort::import::{import, ImportOptions, Phase, Progress};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The new data directory (must be absent or empty); serve it with `spindle serve
    /// --data-dir DIR --disk-partitions N`.
    #[arg(long = "data", alias = "data-dir")]
    data: PathBuf,
    /// Disk View partitions (serve must use the same count).
    #[arg(long, default_value_t = 4)]
    disk_partitions: u64,
    /// The sorter's memory budget in bytes (suffixes KiB, MiB, GiB).
    #[arg(long, default_value = "1GiB", value_parser = spindle_sort::parse_bytes)]
    memory: u64,
    /// The sorter's temporary directory (default: inside the data directory).
    #[arg(long)]
    tmp: Option<PathBuf>,
    /// Sorter threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Count and skip bad lines instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// JSON-lines files, one write per line (`spindle gen` output), imported in order.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
}

/// One indicatif bar per phase.
struct Bars {
    _multi: MultiProgress,
    bars: Vec<ProgressBar>,
}

impl Bars {
    fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let bars = Phase::ALL
            .iter()
            .map(|p| {
                let bar = multi.add(ProgressBar::hidden());
                let unit = match p {
                    Phase::Parse => "{bytes}/{total_bytes} ({bytes_per_sec}, ETA {eta})",
                    Phase::Ingest => "{pos}/{len} partitions",
                    _ => "{human_pos}/{human_len} records ({per_sec})",
                };
                let template = format!("{:>7} {{bar:30}} {unit}", p.name());
                bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
                bar
            })
            .collect();
        Bars {
            _multi: multi,
            bars,
        }
    }

    fn bar(&self, phase: Phase) -> &ProgressBar {
        &self.bars[Phase::ALL
            .iter()
            .position(|p| *p == phase)
            .expect("a phase")]
    }
}

impl Progress for Bars {
    fn start(&self, phase: Phase, total: Option<u64>) {
        let bar = self.bar(phase);
        if let Some(total) = total {
            bar.set_length(total);
        }
        if bar.is_hidden() {
            bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    fn set(&self, phase: Phase, done: u64) {
        let bar = self.bar(phase);
        if bar.length().is_some_and(|len| len < done) || bar.length().is_none() {
            bar.set_length(done);
        }
        bar.set_position(done);
    }

    fn end(&self, phase: Phase) {
        self.bar(phase).finish();
    }
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    // Checked before anything is made: with less, a valid line's entry could be larger than
    // the sorter holds, and fail the import halfway (the library takes less, for tests).
    let min = spindle_sort::import::MEMORY_MIN_BYTES;
    anyhow::ensure!(
        args.memory >= min,
        "--memory {} is too small for an import: it needs at least {min} bytes ({} MiB), \
         8 times its largest entry (a record of 1 MiB)",
        args.memory,
        min.div_ceil(1 << 20)
    );
    let opts = ImportOptions {
        data_dir: args.data.clone(),
        disk_partitions: args.disk_partitions,
        sort_memory_bytes: args.memory,
        tmp_dir: args.tmp.clone(),
        threads: args.threads,
        skip_bad: args.skip_bad,
        parse_chunk_bytes: spindle_sort::import::PARSE_CHUNK_BYTES,
        log_only: false,
    };
    let bars = Bars::new();
    let started = std::time::Instant::now();
    let report = import(&opts, &args.inputs, &bars)?;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "imported {} records ({} MB of input) into {} in {secs:.1}s ({:.0} records/s); last index {}",
        report.records,
        report.input_bytes / 1_000_000,
        args.data.display(),
        report.records as f64 / secs.max(1e-9),
        report.last_index
    );
    let phases: Vec<String> = report
        .phase_seconds
        .iter()
        .map(|(p, s)| format!("{} {s:.1}s", p.name()))
        .collect();
    println!("phases: {}", phases.join(", "));
    if report.skipped > 0 {
        println!(
            "skipped {} bad lines; the first: {}",
            report.skipped,
            report.first_skipped.as_deref().unwrap_or("?")
        );
    }
    Ok(ExitCode::SUCCESS)
}
