//! `spindle`: the one binary. Subcommands are thin: they parse flags and call library code.

#![forbid(unsafe_code)]

#[cfg(feature = "jetstream")]
mod bench_cluster;
#[cfg(feature = "jetstream")]
mod bench_http;
mod cluster;
mod import;
mod inspect;
mod inspect_chunks;
mod load;
mod ride;
mod serve;
mod sort;
mod status;
mod top;
mod torture;
mod verify;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

// The log's appenders and writer hand buffers across threads; mimalloc's per-thread free
// lists cost less than glibc's arena consolidation there (measured with `perf record` on
// `spindle bench log`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "spindle",
    version,
    about = "Spindle: a graph store on a durable log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the embedded node: file log, Disk Views, Memory and Index Views, HTTP and gRPC.
    Serve(serve::Args),
    /// A cluster on one machine: NATS servers, Disk View servers and API processes, each
    /// in its own network namespace (or on loopback): up, down, status, kill, start.
    Cluster(cluster::Args),
    /// Board a carousel of a running node and report the time and MiB/s of one revolution.
    Ride(ride::Args),
    /// Bulk-load JSON-lines writes into a new data directory, offline (then `serve` it).
    Import(import::Args),
    /// Load a JSON-lines graph file into a running node.
    Load(load::LoadArgs),
    /// Write the benchmarks' synthetic graph as a JSON-lines file for `spindle load`.
    Gen(load::GenArgs),
    /// Show a running node's status: log, views, boots, carousels, truncation.
    Status(status::Args),
    /// Watch a running node in the terminal: log rates, views, boots, carousels, truncation.
    Top(top::Args),
    /// Run a benchmark scenario against its peers in one run.
    Bench {
        #[command(subcommand)]
        scenario: Scenario,
    },
    /// Sort a file of 100-byte records (Sort Benchmark format) in bounded memory, or --check one.
    Sort(sort::SortArgs),
    /// Write Sort Benchmark records (binary or --ascii, optionally --skew) for `spindle sort`.
    GenRecords(sort::GenRecordsArgs),
    /// Crash trials: drive a `spindle serve` child, SIGKILL it at random, restart, verify.
    Torture(torture::Args),
    /// Verify a log directory offline: segments, index ranges, torn tail, corruption.
    Inspect {
        /// The log directory.
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify every Disk View of a stopped data directory against its stored checksum.
    Verify(verify::Args),
    /// Print a completion script for bash, zsh or fish (the README says where to put it).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Durable appends: Spindle's file log against RocksDB, SQLite and the raw device.
    Log(spindle_bench::log::Args),
    /// Ring buffers: Spindle's ring against crossbeam-channel (per event and batched) and disruptor.
    Ring(spindle_bench::ring::Args),
    /// Chunk store: puts and gets of large blobs against file-per-chunk, SQLite and the device.
    Chunks(spindle_bench::chunks::Args),
    /// Iteration over Disk Views against raw RocksDB; Memory View boot against log replay.
    Iterate(spindle_bench::iterate::Args),
    /// Carousel against dedicated iterators: 1 and 5 rider processes over gRPC on a cold view.
    Carousel(spindle_bench::carousel::Args),
    /// Offline import against `spindle load` into a running node and the log-only cost.
    Import(spindle_bench::import::Args),
    /// External sort: `spindle sort` against GNU sort and the device's 2R+2W copy time.
    Sort(spindle_bench::sort::Args),
    /// A JetStream cluster: appends through the api server against raw JetStream publishes and
    /// the file log; a Memory View booted from Disk View servers against replaying the log.
    #[cfg(feature = "jetstream")]
    Cluster(bench_cluster::Args),
}

/// The most open files the soft limit is raised to (Linux's default `fs.nr_open`): a hard
/// limit set to "infinity" by a service manager can be about 10^9, which every child process
/// would inherit.
const OPEN_FILES_MAX: u64 = 1 << 20;

/// Raise the soft limit on open files to the hard limit (at most `OPEN_FILES_MAX`). A node
/// holds a descriptor per RocksDB table file, up to two per chunk volume
/// (`docs/chunk-format.md`, "Reads"), one per log segment and one per connection, and the
/// usual soft limit of 1,024 is far below what a large store needs, while the hard limit
/// (which only root can raise) usually is not.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit
        .maximum
        .map_or(OPEN_FILES_MAX, |hard| hard.min(OPEN_FILES_MAX));
    if limit.current.is_some_and(|current| current >= wanted) {
        return;
    }
    let raised = Rlimit {
        current: Some(wanted),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            tracing::debug!(from = ?limit.current, to = wanted, "raised the open-files limit")
        }
        Err(e) => tracing::warn!(
            soft = ?limit.current,
            hard = ?limit.maximum,
            error = %e,
            "could not raise the open-files limit; a large store may run out of file descriptors"
        ),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Fault injection for tests (`FAILPOINTS`), only in builds with the feature.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    raise_open_files_limit();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench { scenario } => match scenario {
            Scenario::Log(args) => spindle_bench::log::run(&args).map(|()| ExitCode::SUCCESS),
            Scenario::Ring(args) => spindle_bench::ring::run(&args).map(|()| ExitCode::SUCCESS),
            Scenario::Chunks(args) => spindle_bench::chunks::run(&args).map(|()| ExitCode::SUCCESS),
            Scenario::Iterate(args) => {
                spindle_bench::iterate::run(&args).map(|()| ExitCode::SUCCESS)
            }
            Scenario::Carousel(args) => {
                spindle_bench::carousel::run(&args).map(|()| ExitCode::SUCCESS)
            }
            Scenario::Import(args) => spindle_bench::import::run(&args).map(|()| ExitCode::SUCCESS),
            Scenario::Sort(args) => spindle_bench::sort::run(&args).map(|()| ExitCode::SUCCESS),
            #[cfg(feature = "jetstream")]
            Scenario::Cluster(args) => bench_cluster::run(&args).map(|()| ExitCode::SUCCESS),
        },
        Command::Inspect { dir, json } => inspect::run(&dir, json),
        Command::Verify(args) => verify::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Cluster(args) => cluster::run(&args),
        Command::Ride(args) => ride::run(&args),
        Command::Import(args) => import::run(&args),
        Command::Load(args) => load::load(&args),
        Command::Gen(args) => load::gen(&args),
        Command::Status(args) => status::run(&args),
        Command::Top(args) => top::run(&args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "spindle",
                &mut std::io::stdout(),
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Torture(args) => torture::run(&args),
        Command::Sort(args) => sort::run(&args),
        Command::GenRecords(args) => sort::gen_records(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", describe(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each cause once (our errors already show their source).
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
