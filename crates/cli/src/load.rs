//! `spindle load` (a JSON-lines graph into a running node) and `spindle gen` (the
//! benchmarks' synthetic graph as such a file).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use spindle_bench::graph::{generate, json_line, GraphSpec};
use spindle_server::client::HttpClient;

#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The node's HTTP address (host:port).
    #[arg(long, default_value = "127.0.0.1:7070")]
    server: String,
    /// Bearer token, if the node requires one.
    #[arg(long, env = "SPINDLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Writes per transaction.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Transactions in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// The JSON-lines file (one write per line).
    file: PathBuf,
}

pub fn load(args: &LoadArgs) -> anyhow::Result<ExitCode> {
    let file =
        File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    let len = file.metadata()?.len();
    let bar = ProgressBar::new(len).with_style(ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, ETA {eta})",
    )?);
    let client = HttpClient::new(&args.server, args.token.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let start = std::time::Instant::now();
    let report = rt.block_on(spindle_server::load::load(
        &client,
        BufReader::new(file),
        args.batch,
        args.concurrency,
        |bytes| bar.set_position(bytes),
    ))?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    println!(
        "loaded {} writes in {} transactions in {secs:.1}s ({:.0} writes/s); last commit index {}",
        report.writes,
        report.transactions,
        report.writes as f64 / secs.max(1e-9),
        report.last_index
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, clap::Args)]
pub struct GenArgs {
    #[arg(long, default_value_t = 50_000)]
    nodes: u64,
    #[arg(long, default_value_t = 200_000)]
    edges: u64,
    /// Versions per item on average.
    #[arg(long, default_value_t = 4)]
    versions: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file (default: standard output).
    #[arg(long, short)]
    out: Option<PathBuf>,
}

pub fn gen(args: &GenArgs) -> anyhow::Result<ExitCode> {
    let spec = GraphSpec {
        nodes: args.nodes,
        edges: args.edges,
        versions: args.versions,
        seed: args.seed,
    };
    let out: Box<dyn Write> = match &args.out {
        Some(path) => {
            Box::new(File::create(path).with_context(|| format!("creating {}", path.display()))?)
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::new(out);
    let mut failed = None;
    generate(&spec, |key, value| {
        if failed.is_none() {
            if let Err(e) = writeln!(out, "{}", json_line(&key, &value)) {
                failed = Some(e);
            }
        }
    });
    if let Some(e) = failed {
        return Err(e).context("writing the graph");
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
