//! `spindle torture`: crash trials of the whole node. Each trial runs concurrent clients
//! against a `spindle serve` child (multi-item conditional transactions with deletes,
//! read-modify-write counters, chunk puts, reads that wait for their index), SIGKILLs it at
//! a random moment, restarts it on the same data directory and verifies it against the
//! model of everything acknowledged (`model.rs`): acknowledged writes present at their index
//! with their value, no transaction partly visible, counters exact, chunks readable with
//! their hash, the Memory View equal to the Disk Views. The data directory persists across
//! trials, with small log segments and frequent truncation, so state accumulates.

mod model;
mod rng;
mod work;

use std::io::{BufRead as _, BufReader, IsTerminal as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use indicatif::{ProgressBar, ProgressStyle};
use spindle_server::client::HttpClient;

use rng::Rng;
use work::{State, Violation};

/// Log segments are this small so that trials roll and truncate them often.
const LOG_SEGMENT_BYTES: u64 = 32 << 10;
/// The truncation worker runs this often, so that a kill often lands near a truncation.
const TRUNCATE_INTERVAL_MS: u64 = 100;
/// One restart in this many is killed again during recovery, within this many milliseconds
/// of the node printing its addresses.
const RECOVERY_KILL_ONE_IN: u64 = 8;
const RECOVERY_KILL_MS_MAX: u64 = 50;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Crash trials to run (each: clients run, SIGKILL, restart, verify).
    #[arg(long, default_value_t = 100)]
    trials: u64,
    /// Seed of every random choice (the default is taken from the clock and printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Data directory for the node; must be absent or empty. Default: a new directory
    /// under the system's temporary directory, removed after a run without violations.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Longest the clients run before the kill, in milliseconds (uniform from 0).
    #[arg(long, default_value_t = 300)]
    run_ms_max: u64,
    /// Start no new trial after this many seconds.
    #[arg(long)]
    time_limit_s: Option<u64>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Check a deliberately wrong expectation once, to show the checker reports it.
    #[arg(long, value_enum, hide = true)]
    sabotage: Option<Sabotage>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Sabotage {
    /// Claim an acknowledgement the node never gave.
    LostWrite,
    /// Pretend an acknowledged multi-item transaction was unanswered and half known.
    PartialTxn,
}

/// A `spindle serve` child on the trial directory; SIGKILLed when dropped.
#[derive(Debug)]
struct ServeProcess {
    child: Child,
    /// Kept open so that the node's stdout never becomes a broken pipe.
    _stdout: BufReader<ChildStdout>,
    http: String,
    grpc: String,
}

impl ServeProcess {
    fn start(exe: &Path, dir: &Path) -> anyhow::Result<ServeProcess> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("serve.log"))?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(dir.join("torture.toml"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--http-listen",
                "127.0.0.1:0",
                "--grpc-listen",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "warn")
            .env_remove("SPINDLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                let status = child.wait()?;
                bail!(
                    "spindle serve exited ({status}) before printing its addresses; see {}",
                    dir.join("serve.log").display()
                );
            }
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(str::to_owned)
            };
            if let (Some(http), Some(grpc)) = (field("http="), field("grpc=")) {
                return Ok(ServeProcess {
                    http,
                    grpc,
                    child,
                    _stdout: stdout,
                });
            }
        }
    }

    /// SIGKILL and reap.
    fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a run found.
#[derive(Debug, serde::Serialize)]
struct Summary {
    seed: u64,
    trials: u64,
    clients: usize,
    txns_acknowledged: u64,
    writes_acknowledged: u64,
    increments_acknowledged: u64,
    chunks_acknowledged: u64,
    unacknowledged: u64,
    unacknowledged_landed: u64,
    unacknowledged_chunks: u64,
    conflicts_retried: u64,
    stale_conditions_refused: u64,
    reads_own_writes: u64,
    checks: u64,
    log_records_replayed: u64,
    kills_during_recovery: u64,
    seconds: f64,
    violations: Vec<Violation>,
}

fn summary(s: &State, seed: u64, trials: u64, clients: usize, seconds: f64) -> Summary {
    Summary {
        seed,
        trials,
        clients,
        txns_acknowledged: s.txn_acks,
        writes_acknowledged: s.write_acks,
        increments_acknowledged: s.increment_acks,
        chunks_acknowledged: s.chunks.len() as u64,
        unacknowledged: s.maybe_total,
        unacknowledged_landed: s.maybe_landed,
        unacknowledged_chunks: s.maybe_chunks,
        conflicts_retried: s.conflicts_retried,
        stale_conditions_refused: s.stale_refused,
        reads_own_writes: s.reads_own_writes,
        checks: s.checks,
        log_records_replayed: s.replayed_records,
        kills_during_recovery: 0,
        seconds,
        violations: s.violations.clone(),
    }
}

fn prepare_dir(args: &Args, seed: u64) -> anyhow::Result<(PathBuf, bool)> {
    let (dir, generated) = match &args.dir {
        Some(d) => (d.clone(), false),
        None => (
            std::env::temp_dir().join(format!("spindle-torture-{seed}-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if std::fs::read_dir(&dir)?.next().is_some() {
        bail!(
            "{} is not empty: a torture run needs a fresh data directory (its model starts empty)",
            dir.display()
        );
    }
    std::fs::write(
        dir.join("torture.toml"),
        format!(
            "log_segment_bytes = {LOG_SEGMENT_BYTES}\ntruncate_interval_ms = {TRUNCATE_INTERVAL_MS}\n"
        ),
    )?;
    Ok((dir, generated))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.clients >= 1, "--clients must be at least 1");
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let (dir, generated) = prepare_dir(args, seed)?;
    let exe = std::env::current_exe().context("finding the spindle binary")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let state = Arc::new(Mutex::new(State::new(args.clients)));
    let mut rng = Rng::new(seed);
    let bar = if std::io::stderr().is_terminal() && !args.json {
        ProgressBar::new(args.trials).with_style(ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} trials {msg}",
        )?)
    } else {
        ProgressBar::hidden()
    };
    let plain_progress = bar.is_hidden() && !args.json;
    if !args.json {
        eprintln!(
            "spindle torture: seed {seed}, {} trials, {} clients, data in {}",
            args.trials,
            args.clients,
            dir.display()
        );
    }
    let started = Instant::now();
    let mut sabotage = args.sabotage;
    let mut done = 0;
    let mut recovery_kills = 0;
    // Trial t's crash is verified by the start that follows it; one more start verifies
    // the last trial.
    for t in 1..=args.trials + 1 {
        // Sometimes the node is killed again while it recovers, before anything is asked.
        if t > 1 && rng.below(RECOVERY_KILL_ONE_IN) == 0 {
            let node = ServeProcess::start(&exe, &dir);
            std::thread::sleep(Duration::from_millis(rng.below(RECOVERY_KILL_MS_MAX + 1)));
            if let Ok(node) = node {
                node.kill()?;
                recovery_kills += 1;
            }
        }
        let node = match ServeProcess::start(&exe, &dir) {
            Ok(n) => n,
            Err(e) => {
                state
                    .lock()
                    .unwrap()
                    .violation(format!("the node did not restart: {e:#}"));
                break;
            }
        };
        let http = HttpClient::new(&node.http, None);
        {
            let mut s = state.lock().unwrap();
            if let Err(e) = rt.block_on(work::verify(&http, &node.grpc, &mut s, &mut rng)) {
                s.violation(format!("verification could not finish: {e:#}"));
            }
        }
        let out_of_time = args
            .time_limit_s
            .is_some_and(|l| started.elapsed() > Duration::from_secs(l));
        if t > args.trials || out_of_time {
            node.kill()?;
            break;
        }
        state.lock().unwrap().trial = t;
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..args.clients)
            .map(|c| {
                rt.spawn(work::client(
                    c,
                    http.clone(),
                    state.clone(),
                    stop.clone(),
                    rng.fork(),
                ))
            })
            .collect();
        // The kill comes at a random moment of the clients' run.
        std::thread::sleep(Duration::from_millis(rng.below(args.run_ms_max + 1)));
        node.kill()?;
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            rt.block_on(c).context("a client task panicked")?;
        }
        let mut s = state.lock().unwrap();
        let applied = match sabotage {
            Some(Sabotage::LostWrite) => s.sabotage_lost_write(),
            Some(Sabotage::PartialTxn) => s.sabotage_partial_txn(),
            None => false,
        };
        if applied {
            sabotage = None;
        }
        done = t;
        let line = format!(
            "acked {} txns, {} increments, {} chunks; {} violations",
            s.txn_acks,
            s.increment_acks,
            s.chunks.len(),
            s.violations.len()
        );
        if plain_progress {
            eprintln!(
                "trial {t}/{} ({:.0}s): {line}",
                args.trials,
                started.elapsed().as_secs_f64()
            );
        }
        bar.set_message(line);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let s = state.lock().unwrap();
    let mut sum = summary(
        &s,
        seed,
        done,
        args.clients,
        started.elapsed().as_secs_f64(),
    );
    sum.kills_during_recovery = recovery_kills;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sum)?);
    } else {
        println!(
            "trials {}  acknowledged: {} txns ({} writes), {} increments, {} chunks  \
             unacknowledged: {} ({} landed), {} chunks  reads of own writes {}  stale conditions refused {}  \
             checks {}  log records replayed {}  kills during recovery {}  violations {}  {:.1}s  (seed {seed})",
            sum.trials,
            sum.txns_acknowledged,
            sum.writes_acknowledged,
            sum.increments_acknowledged,
            sum.chunks_acknowledged,
            sum.unacknowledged,
            sum.unacknowledged_landed,
            sum.unacknowledged_chunks,
            sum.reads_own_writes,
            sum.stale_conditions_refused,
            sum.checks,
            sum.log_records_replayed,
            sum.kills_during_recovery,
            sum.violations.len(),
            sum.seconds,
        );
        for v in &sum.violations {
            println!("violation after trial {}: {}", v.trial, v.what);
        }
    }
    if sum.violations.is_empty() {
        if generated {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("the data directory is kept: {}", dir.display());
        Ok(ExitCode::from(1))
    }
}
