//! `spindle cluster`: a whole cluster on one machine — NATS servers, Disk View servers and
//! API processes, each in its own network namespace on a bridge (or all on 127.0.0.1 with
//! `--loopback`) — started, shown, stopped, and single members killed and started again,
//! from any shell: everything needed is in the directory's state file.
//!
//! Fault model: `up` may fail or be killed at any point; the state file is written before
//! anything is created and after each process starts, so `down` finds and removes all of it.

pub(crate) mod netns;
pub(crate) mod plan;
mod proc;
mod report;
pub(crate) mod state;

use std::io::Read as _;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use plan::{Placement, Programs, Shape};
use report::Prober;
use state::{Cluster, Member, Network, Phase, TOKEN_FILE};

/// How long a member may take to answer after it starts. A Spindle process waits up to a
/// minute for the stream and 30 s for the appender lease of a killed predecessor.
const READY_WAIT: Duration = Duration::from_secs(120);
/// How long Spindle processes get to stop after SIGTERM (their own shutdown bound is 30 s).
const SPINDLE_STOP_WAIT: Duration = Duration::from_secs(40);
/// How long NATS servers get to stop after SIGTERM.
const NATS_STOP_WAIT: Duration = Duration::from_secs(20);
/// How long a process may take to disappear after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How often `up` and `start` ask the members again.
const READY_POLL: Duration = Duration::from_millis(200);
/// Lines of a failed member's log shown with the error.
const LOG_TAIL_LINES: usize = 20;
/// The nats-server version scripts/nats.sh installs.
const NATS_SERVER_VERSION: &str = "2.15.1";

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Start NATS servers, Disk View servers (partitions × replicas) and API processes in a
    /// new directory, wait until every one answers, print them and the API URL.
    Up(UpArgs),
    /// Stop every Spindle process (SIGTERM), then the NATS servers; remove the namespaces,
    /// veths and bridge. Idempotent; cleans up after a failed or interrupted `up` too.
    Down(DirArgs),
    /// Every member with its role, partition, addresses, pid, alive or dead, applied index.
    Status(StatusArgs),
    /// SIGKILL one member (a NATS server or a Spindle process).
    Kill(MemberArgs),
    /// Start one member again with the same data, configuration and addresses.
    Start(MemberArgs),
    /// Add a set of Disk View servers of another partitioning (re-partitioning, or more
    /// replicas): each boots its partition from the Disk View servers already serving,
    /// then follows the log. Waits until every one has booted and the API sees it.
    Add(AddArgs),
    /// Stop Disk View servers for good (SIGTERM: they leave the catalog) and drop them from
    /// the cluster; their data stays in DIR. Refused if a hash range would be left with no
    /// Disk View server.
    Retire(RetireArgs),
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    /// The cluster's directory (as given to `up`).
    #[arg(long)]
    dir: PathBuf,
    /// Partitions of the new set (each a 1/N of the hash space, e.g. 8 beside a 4-way set).
    #[arg(long)]
    partitions: u64,
    /// Disk View servers per partition in the new set (default: the cluster's `--replicas`,
    /// which is the number of replicas truncation waits for).
    #[arg(long)]
    replicas: Option<usize>,
}

#[derive(Debug, clap::Args)]
struct RetireArgs {
    /// The cluster's directory (as given to `up`).
    #[arg(long)]
    dir: PathBuf,
    /// Disk View servers to retire, as `status` lists them (dv-0-r0, dv8-3-r0, …).
    #[arg(required = true)]
    names: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// The cluster's directory: new or empty; every member's data, config and log go here.
    #[arg(long)]
    dir: PathBuf,
    /// NATS servers (odd: 1, 3, 5 or 7). The stream has min(3, this) replicas.
    #[arg(long, default_value_t = 3)]
    nats: usize,
    /// Partitions of the hash space (each held by --replicas Disk View servers).
    #[arg(long, default_value_t = 4)]
    partitions: u64,
    /// Disk View servers per partition.
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// API processes (the URLs to use): one appends, the others stand by and take over
    /// when it dies.
    #[arg(long, default_value_t = 1)]
    api: usize,
    /// Run every member on 127.0.0.1 with distinct ports instead of in network namespaces
    /// (no root needed).
    #[arg(long)]
    loopback: bool,
    /// The private /24 of the namespaces' bridge (.1 is this host's, members from .2).
    /// Default: the first /24 of 10.77.0.0/16 with no address or route on this machine.
    #[arg(long)]
    subnet: Option<String>,
    /// The JetStream stream holding the log.
    #[arg(long, default_value = "SPINDLE")]
    stream: String,
    /// Keep the whole log: no member truncates it (for replaying it from the start, as
    /// `spindle bench cluster` does).
    #[arg(long)]
    no_truncate: bool,
    /// The nats-server binary (default: where scripts/nats.sh installs it).
    #[arg(long, env = "SPINDLE_NATS_SERVER")]
    nats_server: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The cluster's directory (as given to `up`).
    #[arg(long)]
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// The cluster's directory (as given to `up`).
    #[arg(long)]
    dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct MemberArgs {
    /// The cluster's directory (as given to `up`).
    #[arg(long)]
    dir: PathBuf,
    /// The member's name, as `status` lists it (nats-0, dv-1-r0, api-0, …).
    name: String,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    match &args.command {
        Sub::Up(a) => up(a),
        Sub::Down(a) => down(&a.dir),
        Sub::Status(a) => status(&a.dir, a.json),
        Sub::Kill(a) => kill(&a.dir, &a.name),
        Sub::Start(a) => start(&a.dir, &a.name),
        Sub::Add(a) => add(a),
        Sub::Retire(a) => retire(&a.dir, &a.names),
    }
}

fn up(a: &UpArgs) -> anyhow::Result<ExitCode> {
    if !cfg!(feature = "jetstream") {
        bail!(
            "this spindle was built without the `jetstream` feature, which the cluster's log needs"
        );
    }
    let shape = Shape {
        nats: a.nats,
        partitions: a.partitions,
        replicas: a.replicas,
        api: a.api,
        stream: a.stream.clone(),
        truncate: !a.no_truncate,
    };
    plan::check(&shape).map_err(|e| anyhow!(e))?;
    let subnet = match (&a.subnet, a.loopback) {
        (Some(_), true) => bail!("--subnet is for network namespaces; --loopback has none"),
        (Some(s), false) => Some(Some(plan::parse_subnet(s).map_err(|e| anyhow!(e))?)),
        (None, true) => None,
        (None, false) => Some(None),
    };
    let programs = Programs {
        spindle: std::env::current_exe().context("finding the spindle binary")?,
        nats_server: nats_server_bin(a.nats_server.as_deref())?,
    };
    let dir = prepare_dir(&a.dir)?;
    let placement = match subnet {
        None => Placement::Loopback {
            ports: free_ports(plan::ports_needed(&shape))?,
        },
        Some(wanted) => {
            let tag = plan::tag_of(&dir);
            let subnet = netns::check_free(&format!("spb{tag}"), wanted)?;
            Placement::Namespaces { subnet, tag }
        }
    };
    let _lock = state::lock(&dir)?;
    if state::load(&dir)?.is_some() {
        bail!("another `spindle cluster up` took {} first", dir.display());
    }
    let (mut cluster, files) = plan::plan(&dir, &shape, &placement, &programs);
    let token = write_token(&dir)?;
    for f in &files {
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&f.path, &f.text)
            .with_context(|| format!("writing {}", f.path.display()))?;
    }
    cluster.save()?;
    match start_all(&mut cluster, &token) {
        Ok(prober) => {
            cluster.phase = Phase::Up;
            cluster.save()?;
            let rows = report::rows(&cluster, &prober);
            report::print_table(&cluster, &rows);
            report::print_usage(&cluster);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("cluster up failed; stopping what it started");
            if let Err(stop_error) = stop(&cluster) {
                eprintln!(
                    "stopping: {stop_error:#}; run `spindle cluster down --dir {}`",
                    dir.display()
                );
            }
            cluster.phase = Phase::Failed;
            cluster.save()?;
            Err(e.context(format!(
                "the cluster in {} did not start (logs and data are kept there; `up` again needs a new or empty --dir)",
                dir.display()
            )))
        }
    }
}

/// Create the network, start the NATS servers and wait for them, then every Spindle
/// process, and wait for those.
fn start_all(cluster: &mut Cluster, token: &str) -> anyhow::Result<Prober> {
    if let Network::Namespaces { bridge, gateway } = cluster.network.clone() {
        eprintln!(
            "creating the bridge {bridge} ({gateway}/24) and {} network namespaces",
            cluster.members.len()
        );
        netns::create_bridge(&bridge, gateway)?;
        netns::check_alone(&bridge, gateway)?;
        for m in &cluster.members {
            netns::create_member(m, &bridge)
                .with_context(|| format!("creating the network namespace of {}", m.name))?;
        }
    }
    let prober = Prober::new(Some(token.to_owned()))?;
    // NATS first; then the API processes, which create the stream and the catalog bucket;
    // then the Disk View servers. (A Disk View server started with the first process on a
    // fresh stream can find the catalog bucket created but not yet accepting its entry, and
    // exits: "no stream found for given subject".)
    let names = |pick: &dyn Fn(&Member) -> bool| -> Vec<String> {
        cluster
            .members
            .iter()
            .filter(|m| pick(m))
            .map(|m| m.name.clone())
            .collect()
    };
    let nats = names(&|m| m.is_nats());
    let api = names(&|m| !m.is_nats() && m.partition.is_none());
    let disk_views = names(&|m| m.partition.is_some());
    for group in [nats, api, disk_views] {
        eprintln!("starting {}", group.join(", "));
        for name in &group {
            spawn_member(cluster, name, token)?;
        }
        wait_ready(cluster, &group, &prober)?;
    }
    wait_catalog(cluster, &prober)?;
    Ok(prober)
}

/// Wait until every API process sees every Spindle member in the stream's catalog (it
/// reads the catalog every third of its ttl): before that it could not route a read.
fn wait_catalog(cluster: &Cluster, prober: &Prober) -> anyhow::Result<()> {
    let spindle: Vec<&str> = cluster
        .members
        .iter()
        .filter(|m| !m.is_nats())
        .map(|m| m.name.as_str())
        .collect();
    let started = Instant::now();
    for api in cluster
        .members
        .iter()
        .filter(|m| !m.is_nats() && m.partition.is_none())
    {
        loop {
            let seen: Vec<String> = prober
                .spindle_status(api)
                .ok()
                .and_then(|s| {
                    s["cluster"]["catalog"].as_array().map(|c| {
                        c.iter()
                            .filter_map(|m| m["name"].as_str().map(str::to_owned))
                            .collect()
                    })
                })
                .unwrap_or_default();
            let missing: Vec<&str> = spindle
                .iter()
                .copied()
                .filter(|n| !seen.iter().any(|s| s == n))
                .collect();
            if missing.is_empty() {
                break;
            }
            if !proc::alive(api) {
                return Err(member_failed(api, "exited while the catalog filled"));
            }
            if started.elapsed() > READY_WAIT {
                return Err(member_failed(
                    api,
                    &format!(
                        "did not see {} in the catalog within {READY_WAIT:?}",
                        missing.join(", ")
                    ),
                ));
            }
            std::thread::sleep(READY_POLL);
        }
    }
    Ok(())
}

/// Start one member and record its process.
fn spawn_member(cluster: &mut Cluster, name: &str, token: &str) -> anyhow::Result<()> {
    let m = cluster.member(name)?.clone();
    let env: &[(&str, &str)] = if m.is_nats() {
        &[]
    } else {
        &[("SPINDLE_TOKEN", token)]
    };
    let (pid, ticks) = proc::spawn(&m, env)?;
    let m = cluster.member_mut(name).expect("the member exists");
    m.pid = Some(pid);
    m.start_ticks = Some(ticks);
    cluster.save()
}

/// Wait until every named member answers; an error names the first that exited or did not
/// answer in time, with the end of its log.
fn wait_ready(cluster: &Cluster, names: &[String], prober: &Prober) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut pending: Vec<&Member> = names
        .iter()
        .map(|n| cluster.member(n))
        .collect::<anyhow::Result<_>>()?;
    loop {
        if let Some(dead) = pending.iter().find(|m| !proc::alive(m)) {
            return Err(member_failed(dead, "exited before it answered"));
        }
        pending.retain(|m| !prober.ready(m));
        let Some(first) = pending.first() else {
            return Ok(());
        };
        if started.elapsed() > READY_WAIT {
            return Err(member_failed(
                first,
                &format!("did not answer within {READY_WAIT:?}"),
            ));
        }
        std::thread::sleep(READY_POLL);
    }
}

fn member_failed(m: &Member, why: &str) -> anyhow::Error {
    anyhow!(
        "member {} ({}) {why}; the end of {}:\n{}",
        m.name,
        m.role,
        m.log.display(),
        proc::log_tail(&m.log, LOG_TAIL_LINES)
    )
}

/// SIGTERM every Spindle process and wait, then the NATS servers; SIGKILL what does not
/// stop; then remove the network. Returns what it stopped and removed.
fn stop(cluster: &Cluster) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    let (nats, spindle): (Vec<&Member>, Vec<&Member>) =
        cluster.members.iter().partition(|m| m.is_nats());
    for (group, wait) in [(spindle, SPINDLE_STOP_WAIT), (nats, NATS_STOP_WAIT)] {
        for m in &group {
            if proc::signal(m, "TERM")? {
                done.push(format!("{} (pid {})", m.name, m.pid.unwrap_or(0)));
            }
        }
        let stubborn = proc::wait_gone(&group, wait);
        for name in &stubborn {
            eprintln!("{name} did not stop within {wait:?} of SIGTERM: sending SIGKILL");
            proc::signal(cluster.member(name)?, "KILL")?;
        }
        let left = proc::wait_gone(&group, KILL_WAIT);
        if !left.is_empty() {
            bail!("still running after SIGKILL: {}", left.join(", "));
        }
    }
    if let Network::Namespaces { bridge, .. } = &cluster.network {
        done.extend(netns::remove(bridge, &cluster.members)?);
    }
    Ok(done)
}

fn down(dir: &Path) -> anyhow::Result<ExitCode> {
    state::load_existing(dir)?;
    let _lock = state::lock(dir)?;
    let mut cluster = state::load_existing(dir)?;
    let done = stop(&cluster)?;
    cluster.phase = Phase::Down;
    cluster.save()?;
    if done.is_empty() {
        println!("nothing was running in {}", cluster.dir.display());
    } else {
        println!("stopped and removed: {}", done.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

fn status(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let cluster = state::load_existing(dir)?;
    let prober = Prober::new(report::read_token(&cluster))?;
    let rows = report::rows(&cluster, &prober);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&cluster, &rows))?
        );
    } else {
        println!("cluster in {} ({:?})", cluster.dir.display(), cluster.phase);
        report::print_table(&cluster, &rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn kill(dir: &Path, name: &str) -> anyhow::Result<ExitCode> {
    let cluster = state::load_existing(dir)?;
    let m = cluster.member(name)?;
    if !proc::signal(m, "KILL")? {
        bail!("{name} is not running");
    }
    let left = proc::wait_gone(&[m], KILL_WAIT);
    if !left.is_empty() {
        bail!("{name} (pid {:?}) still runs after SIGKILL", m.pid);
    }
    println!("killed {name} (pid {})", m.pid.unwrap_or(0));
    Ok(ExitCode::SUCCESS)
}

fn start(dir: &Path, name: &str) -> anyhow::Result<ExitCode> {
    state::load_existing(dir)?;
    let lock = state::lock(dir)?;
    let mut cluster = state::load_existing(dir)?;
    match cluster.phase {
        Phase::Up => {}
        Phase::Down => bail!(
            "the cluster in {} was stopped with `down`; `start` restarts single members of a running cluster",
            cluster.dir.display()
        ),
        Phase::Starting | Phase::Failed => bail!(
            "`up` did not finish in {}; stop it with `spindle cluster down --dir {}`",
            cluster.dir.display(),
            dir.display()
        ),
    }
    let m = cluster.member(name)?;
    if proc::alive(m) {
        bail!("{name} is running already (pid {})", m.pid.unwrap_or(0));
    }
    if let Some(ns) = &m.netns {
        anyhow::ensure!(
            Path::new("/run/netns").join(ns).exists(),
            "the network namespace {ns} of {name} is gone"
        );
    }
    let token = report::read_token(&cluster)
        .ok_or_else(|| anyhow!("{} is missing", cluster.dir.join(TOKEN_FILE).display()))?;
    spawn_member(&mut cluster, name, &token)?;
    drop(lock);
    let prober = Prober::new(Some(token))?;
    wait_ready(&cluster, &[name.to_owned()], &prober)?;
    let rows = report::rows(&cluster, &prober);
    let rows: Vec<_> = rows.into_iter().filter(|r| r.member.name == name).collect();
    report::print_table(&cluster, &rows);
    Ok(ExitCode::SUCCESS)
}

/// Refuse a command that changes a cluster unless `up` finished and `down` has not run.
fn check_up(cluster: &Cluster, what: &str) -> anyhow::Result<()> {
    match cluster.phase {
        Phase::Up => Ok(()),
        Phase::Down => bail!(
            "the cluster in {} was stopped with `down`; `{what}` changes a running cluster",
            cluster.dir.display()
        ),
        Phase::Starting | Phase::Failed => bail!(
            "`up` did not finish in {}; stop it with `spindle cluster down --dir {0}`",
            cluster.dir.display()
        ),
    }
}

/// How long the new Disk View servers of `add` may take to boot.
const BOOT_WAIT: Duration = Duration::from_secs(3600);

fn add(a: &AddArgs) -> anyhow::Result<ExitCode> {
    state::load_existing(&a.dir)?;
    let lock = state::lock(&a.dir)?;
    let mut cluster = state::load_existing(&a.dir)?;
    check_up(&cluster, "add")?;
    let replicas = a.replicas.unwrap_or(cluster.replicas);
    let count = plan::check_add(&cluster, a.partitions, replicas).map_err(|e| anyhow!(e))?;
    let ports = match cluster.network {
        Network::Loopback => free_ports(2 * count)?,
        Network::Namespaces { .. } => Vec::new(),
    };
    let added = plan::add(&mut cluster, a.partitions, replicas, &ports)?;
    let token = report::read_token(&cluster)
        .ok_or_else(|| anyhow!("{} is missing", cluster.dir.join(TOKEN_FILE).display()))?;
    cluster.save()?;
    if let Network::Namespaces { bridge, .. } = cluster.network.clone() {
        for name in &added {
            netns::create_member(cluster.member(name)?, &bridge)
                .with_context(|| format!("creating the network namespace of {name}"))?;
        }
    }
    eprintln!("starting {}", added.join(", "));
    for name in &added {
        spawn_member(&mut cluster, name, &token)?;
    }
    drop(lock);
    let prober = Prober::new(Some(token))?;
    wait_ready(&cluster, &added, &prober)?;
    wait_booted(&cluster, &added, &prober)?;
    wait_catalog(&cluster, &prober)?;
    let rows = report::rows(&cluster, &prober);
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| added.contains(&r.member.name))
        .collect();
    report::print_table(&cluster, &rows);
    Ok(ExitCode::SUCCESS)
}

/// Wait until every named Spindle member has booted its Disk Views (`status.boots` all
/// done), printing their progress now and then; a failed boot is an error.
fn wait_booted(cluster: &Cluster, names: &[String], prober: &Prober) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut said = Instant::now();
    loop {
        let mut pending = Vec::new();
        for name in names {
            let m = cluster.member(name)?;
            if !proc::alive(m) {
                return Err(member_failed(m, "exited while it booted"));
            }
            let status = prober.spindle_status(m).unwrap_or_default();
            for b in status["boots"].as_array().into_iter().flatten() {
                match b["state"].as_str() {
                    Some("done") => {}
                    Some("failed") => {
                        return Err(member_failed(
                            m,
                            &format!("failed to boot {}: {}", b["view"], b["error"]),
                        ))
                    }
                    _ => pending.push(format!(
                        "{name}/{} {} ({} items{})",
                        b["view"].as_str().unwrap_or("?"),
                        b["state"].as_str().unwrap_or("?"),
                        b["items"],
                        b["waiting"]
                            .as_str()
                            .map(|w| format!(": {w}"))
                            .unwrap_or_default()
                    )),
                }
            }
            if status["boots"].is_null() {
                pending.push(format!("{name} (no status yet)"));
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if started.elapsed() > BOOT_WAIT {
            bail!("not booted within {BOOT_WAIT:?}: {}", pending.join("; "));
        }
        if said.elapsed() > Duration::from_secs(5) {
            eprintln!("booting: {}", pending.join("; "));
            said = Instant::now();
        }
        std::thread::sleep(READY_POLL);
    }
}

fn retire(dir: &Path, names: &[String]) -> anyhow::Result<ExitCode> {
    state::load_existing(dir)?;
    let _lock = state::lock(dir)?;
    let mut cluster = state::load_existing(dir)?;
    check_up(&cluster, "retire")?;
    plan::check_retire(&cluster, names).map_err(|e| anyhow!(e))?;
    let leaving: Vec<Member> = names
        .iter()
        .map(|n| cluster.member(n).cloned())
        .collect::<anyhow::Result<_>>()?;
    for m in &leaving {
        proc::signal(m, "TERM")?;
    }
    let group: Vec<&Member> = leaving.iter().collect();
    for name in proc::wait_gone(&group, SPINDLE_STOP_WAIT) {
        eprintln!("{name} did not stop within {SPINDLE_STOP_WAIT:?} of SIGTERM: sending SIGKILL");
        proc::signal(cluster.member(&name)?, "KILL")?;
    }
    let left = proc::wait_gone(&group, KILL_WAIT);
    if !left.is_empty() {
        bail!("still running after SIGKILL: {}", left.join(", "));
    }
    if let Network::Namespaces { .. } = &cluster.network {
        netns::remove_members(&leaving)?;
    }
    cluster.members.retain(|m| !names.contains(&m.name));
    cluster.save()?;
    println!(
        "retired {} (their data stays in {})",
        names.join(", "),
        cluster.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Refuse a directory with a cluster or anything else in it; create it; its absolute path.
fn prepare_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    if let Some(c) = state::load(dir)? {
        let alive: Vec<&str> = c
            .members
            .iter()
            .filter(|m| proc::alive(m))
            .map(|m| m.name.as_str())
            .collect();
        if !alive.is_empty() {
            bail!(
                "a cluster is running in {} already ({} of its {} members alive); see it with \
                 `spindle cluster status --dir {0}`, stop it with `spindle cluster down --dir {0}`",
                dir.display(),
                alive.len(),
                c.members.len()
            );
        }
        bail!(
            "{} holds a cluster that is not running ({:?}); `up` needs a new or empty \
             directory: remove it or choose another --dir",
            dir.display(),
            c.phase
        );
    }
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir)
            .with_context(|| format!("--dir {} is not a directory", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty; `up` needs a new or empty directory",
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(std::fs::canonicalize(dir)?)
}

/// A new random bearer token (128 bits, hex), written to DIR/token with mode 0600.
fn write_token(dir: &Path) -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join(TOKEN_FILE);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    writeln!(f, "{token}")?;
    Ok(token)
}

/// `n` distinct ports free on 127.0.0.1 now (all held at once, then released).
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// The nats-server to run: the flag or SPINDLE_NATS_SERVER, else where scripts/nats.sh
/// installs it.
fn nats_server_bin(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given {
        anyhow::ensure!(
            p.is_file(),
            "nats-server {} (--nats-server or SPINDLE_NATS_SERVER) does not exist; \
             scripts/nats.sh installs nats-server {NATS_SERVER_VERSION} and prints its path",
            p.display()
        );
        return Ok(p.to_owned());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| anyhow!("neither HOME nor XDG_CACHE_HOME is set"))?;
    let p = cache
        .join("spindle")
        .join(format!("nats-server-{NATS_SERVER_VERSION}"))
        .join("bin/nats-server");
    anyhow::ensure!(
        p.is_file(),
        "nats-server is not installed at {}: run scripts/nats.sh (it installs nats-server \
         {NATS_SERVER_VERSION} there), or give its path with --nats-server or SPINDLE_NATS_SERVER",
        p.display()
    );
    Ok(p)
}
