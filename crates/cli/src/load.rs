//! `spindle load` (a JSON-lines graph into a running node) and `spindle gen` (the
//! benchmarks' synthetic graph as such a file).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
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
    match &args.out {
        None => write_graph(&spec, std::io::stdout().lock()).context("writing the graph")?,
        Some(path) => {
            let written = gen_to_file(&spec, path);
            crate::sort::leave_to_the_signal_handler(written.is_err());
            written?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_graph(spec: &GraphSpec, out: impl Write) -> std::io::Result<()> {
    let mut out = BufWriter::new(out);
    let mut failed = None;
    generate(spec, |key, value| {
        if failed.is_none() {
            if let Err(e) = writeln!(out, "{}", json_line(&key, &value)) {
                failed = Some(e);
            }
        }
    });
    match failed {
        Some(e) => Err(e),
        None => out.flush(),
    }
}

/// Write the graph under a temporary name beside `path`, sync it and rename it into place:
/// `path` holds the whole graph, or what it held before (a full disk, an error or a signal
/// removes the temporary file and leaves `path` alone).
fn gen_to_file(spec: &GraphSpec, path: &Path) -> anyhow::Result<()> {
    crate::sort::remove_temporaries_on_signal()?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Created as an ordinary file would be (0666 less the umask), not a private one.
    let tmp = tempfile::Builder::new()
        .prefix(".spindle-gen-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let _removed_on_signal = spindle_sort::cleanup::register(tmp.path());
    let written = write_graph(spec, tmp.as_file()).and_then(|()| tmp.as_file().sync_all());
    written.with_context(|| {
        format!(
            "writing the graph to {} ({} is left as it was)",
            tmp.path().display(),
            path.display()
        )
    })?;
    spindle_sort::cleanup::finish(|| tmp.persist(path))
        .map_err(|e| e.error)
        .with_context(|| format!("renaming the graph into {}", path.display()))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))?;
    Ok(())
}
