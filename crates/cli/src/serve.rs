//! `spindle serve`: the embedded node on a config file and flags (flags win).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use spindle_server::config::{DiskBoot, IndexConfig, JetStreamSettings, Role};
use spindle_server::{Node, ServerConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A TOML config file (docs/api.md lists the keys); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory (default ./spindle-data).
    #[arg(long, alias = "data")]
    data_dir: Option<PathBuf>,
    /// HTTP/JSON listener (default 127.0.0.1:7070).
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// gRPC listener (default 127.0.0.1:7071).
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
    /// Bearer token required on every request; needed to listen on a non-loopback address.
    #[arg(long, env = "SPINDLE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Disk View partitions.
    #[arg(long)]
    disk_partitions: Option<u64>,
    /// An Index View, as NAME=POINTER (e.g. by_name=/name); repeatable.
    #[arg(long = "index", value_name = "NAME=POINTER")]
    indexes: Vec<String>,
    /// Do not keep a Memory View.
    #[arg(long)]
    no_memory_view: bool,
    /// Never delete log segments.
    #[arg(long)]
    no_truncate: bool,
    /// RocksDB block cache per Disk View, in bytes.
    #[arg(long)]
    disk_block_cache_bytes: Option<usize>,
    /// Read the Disk Views' table files with O_DIRECT (bypassing the page cache).
    #[arg(long)]
    disk_direct_reads: bool,
    /// Run the log on a NATS JetStream cluster instead of under the data directory: a
    /// server's client URL (nats://host:port); repeat for each server.
    #[arg(long = "jetstream", value_name = "URL")]
    jetstream: Vec<String>,
    /// The monitoring URL (http://host:port) of each JetStream server; the log checks every
    /// server syncs each write before acknowledging it. Repeat for each server.
    #[arg(long = "jetstream-monitor", value_name = "URL")]
    jetstream_monitor: Vec<String>,
    /// The JetStream stream holding the log (default SPINDLE).
    #[arg(long)]
    jetstream_stream: Option<String>,
    /// Replicas the stream must have (default 3).
    #[arg(long)]
    jetstream_replicas: Option<usize>,
    /// `node` (default: appends, reads, every view), `disk-view` (a Disk View server on
    /// the shared JetStream log: only the partitions given with --partition, reads only) or
    /// `api` (appends to the shared log; reads and boots through the Disk View servers of
    /// its catalog).
    #[arg(long, value_parser = ["node", "disk-view", "api"])]
    role: Option<String>,
    /// A partition to hold, as I/N (partition I of N; sets --disk-partitions N);
    /// repeatable. For --role disk-view.
    #[arg(long = "partition", value_name = "I/N")]
    partitions: Vec<String>,
    /// How a disk-view server fills a Disk View it does not have yet: `auto` (default:
    /// from the Disk View servers of the catalog covering its range when they hold
    /// anything, else by replaying the log while it starts at index 1), `replicas` (always
    /// from those servers, waiting for them) or `log` (always by replaying the log).
    #[arg(long, value_parser = ["auto", "replicas", "log"])]
    disk_boot: Option<String>,
}

fn config(args: &Args) -> anyhow::Result<ServerConfig> {
    let mut c = match &args.config {
        Some(path) => ServerConfig::from_file(path)?,
        None => ServerConfig::default(),
    };
    if let Some(v) = &args.data_dir {
        c.data_dir = v.clone();
    }
    if let Some(v) = args.http_listen {
        c.http_listen = v;
    }
    if let Some(v) = args.grpc_listen {
        c.grpc_listen = v;
    }
    if args.token.is_some() {
        c.token = args.token.clone();
    }
    if let Some(v) = args.disk_partitions {
        c.disk_partitions = v;
    }
    for spec in &args.indexes {
        let Some((name, pointer)) = spec.split_once('=') else {
            anyhow::bail!("--index {spec:?} must be NAME=POINTER, e.g. by_name=/name");
        };
        c.index_views.push(IndexConfig {
            name: name.to_owned(),
            pointer: pointer.to_owned(),
        });
    }
    if args.no_memory_view {
        c.memory_view = false;
    }
    if args.no_truncate {
        c.truncate = false;
    }
    if let Some(v) = args.disk_block_cache_bytes {
        c.disk_block_cache_bytes = v;
    }
    if args.disk_direct_reads {
        c.disk_direct_reads = true;
    }
    if !args.jetstream.is_empty() || !args.jetstream_monitor.is_empty() {
        let js = c.jetstream.get_or_insert_with(JetStreamSettings::empty);
        if !args.jetstream.is_empty() {
            js.servers = args.jetstream.clone();
        }
        if !args.jetstream_monitor.is_empty() {
            js.monitor_urls = args.jetstream_monitor.clone();
        }
    }
    if args.jetstream_stream.is_some() || args.jetstream_replicas.is_some() {
        let Some(js) = c.jetstream.as_mut() else {
            anyhow::bail!("--jetstream-stream and --jetstream-replicas need --jetstream URL");
        };
        if let Some(v) = &args.jetstream_stream {
            js.stream = v.clone();
        }
        if let Some(v) = args.jetstream_replicas {
            js.replicas = v;
        }
    }
    match args.role.as_deref() {
        Some("disk-view") => c.role = Role::DiskView,
        Some("api") => c.role = Role::Api,
        Some(_) => c.role = Role::Node,
        None => {}
    }
    match args.disk_boot.as_deref() {
        Some("replicas") => c.disk_boot = DiskBoot::Replicas,
        Some("log") => c.disk_boot = DiskBoot::Log,
        Some(_) => c.disk_boot = DiskBoot::Auto,
        None => {}
    }
    if !args.partitions.is_empty() {
        let mut held = Vec::new();
        for spec in &args.partitions {
            let parsed = spec
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
            let Some((i, n)) = parsed.filter(|(i, n)| i < n) else {
                anyhow::bail!("--partition {spec:?} must be I/N with I < N, e.g. 0/4");
            };
            if !held.is_empty() && c.disk_partitions != n {
                anyhow::bail!("--partition values must all have the same N");
            }
            c.disk_partitions = n;
            held.push(i);
        }
        held.sort_unstable();
        held.dedup();
        c.partitions = Some(held);
    }
    c.validate()?;
    Ok(c)
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let config = config(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let data_dir = config.data_dir.clone();
    let node = Node::open(config)?;
    let shutdown = {
        let _in_runtime = rt.enter();
        spindle_server::serve::signals()
    };
    rt.block_on(spindle_server::serve::serve(node, shutdown, |bound| {
        // One parseable line on stdout: scripts and tests read the bound ports from it.
        println!(
            "spindle serve: http={} grpc={} data={}",
            bound.http,
            bound.grpc,
            data_dir.display()
        );
        let _ = std::io::stdout().flush();
    }))?;
    Ok(ExitCode::SUCCESS)
}
