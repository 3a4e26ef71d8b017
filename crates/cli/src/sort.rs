//! `spindle sort`, `spindle sort --check` and `spindle gen-records`: thin wrappers over
//! `spindle-sort` with a progress bar on a terminal and a per-phase summary.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use spindle_sort::records::check::check_file;
use spindle_sort::records::gen::{generate, GenOptions};
use spindle_sort::records::{sort_file, IoMode, Progress, RecordSortOptions, RecordSortReport};

/// Options of `spindle sort`.
#[derive(Debug, clap::Args)]
pub struct SortArgs {
    /// Input file of 100-byte records (10-byte key first); with --check, the file to check.
    pub input: PathBuf,
    /// Output file (written under a temporary name and renamed when complete).
    pub output: Option<PathBuf>,
    /// Validate FILE instead of sorting: count, duplicate keys, first record out of order,
    /// order-independent checksum. Exits non-zero when unsorted.
    #[arg(long)]
    pub check: bool,
    /// Working memory (e.g. 256MiB, 4GiB).
    #[arg(long, default_value = "1GiB", value_parser = spindle_sort::parse_bytes)]
    pub memory: u64,
    /// Directory for temporary bucket files (default: next to OUTPUT).
    #[arg(long)]
    pub tmp: Option<PathBuf>,
    /// Threads for the in-memory sort (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// O_DIRECT for every file, or an error where the file system refuses it (default:
    /// O_DIRECT where the file system takes it, the page cache where it does not).
    #[arg(long, conflicts_with = "buffered")]
    pub direct: bool,
    /// Read and write through the page cache.
    #[arg(long)]
    pub buffered: bool,
}

/// Options of `spindle gen-records`.
#[derive(Debug, clap::Args)]
pub struct GenRecordsArgs {
    /// How many 100-byte records.
    #[arg(long)]
    pub records: u64,
    /// ASCII records (printable keys, lines ending in \r\n) instead of binary.
    #[arg(long)]
    pub ascii: bool,
    /// A heavily skewed key distribution.
    #[arg(long)]
    pub skew: bool,
    /// Seed of the generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file.
    pub file: PathBuf,
}

pub fn run(args: &SortArgs) -> anyhow::Result<ExitCode> {
    if args.check {
        if args.output.is_some() {
            bail!("--check takes one FILE");
        }
        return check(args);
    }
    let Some(output) = &args.output else {
        bail!("spindle sort needs INPUT and OUTPUT (or --check FILE)");
    };
    remove_temporaries_on_signal()?;
    let opts = RecordSortOptions {
        memory_bytes: args.memory,
        tmp_dir: args.tmp.clone(),
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        io: match (args.direct, args.buffered) {
            (true, _) => IoMode::Direct,
            (_, true) => IoMode::Buffered,
            _ => IoMode::Auto,
        },
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg:28} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("progress template")
            .progress_chars("=> "),
        );
        bar
    });
    let mut on_progress = |p: Progress| {
        if let Some(bar) = &bar {
            bar.set_message(p.phase);
            bar.set_length(p.total_bytes);
            bar.set_position(p.done_bytes);
        }
    };
    let report = sort_file(&args.input, output, &opts, &mut on_progress);
    leave_to_the_signal_handler(report.is_err());
    let report = report.with_context(|| format!("sorting {}", args.input.display()))?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    print_summary(&report);
    Ok(ExitCode::SUCCESS)
}

fn print_summary(report: &RecordSortReport) {
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "sorted {} records ({:.1} MB) in {} pass{}, {} bucket{}, {} split{}",
        report.records,
        mb(report.input_bytes),
        report.passes,
        if report.passes == 1 { "" } else { "es" },
        report.buckets,
        if report.buckets == 1 { "" } else { "s" },
        report.splits,
        if report.splits == 1 { "" } else { "s" },
    );
    println!(
        "{:28} {:>8} {:>9} {:>12} {:>12} {:>12} {:>12}",
        "phase", "seconds", "MB/s", "read MB", "write MB", "rchar MB", "wchar MB"
    );
    let mut total = 0.0;
    for p in &report.phases {
        total += p.seconds;
        println!(
            "{:28} {:>8.2} {:>9.1} {:>12.1} {:>12.1} {:>12.1} {:>12.1}",
            p.name,
            p.seconds,
            if p.seconds > 0.0 {
                mb(p.bytes) / p.seconds
            } else {
                0.0
            },
            mb(p.io.read_bytes),
            mb(p.io.write_bytes),
            mb(p.io.rchar),
            mb(p.io.wchar),
        );
    }
    println!(
        "total {:.2} s, {:.1} MB/s",
        total,
        if total > 0.0 {
            mb(report.input_bytes) / total
        } else {
            0.0
        }
    );
    let d = report.direct;
    let files = [
        ("input", d.input),
        ("buckets", d.buckets),
        ("output", d.output),
    ];
    let named = |direct: bool| {
        files
            .iter()
            .filter(|(name, on)| *on == direct && (*name != "buckets" || report.buckets > 0))
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (direct, cached) = (named(true), named(false));
    match (direct.is_empty(), cached.is_empty()) {
        (false, true) => println!("I/O: O_DIRECT ({direct})"),
        (true, _) => println!("I/O: page cache ({cached})"),
        (false, false) => println!("I/O: O_DIRECT ({direct}), page cache ({cached})"),
    }
}

fn check(args: &SortArgs) -> anyhow::Result<ExitCode> {
    let r =
        check_file(&args.input).with_context(|| format!("checking {}", args.input.display()))?;
    println!("records         {}", r.records);
    println!("duplicate keys  {}", r.duplicate_keys);
    println!("checksum        {:032x}", r.checksum);
    match r.first_unsorted_offset {
        None => {
            println!("sorted          yes");
            Ok(ExitCode::SUCCESS)
        }
        Some(offset) => {
            println!(
                "sorted          NO: record {} (byte offset {offset}) is below its predecessor",
                offset / spindle_sort::records::RECORD_BYTES as u64
            );
            Ok(ExitCode::from(1))
        }
    }
}

/// On SIGINT or SIGTERM: remove the temporary files the sort registered
/// (`spindle_sort::cleanup`), say so, and exit with 130 (SIGINT) or 143 (SIGTERM), as a
/// shell reports a process those signals ended.
pub(crate) fn remove_temporaries_on_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the signal handler")?;
    // Installed now, before the sort makes its first file.
    let (mut int, mut term) = {
        let _entered = rt.enter();
        (
            signal(SignalKind::interrupt()).context("handling SIGINT")?,
            signal(SignalKind::terminate()).context("handling SIGTERM")?,
        )
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let (name, code) = rt.block_on(async {
                tokio::select! {
                    _ = int.recv() => ("SIGINT", 130),
                    _ = term.recv() => ("SIGTERM", 143),
                }
            });
            // Exit whatever happens below (a panic here would leave the sort stopped
            // behind a lock that is never given back).
            struct ExitOnDrop(i32);
            impl Drop for ExitOnDrop {
                fn drop(&mut self) {
                    std::process::exit(self.0);
                }
            }
            let _exit = ExitOnDrop(code);
            let stopped = spindle_sort::cleanup::stop_and_remove();
            let output = if stopped.finished {
                "the output was already complete"
            } else {
                "no output written"
            };
            // stderr may be gone (a pipe whose reader the same Ctrl-C stopped).
            let mut err = std::io::stderr();
            let _ = if stopped.left.is_empty() {
                writeln!(
                    err,
                    "\nstopped by {name}: temporary files removed, {output}"
                )
            } else {
                writeln!(
                    err,
                    "\nstopped by {name}: {output}; could not remove {:?}, delete them by hand",
                    stopped.left
                )
            };
        })
        .context("starting the signal handler")?;
    Ok(())
}

/// A failure while a signal stops the process is the removal's doing: the signal handler
/// reports and exits, so this thread waits for it instead of reporting the failure.
pub(crate) fn leave_to_the_signal_handler(failed: bool) {
    if failed && spindle_sort::cleanup::stopping() {
        loop {
            std::thread::park();
        }
    }
}

pub fn gen_records(args: &GenRecordsArgs) -> anyhow::Result<ExitCode> {
    remove_temporaries_on_signal()?;
    let written = generate(
        &args.file,
        &GenOptions {
            records: args.records,
            ascii: args.ascii,
            skew: args.skew,
            seed: args.seed,
        },
    );
    leave_to_the_signal_handler(written.is_err());
    written.with_context(|| format!("writing {}", args.file.display()))?;
    Ok(ExitCode::SUCCESS)
}
