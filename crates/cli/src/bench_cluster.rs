//! `spindle bench cluster`: Spindle on a NATS JetStream cluster against the same cluster
//! without Spindle and against the embedded file log, and a Memory View booted from the
//! cluster's Disk View servers against the same view built by replaying the log.
//!
//! Setup: `spindle cluster up` (3 NATS servers with the stream at 3 replicas, `--partitions`
//! Disk View servers with one replica each, one api server), in network namespaces when this
//! runs as root, else `--loopback`, with `--no-truncate` so the whole log stays to replay;
//! `spindle cluster down` at the end, also after an error.
//!
//! Appends (the event-store workload of `bench log`: each event its own one-record
//! transaction on node `users/{j mod 10000}`), `--clients` at once, per round:
//! - `spindle-jetstream`: `POST /v1/txn` to the cluster's api server, one event per request,
//!   answered once JetStream acknowledged the batch holding it;
//! - `jetstream-raw`: the bench publishes to a stream of its own on the same cluster (3
//!   replicas, file storage), one message per event with the payload size of Spindle's record
//!   of that event, `--clients` publishes awaiting their acks at once — JetStream's rate at
//!   the same message sizes without Spindle's batching. Its stream's leader is moved to the
//!   server the bench publishes to, as Spindle's appender moves its own (relayed
//!   through another server, single publishes ran at 0.84–0.88 of their rate in the runs of
//!   `crates/log/tests/jetstream_relay.rs`);
//! - `jetstream-raw-batch`: the same messages as atomic batches of `--clients` messages (the
//!   way Spindle's appender publishes a group commit), one batch awaiting its ack at a time;
//! - `spindle-file`: the same HTTP clients against a `spindle serve` on the embedded file log
//!   (`--disk-partitions` Disk Views and a Memory View, like the cluster's members together).
//!
//! Boots, after `--nodes`/`--edges`/`--versions` of `spindle gen`'s graph were loaded through
//! the api server and every Disk View server applied the head, per round, both in this
//! process and to the same cut:
//! - `boot-diskview-servers`: the plan an api server makes from the catalog (read from the
//!   `<stream>_CATALOG` bucket), booted with the api server's own remote sources over gRPC;
//! - `boot-replay`: an empty Memory View catching up from the JetStream log (a log reader,
//!   as a Memory View without Disk Views would).
//!
//! Both boots must give the same items at the same index. `bytes` is what crossed the
//! cluster's bridge into this host (`/sys/class/net/<bridge>/statistics/rx_bytes`: frames
//! with their TCP/IP headers; with `--loopback` the loopback device's, which other cluster
//! traffic shares).

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt as _};
use hyper::Method;
use serde::Serialize;
use spindle_bench::report::{
    print_rounds_json, print_spreads, print_summaries, round_order, spread_of, Summary, Target,
};
use spindle_bench::serve_child::ServeChild;
use spindle_core::{Index, ItemKey, Partition, Value};
use spindle_server::client::HttpClient;
use spindle_view::{BootProgress, MemoryView};

use crate::bench_http::AppendTarget;
use crate::cluster::state::{self, Network};

const EVENT_JSON: &str = r#"{"Type":"ItemCreated","ItemId":"1324"}"#;
const NODES: u64 = 10_000;
const RAW_STREAM: &str = "SPINDLE_BENCH_RAW";
const RAW_SUBJECT: &str = "spnbench.raw";
const APPEND_SYSTEMS: [&str; 4] = [
    "spindle-jetstream",
    "jetstream-raw",
    "jetstream-raw-batch",
    "spindle-file",
];
const BOOT_SYSTEMS: [&str; 2] = ["boot-diskview-servers", "boot-replay"];
/// Longest wait for the Disk View servers to apply the loaded graph.
const APPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Options of `spindle bench cluster`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Events each append system appends per round.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Clients appending at once (HTTP requests in flight; for `jetstream-raw`, publishes
    /// awaiting their acks).
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// HTTP version of the appending clients: 1 (one HTTP/1.1 connection per client) or 2
    /// (HTTP/2 with prior knowledge: the requests in flight share one connection, as the raw
    /// publishes share one NATS connection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub http: u8,
    /// Disk View servers (one partition each) the Memory View boots from.
    #[arg(long, default_value_t = 4)]
    pub partitions: u64,
    /// Nodes of the graph loaded for the boots (`spindle gen`).
    #[arg(long, default_value_t = 20_000)]
    pub nodes: u64,
    /// Edges of the graph loaded for the boots.
    #[arg(long, default_value_t = 80_000)]
    pub edges: u64,
    /// Versions per item of the graph (on average).
    #[arg(long, default_value_t = 4)]
    pub versions: u64,
    /// Rounds: every system runs once per round, in an order rotated each round.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Comma-separated systems to run.
    #[arg(
        long,
        default_value = "spindle-jetstream,jetstream-raw,jetstream-raw-batch,spindle-file,boot-diskview-servers,boot-replay"
    )]
    pub systems: String,
    /// Run the cluster on 127.0.0.1 instead of network namespaces (the default when not root).
    #[arg(long)]
    pub loopback: bool,
    /// The nats-server binary (default: where scripts/nats.sh installs it).
    #[arg(long, env = "SPINDLE_NATS_SERVER")]
    pub nats_server: Option<PathBuf>,
    /// Directory for the cluster and the file log (a real disk, not tmpfs). Removed afterwards.
    #[arg(long, default_value = "spindle-bench-data")]
    pub dir: PathBuf,
    /// Print one JSON object per system and round, then one per target (`"summary": true`).
    #[arg(long)]
    pub json: bool,
}

/// One system's result in one round.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub system: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
    /// Appends: user bytes (key + JSON value). Boots: bytes received from the network.
    pub bytes: u64,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_per_s: Option<f64>,
    /// Boots: bytes received per item of the booted view.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_per_item: Option<f64>,
    /// Appends: CPU seconds the servers spent meanwhile (every NATS server and Spindle
    /// process of the cluster, or the file log's `spindle serve`), and this process (the
    /// clients, or the raw publisher).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_s: Option<f64>,
    /// Appends on the cluster: the part of `server_cpu_s` the NATS servers spent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_cpu_s: Option<f64>,
    /// Appends: median and 99th percentile time from request to acknowledgement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50_ack_us: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ack_us: Option<f64>,
    /// Raw publishes: where their stream's leader was placed before they ran
    /// (`moved` to the publisher's server, `local` already there, else why not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.events_per_s.or(self.items_per_s).unwrap_or(0.0)
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    ensure!(
        args.events > 0 && args.clients > 0 && args.rounds > 0,
        "--events, --clients and --rounds must be > 0"
    );
    ensure!(args.partitions > 0, "--partitions must be > 0");
    let systems: Vec<&str> = args.systems.split(',').map(str::trim).collect();
    for s in &systems {
        ensure!(
            APPEND_SYSTEMS.contains(s) || BOOT_SYSTEMS.contains(s),
            "unknown system {s:?}; known: {}, {}",
            APPEND_SYSTEMS.join(", "),
            BOOT_SYSTEMS.join(", ")
        );
    }
    let appends: Vec<&str> = systems
        .iter()
        .copied()
        .filter(|s| APPEND_SYSTEMS.contains(s))
        .collect();
    let boots: Vec<&str> = systems
        .iter()
        .copied()
        .filter(|s| BOOT_SYSTEMS.contains(s))
        .collect();
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    // Removed only once the cluster is down: a cluster that would not stop keeps its state
    // file, so `spindle cluster down --dir` can still stop it.
    let base = tempfile::Builder::new()
        .prefix("cluster")
        .tempdir_in(&args.dir)?
        .keep();
    let exe = std::env::current_exe().context("finding the spindle binary")?;
    let loopback = args.loopback || !crate::cluster::netns::usable();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cluster_dir = base.join("cluster");
    // Members run in sessions of their own, so a terminal's SIGINT does not reach them: the
    // bench stops them itself when interrupted (also while `cluster up` runs).
    rt.spawn(stop_on_signal(
        exe.clone(),
        cluster_dir.clone(),
        base.clone(),
    ));
    let cluster = Cluster::up(&exe, &cluster_dir, &base, args, loopback)?;
    #[cfg(feature = "failpoints")]
    fail::fail_point!("bench_cluster::after_up", |_| Err(anyhow::anyhow!(
        "injected failure after the cluster came up"
    )));
    let mut rounds: Vec<Vec<Row>> = vec![Vec::new(); args.rounds];
    // Boots first: the log they replay holds the graph only, not the append systems' events.
    if !boots.is_empty() {
        let head = rt.block_on(load_graph(&cluster, args))?;
        let views = rt.block_on(wait_for_disk_views(&cluster, head, args.partitions))?;
        let mut reference: Option<(Index, spindle_view::memory::Items)> = None;
        for (round, rows) in rounds.iter_mut().enumerate() {
            for system in round_order(&boots, round) {
                eprintln!(
                    "bench cluster: round {}/{}: {system} ...",
                    round + 1,
                    args.rounds
                );
                let (row, view) = match system {
                    "boot-diskview-servers" => boot_remote(&cluster, &views, head, &rt)?,
                    "boot-replay" => boot_replay(&cluster, head, &rt)?,
                    other => bail!("unknown system {other:?}"),
                };
                // Both boots must hold the same items at the same index.
                let snapshot = view.snapshot();
                match &reference {
                    None => reference = Some(snapshot),
                    Some(r) => ensure!(
                        *r == snapshot,
                        "{system} booted a different view than the first boot (index {} \
                         against {}, {} items against {})",
                        snapshot.0,
                        r.0,
                        snapshot.1.len(),
                        r.1.len()
                    ),
                }
                eprintln!(
                    "bench cluster: {system}: {:.2} s, {:.0} bytes per item",
                    row.seconds,
                    row.bytes_per_item.unwrap_or(0.0)
                );
                rows.push(row);
            }
        }
    }
    let cluster_meter = Meter {
        servers: cluster.pids.clone(),
        nats: cluster.nats_pids.clone(),
    };
    for (round, rows) in rounds.iter_mut().enumerate() {
        for system in round_order(&appends, round) {
            eprintln!(
                "bench cluster: round {}/{}: {system} ...",
                round + 1,
                args.rounds
            );
            let row = match system {
                "spindle-jetstream" => {
                    let target = AppendTarget::new(&cluster.api, Some(&cluster.token), args.http)?;
                    let mut row =
                        rt.block_on(http_appends(system, &target, args, &cluster_meter))?;
                    let client = HttpClient::new(&cluster.api, Some(cluster.token.clone()));
                    // The Disk View servers finish applying before the next system runs;
                    // the CPU they spend on it counts here, not there.
                    let catch_up = cluster_meter.start()?;
                    let head = rt.block_on(durable_index(&client))?;
                    rt.block_on(wait_for_disk_views(&cluster, head, args.partitions))?;
                    let (servers, nats, _) = catch_up.read()?;
                    row.server_cpu_s = row.server_cpu_s.map(|c| c + servers);
                    row.nats_cpu_s = row.nats_cpu_s.map(|c| c + nats);
                    rt.block_on(print_log_counters(&cluster));
                    row
                }
                "jetstream-raw" => rt.block_on(raw_publishes(&cluster, args, false))?,
                "jetstream-raw-batch" => rt.block_on(raw_publishes(&cluster, args, true))?,
                "spindle-file" => {
                    let data = base.join(format!("file-{round}"));
                    let conf = base.join(format!("file-{round}.toml"));
                    std::fs::write(&conf, CLIENTS_CONF)
                        .with_context(|| format!("writing {}", conf.display()))?;
                    let server = ServeChild::start(&exe, &file_serve_args(args, &data, &conf))?;
                    let target = AppendTarget::new(&server.http_addr, None, args.http)?;
                    let meter = Meter {
                        servers: vec![server.pid()],
                        nats: Vec::new(),
                    };
                    let mut row = rt.block_on(http_appends(system, &target, args, &meter))?;
                    row.nats_cpu_s = None;
                    server.stop()?;
                    std::fs::remove_dir_all(&data)?;
                    row
                }
                other => bail!("unknown system {other:?}"),
            };
            eprintln!("bench cluster: {system}: {:.0} events/s", row.rate());
            rows.push(row);
        }
    }
    cluster.down()?;
    let _ = std::fs::remove_dir(&args.dir);
    let summaries = verdicts(&rounds);
    if args.json {
        return print_rounds_json(&rounds, &summaries);
    }
    print_medians(&systems, &rounds);
    println!();
    print_summaries(&summaries);
    Ok(())
}

fn find<'a>(rows: &'a [Row], system: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.system == system)
}

/// The issue's targets, each judged on the median of the per-round ratios.
fn verdicts(rounds: &[Vec<Row>]) -> Vec<Summary> {
    let ratio = |a: &str, b: &str, f: fn(&Row, &Row) -> f64| {
        spindle_bench::report::per_round(rounds, |rows| Some(f(find(rows, a)?, find(rows, b)?)))
    };
    [
        Summary::judge(
            "spindle-jetstream / jetstream-raw (events/s)",
            &ratio("spindle-jetstream", "jetstream-raw", |a, b| {
                a.rate() / b.rate()
            }),
            Target::AtLeast(0.8),
        ),
        Summary::judge(
            "boot-replay / boot-diskview-servers (seconds; boot from Disk View servers this many times faster)",
            &ratio("boot-replay", "boot-diskview-servers", |a, b| {
                a.seconds / b.seconds
            }),
            Target::AtLeast(2.0),
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn print_medians(systems: &[&str], rounds: &[Vec<Row>]) {
    let rows: Vec<(String, Vec<Option<spindle_bench::report::Spread>>)> = systems
        .iter()
        .map(|&system| {
            let of = |f: fn(&Row) -> Option<f64>| {
                spread_of(
                    rounds,
                    |rows| find(rows, system),
                    move |r| f(r).unwrap_or(f64::NAN),
                )
            };
            (
                system.to_owned(),
                vec![
                    of(|r| Some(r.rate())),
                    of(|r| Some(r.seconds)),
                    of(|r| r.p50_ack_us),
                    of(|r| r.p99_ack_us),
                    of(|r| r.bytes_per_item),
                    of(|r| Some(r.server_cpu_s? * 1e6 / r.events? as f64)),
                    of(|r| Some(r.nats_cpu_s? * 1e6 / r.events? as f64)),
                    of(|r| Some(r.client_cpu_s? * 1e6 / r.events? as f64)),
                ],
            )
        })
        .collect();
    print_spreads(
        "system",
        &[
            ("events or items/s", 0),
            ("seconds", 2),
            ("p50 ack µs", 0),
            ("p99 ack µs", 0),
            ("bytes/item", 0),
            ("server CPU µs/event", 0),
            ("of it NATS", 0),
            ("client CPU µs/event", 0),
        ],
        &rows,
    );
}

/// The cluster the bench started; stopped when dropped if `down` was not called.
struct Cluster {
    exe: PathBuf,
    dir: PathBuf,
    /// The bench's directory holding `dir`, removed once the cluster is down.
    base: PathBuf,
    api: String,
    token: String,
    nats: Vec<String>,
    monitors: Vec<String>,
    stream: String,
    /// Where the bytes a boot receives are counted.
    rx_device: String,
    /// Every member's process.
    pids: Vec<u32>,
    /// The NATS servers' processes (among `pids`).
    nats_pids: Vec<u32>,
    /// Every Spindle member's name and HTTP URL.
    spindles: Vec<(String, String)>,
    stopped: bool,
}

/// The processes whose CPU time a system is charged: `servers` (all of them) and the NATS
/// servers among them; this process's own time is the clients'.
struct Meter {
    servers: Vec<u32>,
    nats: Vec<u32>,
}

/// CPU seconds at one moment, to subtract from a later reading.
struct Cpu<'m> {
    meter: &'m Meter,
    servers: f64,
    nats: f64,
    own: f64,
}

fn cpu_sum(pids: &[u32]) -> anyhow::Result<f64> {
    pids.iter()
        .map(|&p| {
            spindle_bench::serve_child::cpu_seconds(p)
                .with_context(|| format!("process {p} of the bench's servers is gone"))
        })
        .sum()
}

impl Meter {
    fn start(&self) -> anyhow::Result<Cpu<'_>> {
        Ok(Cpu {
            meter: self,
            servers: cpu_sum(&self.servers)?,
            nats: cpu_sum(&self.nats)?,
            own: spindle_bench::serve_child::cpu_seconds(std::process::id())?,
        })
    }
}

impl Cpu<'_> {
    /// CPU seconds since the start: (servers, NATS servers, this process).
    fn read(&self) -> anyhow::Result<(f64, f64, f64)> {
        Ok((
            cpu_sum(&self.meter.servers)? - self.servers,
            cpu_sum(&self.meter.nats)? - self.nats,
            spindle_bench::serve_child::cpu_seconds(std::process::id())? - self.own,
        ))
    }

    /// Fill `row`'s CPU fields with the time since the start.
    fn charge(&self, row: &mut Row) -> anyhow::Result<()> {
        let (servers, nats, own) = self.read()?;
        row.server_cpu_s = Some(servers);
        row.nats_cpu_s = Some(nats);
        row.client_cpu_s = Some(own);
        Ok(())
    }
}

/// On SIGINT or SIGTERM: stop the cluster, remove the bench's files (only if it stopped) and
/// exit 130.
async fn stop_on_signal(exe: PathBuf, cluster_dir: PathBuf, base: PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    let name = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    eprintln!("bench cluster: {name}; stopping the cluster ...");
    stop_cluster(&exe, &cluster_dir, &base);
    std::process::exit(130);
}

/// `spindle cluster down`, then remove `base` if it stopped everything; else say where the
/// cluster's state is left.
fn stop_cluster(exe: &Path, cluster_dir: &Path, base: &Path) -> bool {
    // `cluster up` writes its state before it creates anything: without it nothing runs.
    let started = cluster_dir.join(state::STATE_FILE).exists();
    let stopped = !started
        || Command::new(exe)
            .args(["cluster", "down", "--dir"])
            .arg(cluster_dir)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if stopped {
        let _ = std::fs::remove_dir_all(base);
    } else {
        eprintln!(
            "bench cluster: the cluster did not stop; its state is in {} \
             (spindle cluster down --dir {})",
            cluster_dir.display(),
            cluster_dir.display()
        );
    }
    stopped
}

impl Cluster {
    fn up(
        exe: &Path,
        dir: &Path,
        base: &Path,
        args: &Args,
        loopback: bool,
    ) -> anyhow::Result<Cluster> {
        let mut cmd = Command::new(exe);
        cmd.args(["cluster", "up", "--dir"])
            .arg(dir)
            .args([
                "--nats",
                "3",
                "--replicas",
                "1",
                "--api",
                "1",
                "--no-truncate",
                "--partitions",
            ])
            .arg(args.partitions.to_string());
        if loopback {
            cmd.arg("--loopback");
        }
        if let Some(nats) = &args.nats_server {
            cmd.arg("--nats-server").arg(nats);
        }
        eprintln!(
            "bench cluster: starting the cluster in {} ...",
            dir.display()
        );
        // Its table goes to stderr: stdout is the bench's results.
        let out = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?))
            .stderr(Stdio::inherit())
            .status()
            .context("running spindle cluster up")?;
        let mut cluster = Cluster {
            exe: exe.to_owned(),
            dir: dir.to_owned(),
            base: base.to_owned(),
            api: String::new(),
            token: String::new(),
            nats: Vec::new(),
            monitors: Vec::new(),
            stream: String::new(),
            rx_device: "lo".to_owned(),
            pids: Vec::new(),
            nats_pids: Vec::new(),
            spindles: Vec::new(),
            stopped: false,
        };
        if !out.success() {
            bail!("spindle cluster up failed ({out})");
        }
        let c = state::load(dir)?.context("spindle cluster up left no cluster state")?;
        cluster.token = std::fs::read_to_string(dir.join(state::TOKEN_FILE))?
            .trim()
            .to_owned();
        cluster.api = c
            .members
            .iter()
            .find(|m| m.role == crate::cluster::plan::API_ROLE)
            .and_then(|m| m.http_url())
            .context("the cluster has no api server")?;
        cluster.nats = c
            .members
            .iter()
            .filter_map(|m| m.nats_client_url())
            .collect();
        cluster.monitors = c.members.iter().filter_map(|m| m.monitor_url()).collect();
        cluster.stream = c.stream.clone();
        cluster.spindles = c
            .members
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.http_url()?)))
            .collect();
        cluster.pids = c.members.iter().filter_map(|m| m.pid).collect();
        cluster.nats_pids = c
            .members
            .iter()
            .filter(|m| m.is_nats())
            .filter_map(|m| m.pid)
            .collect();
        ensure!(
            cluster.pids.len() == c.members.len(),
            "a member of the cluster did not start"
        );
        if let Network::Namespaces { bridge, .. } = &c.network {
            cluster.rx_device = bridge.clone();
        }
        Ok(cluster)
    }

    fn down(mut self) -> anyhow::Result<()> {
        self.stopped = true;
        ensure!(
            stop_cluster(&self.exe, &self.dir, &self.base),
            "spindle cluster down --dir {} failed",
            self.dir.display()
        );
        Ok(())
    }

    fn rx_bytes(&self) -> anyhow::Result<u64> {
        let path = format!("/sys/class/net/{}/statistics/rx_bytes", self.rx_device);
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("reading {path}"))?
            .trim()
            .parse()?)
    }

    fn log_config(&self) -> spindle_log::jetstream::JetStreamConfig {
        let mut config =
            spindle_log::jetstream::JetStreamConfig::new(self.nats.clone(), self.monitors.clone());
        config.stream = self.stream.clone();
        config.replicas = 3.min(self.nats.len());
        config
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.stopped {
            stop_cluster(&self.exe, &self.dir, &self.base);
        }
    }
}

use std::os::fd::AsFd as _;

fn key_of(j: u64) -> String {
    format!("users/{}", j % NODES)
}

fn user_bytes(j: u64) -> u64 {
    (key_of(j).len() + EVENT_JSON.len()) as u64
}

fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// The file node's config: every client of the bench connects from one address, and
/// `--clients` may pass the default share of one source (`connections_per_source_max`).
const CLIENTS_CONF: &str = "connections_per_source_max = 1000000\n";

fn file_serve_args(args: &Args, data: &Path, conf: &Path) -> Vec<String> {
    vec![
        "--config".into(),
        conf.to_string_lossy().into_owned(),
        "--data-dir".into(),
        data.to_string_lossy().into_owned(),
        "--disk-partitions".into(),
        args.partitions.to_string(),
        "--http-listen".into(),
        "127.0.0.1:0".into(),
        "--grpc-listen".into(),
        "127.0.0.1:0".into(),
    ]
}

/// `args.events` events, each `POST /v1/txn` alone, `args.clients` requests in flight.
async fn http_appends(
    system: &str,
    target: &AppendTarget,
    args: &Args,
    meter: &Meter,
) -> anyhow::Result<Row> {
    let bodies: Vec<Bytes> = (0..NODES)
        .map(|j| {
            format!(
                r#"{{"writes":[{{"item":{{"kind":"node","id":"{}"}},"value":{EVENT_JSON}}}]}}"#,
                key_of(j)
            )
            .into()
        })
        .collect();
    let next = AtomicU64::new(0);
    let cpu = meter.start()?;
    let start = Instant::now();
    let (next, bodies) = (&next, &bodies);
    let workers = (0..args.clients).map(|_| {
        target.client(|mut sender| async move {
            let mut h = histogram();
            loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= args.events {
                    return anyhow::Ok(h);
                }
                let t = Instant::now();
                let body = bodies[(j % NODES) as usize].clone();
                sender
                    .post("/v1/txn", body)
                    .await
                    .with_context(|| format!("{system}: appending"))?;
                h.record((t.elapsed().as_micros() as u64).max(1))?;
            }
        })
    });
    let mut h = histogram();
    for worker in futures::future::join_all(workers).await {
        h.add(worker?)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut row = append_row(system, args.events, seconds, &h);
    cpu.charge(&mut row)?;
    Ok(row)
}

fn append_row(system: &str, events: u64, seconds: f64, h: &hdrhistogram::Histogram<u64>) -> Row {
    Row {
        system: system.to_owned(),
        events: Some(events),
        items: None,
        bytes: (0..events).map(user_bytes).sum(),
        seconds,
        events_per_s: Some(events as f64 / seconds),
        items_per_s: None,
        bytes_per_item: None,
        server_cpu_s: None,
        client_cpu_s: None,
        nats_cpu_s: None,
        p50_ack_us: Some(h.value_at_quantile(0.5) as f64),
        p99_ack_us: Some(h.value_at_quantile(0.99) as f64),
        leader: None,
    }
}

/// One JetStream message per event, of the size of Spindle's record payload for it, on a
/// stream of the bench's own (created fresh, deleted afterwards): with `batch`, atomic
/// batches of `args.clients` messages, one awaiting its ack at a time; else single publishes
/// with `args.clients` acks awaited at once.
async fn raw_publishes(cluster: &Cluster, args: &Args, batch: bool) -> anyhow::Result<Row> {
    use async_nats::jetstream::{self, stream};
    let servers: Vec<async_nats::ServerAddr> = cluster
        .nats
        .iter()
        .map(|u| u.parse())
        .collect::<Result<_, _>>()?;
    let client = async_nats::connect(servers).await?;
    let js = jetstream::new(client.clone());
    let _ = js.delete_stream(RAW_STREAM).await;
    js.create_stream(stream::Config {
        name: RAW_STREAM.to_owned(),
        subjects: vec![RAW_SUBJECT.to_owned()],
        num_replicas: 3.min(cluster.nats.len()),
        storage: stream::StorageType::File,
        allow_atomic_publish: batch,
        ..Default::default()
    })
    .await
    .map_err(|e| anyhow::anyhow!("creating the stream {RAW_STREAM}: {e}"))?;
    // Spindle's appender leads its stream from the server it publishes to; the raw
    // publishes get the same placement, so that neither pays a relay the other does not.
    let wait = Duration::from_secs(5);
    let placing = Instant::now();
    use spindle_log::jetstream::placement::{lead_from_connected_server, Placement};
    let leader = match lead_from_connected_server(&client, &js, RAW_STREAM, wait).await {
        Ok(placed) => {
            eprintln!(
                "bench cluster: {RAW_STREAM}: {placed:?} in {:?}",
                placing.elapsed()
            );
            match placed {
                Placement::Moved { .. } => "moved".to_owned(),
                Placement::AlreadyLeader { .. } => "local".to_owned(),
            }
        }
        Err(cause) => {
            eprintln!(
                "bench cluster: warning: {RAW_STREAM}'s leader is not the publisher's server: {cause}"
            );
            format!("not placed: {cause}")
        }
    };
    let value = Value::json(EVENT_JSON)?;
    let payloads: Vec<bytes::Bytes> = (0..NODES)
        .map(|j| {
            let key = ItemKey::node(key_of(j))?;
            let len = spindle_core::record::encoded_payload_len(&key, &value);
            Ok(bytes::Bytes::from(vec![b'x'; len]))
        })
        .collect::<Result<_, spindle_core::InputError>>()?;
    let payload = |j: u64| payloads[(j % NODES) as usize].clone();
    let mut h = histogram();
    let meter = Meter {
        servers: cluster.pids.clone(),
        nats: cluster.nats_pids.clone(),
    };
    let cpu = meter.start()?;
    let start = Instant::now();
    let mut next = 0u64;
    if batch {
        let mut batch_no = 0u64;
        while next < args.events {
            // The cluster's servers take batches of up to 10,000 messages.
            let n = (args.events - next).min(args.clients.min(10_000) as u64);
            let t = Instant::now();
            batch_no += 1;
            let id = format!("bench-{batch_no}");
            for i in 0..n {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Batch-Id", id.as_str());
                headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
                if i + 1 < n {
                    client
                        .publish_with_headers(RAW_SUBJECT, headers, payload(next + i))
                        .await?;
                } else {
                    headers.insert("Nats-Batch-Commit", "1");
                    let reply = client
                        .request_with_headers(RAW_SUBJECT, headers, payload(next + i))
                        .await?;
                    let ack: serde_json::Value = serde_json::from_slice(&reply.payload)?;
                    ensure!(
                        ack["error"].is_null() && ack["seq"].as_u64() == Some(next + n),
                        "batch {id} was not stored as sent: {ack}"
                    );
                }
            }
            let micros = (t.elapsed().as_micros() as u64).max(1);
            h.record_n(micros, n)?;
            next += n;
        }
    } else {
        let mut inflight = FuturesUnordered::new();
        while next < args.events || !inflight.is_empty() {
            while next < args.events && inflight.len() < args.clients {
                let t = Instant::now();
                let ack = js
                    .publish(RAW_SUBJECT, payload(next))
                    .await
                    .map_err(|e| anyhow::anyhow!("publishing: {e}"))?;
                inflight.push(async move { (ack.await, t) });
                next += 1;
            }
            if let Some((ack, t)) = inflight.next().await {
                ack.map_err(|e| anyhow::anyhow!("a publish was not acknowledged: {e}"))?;
                h.record((t.elapsed().as_micros() as u64).max(1))?;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let system = if batch {
        "jetstream-raw-batch"
    } else {
        "jetstream-raw"
    };
    let mut row = append_row(system, args.events, seconds, &h);
    row.leader = Some(leader);
    cpu.charge(&mut row)?;
    let _ = js.delete_stream(RAW_STREAM).await;
    Ok(row)
}

/// Each Spindle member's log counters so far (group commits and their records on the
/// appender; records read from the feed and from the stream), on stderr: where the
/// cluster's work per event goes.
async fn print_log_counters(cluster: &Cluster) {
    for (name, url) in &cluster.spindles {
        let client = HttpClient::new(url, Some(cluster.token.clone()));
        let log = match client.json(Method::GET, "/v1/status", None).await {
            Ok((code, status)) if code.is_success() => status["log"].clone(),
            Ok((code, _)) => {
                eprintln!("bench cluster: {name}: /v1/status answered {code}");
                continue;
            }
            Err(e) => {
                eprintln!("bench cluster: {name}: /v1/status: {e}");
                continue;
            }
        };
        let n = |k: &str| log[k].as_u64().unwrap_or(0);
        let per_batch = n("records") as f64 / n("group_commits").max(1) as f64;
        eprintln!(
            "bench cluster: {name}: {} group commits, {per_batch:.1} records each; read {} \
             records from the feed, {} from the stream",
            n("group_commits"),
            n("records_from_feed"),
            n("records_from_stream")
        );
    }
}

/// The api server's durable index.
async fn durable_index(client: &HttpClient) -> anyhow::Result<Index> {
    let (code, status) = client.json(Method::GET, "/v1/status", None).await?;
    ensure!(code.is_success(), "/v1/status answered {code}: {status}");
    let durable = status["log"]["durable_index"]
        .as_u64()
        .context("no log.durable_index in the api server's status")?;
    Ok(Index::new(durable))
}

/// Load `spindle gen`'s graph through the api server; the commit index of its last write.
async fn load_graph(cluster: &Cluster, args: &Args) -> anyhow::Result<Index> {
    let spec = spindle_bench::graph::GraphSpec {
        nodes: args.nodes,
        edges: args.edges,
        versions: args.versions,
        seed: 7,
    };
    let mut lines = Vec::new();
    spindle_bench::graph::generate(&spec, |key, value| {
        lines.extend_from_slice(spindle_bench::graph::json_line(&key, &value).as_bytes());
        lines.push(b'\n');
    });
    eprintln!(
        "bench cluster: loading the graph ({:.1} MB) through the api server ...",
        lines.len() as f64 / 1e6
    );
    let client = HttpClient::new(&cluster.api, Some(cluster.token.clone()));
    let report = spindle_server::load::load(&client, Cursor::new(lines), 1000, 8, |_| {}).await?;
    Ok(Index::new(report.last_index))
}

/// The Disk Views of the catalog once every one has applied `head`.
async fn wait_for_disk_views(
    cluster: &Cluster,
    head: Index,
    partitions: u64,
) -> anyhow::Result<Vec<spindle_server::remote::RemoteView>> {
    let servers: Vec<async_nats::ServerAddr> = cluster
        .nats
        .iter()
        .map(|u| u.parse())
        .collect::<Result<_, _>>()?;
    let js = async_nats::jetstream::new(async_nats::connect(servers).await?);
    let bucket = format!("{}_CATALOG", cluster.stream);
    let kv = js
        .get_key_value(&bucket)
        .await
        .map_err(|e| anyhow::anyhow!("opening the catalog {bucket}: {e}"))?;
    let start = Instant::now();
    loop {
        let mut others = Vec::new();
        let mut keys = kv
            .keys()
            .await
            .map_err(|e| anyhow::anyhow!("listing {bucket}: {e}"))?;
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| anyhow::anyhow!("listing {bucket}: {e}"))?;
            let Some(value) = kv
                .get(&key)
                .await
                .map_err(|e| anyhow::anyhow!("reading {bucket}/{key}: {e}"))?
            else {
                continue;
            };
            let Ok(entry) = serde_json::from_slice(&value) else {
                continue;
            };
            others.push(spindle_server::catalog::Other {
                name: key,
                stale: false,
                entry,
            });
        }
        let views = spindle_server::remote::remote_views(&others);
        let lagging = views.iter().filter(|v| v.applied < head).count();
        if cluster_partitions(&views) == partitions && lagging == 0 {
            eprintln!(
                "bench cluster: {} Disk View servers applied index {head}",
                views.len()
            );
            return Ok(views);
        }
        ensure!(
            start.elapsed() < APPLY_TIMEOUT,
            "the Disk View servers did not apply index {head} within {APPLY_TIMEOUT:?} \
             ({lagging} of {} behind)",
            views.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Distinct partitions among `views` (every one must be there before booting).
fn cluster_partitions(views: &[spindle_server::remote::RemoteView]) -> u64 {
    let mut ranges: Vec<_> = views.iter().map(|v| (v.range.lo(), v.range.hi())).collect();
    ranges.sort_unstable();
    ranges.dedup();
    ranges.len() as u64
}

/// The Memory View booted as an api server boots it: view selection over the catalog's
/// Disk Views to the cut `head`, streams over gRPC from the chosen servers.
fn boot_remote(
    cluster: &Cluster,
    views: &[spindle_server::remote::RemoteView],
    head: Index,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<(Row, MemoryView)> {
    let request = spindle_view::SelectRequest {
        range: Partition::ALL,
        role: spindle_view::Role::Iteration,
        head,
        lag_records_max: 0,
    };
    let plan = spindle_view::select(&spindle_server::remote::selection_catalog(views), &request)
        .map_err(|e| anyhow::anyhow!("no plan over the catalog: {e}"))?;
    ensure!(
        plan.cut == head,
        "the plan's cut {} is not the head {head}",
        plan.cut
    );
    let progress = BootProgress::default();
    let rx = cluster.rx_bytes()?;
    let start = Instant::now();
    let sources = spindle_server::remote::plan_sources(
        &plan,
        views,
        Some(cluster.token.clone()),
        rt.handle().clone(),
    );
    let view = MemoryView::boot(Partition::ALL, &plan, |id| sources.get(id), &progress)
        .map_err(|e| anyhow::anyhow!("booting from the Disk View servers: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let bytes = cluster.rx_bytes()? - rx;
    Ok((
        boot_row("boot-diskview-servers", &view, bytes, seconds),
        view,
    ))
}

/// An empty Memory View caught up from the JetStream log to `head`.
fn boot_replay(
    cluster: &Cluster,
    head: Index,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<(Row, MemoryView)> {
    let log = spindle_log::jetstream::JetStreamLog::open_reader(cluster.log_config())
        .map_err(|e| anyhow::anyhow!("opening a reader of the stream: {e}"))?;
    // (The timer is made inside the runtime: `timeout` needs its clock.)
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(30),
            spindle_log::Log::wait_for(&log, head),
        )
        .await
    })
    .map_err(|_| anyhow::anyhow!("the log reader did not see index {head} within 30 s"))?
    .map_err(|e| anyhow::anyhow!("the log reader failed waiting for index {head}: {e}"))?;
    let rx = cluster.rx_bytes()?;
    let start = Instant::now();
    let view = MemoryView::new(Partition::ALL);
    futures::executor::block_on(spindle_view::follow::catch_up(&view, &log))
        .map_err(|e| anyhow::anyhow!("replaying the log: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    let bytes = cluster.rx_bytes()? - rx;
    futures::executor::block_on(log.close());
    ensure!(
        view.applied_index() == head,
        "the replay stopped at {} before the head {head}",
        view.applied_index()
    );
    Ok((boot_row("boot-replay", &view, bytes, seconds), view))
}

fn boot_row(system: &str, view: &MemoryView, bytes: u64, seconds: f64) -> Row {
    let items = view.len() as u64;
    Row {
        system: system.to_owned(),
        events: None,
        items: Some(items),
        bytes,
        seconds,
        events_per_s: None,
        items_per_s: Some(items as f64 / seconds),
        bytes_per_item: Some(bytes as f64 / items.max(1) as f64),
        server_cpu_s: None,
        client_cpu_s: None,
        nats_cpu_s: None,
        p50_ack_us: None,
        p99_ack_us: None,
        leader: None,
    }
}
