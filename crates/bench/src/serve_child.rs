//! A `spindle serve` child process, for scenarios that measure a node from outside: start it,
//! read the addresses it prints, ask its status, sample what it read from storage
//! (`/proc/<pid>/io` `read_bytes`) and the CPU time of all its threads (`/proc/<pid>/stat`
//! `utime + stime`), and stop it with SIGTERM.
//!
//! Linux only (procfs). A child left running by an error is killed when this is dropped.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use hyper::Method;
use spindle_server::client::HttpClient;

/// How often `wait_until` and `stop` look again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Longest a node may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `spindle serve`.
#[derive(Debug)]
pub struct ServeChild {
    child: Child,
    /// Kept open so that the node's stdout never becomes a broken pipe.
    _stdout: BufReader<ChildStdout>,
    /// The bound gRPC address (`host:port`).
    pub grpc: String,
    /// The bound HTTP address (`host:port`).
    pub http_addr: String,
    http: HttpClient,
    rt: tokio::runtime::Runtime,
    ticks_per_s: f64,
}

/// The node's counters at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Bytes the process caused to be read from the block layer (direct or buffered).
    pub read_bytes: u64,
    /// User plus system CPU seconds of every thread, exited ones included.
    pub cpu_s: f64,
}

impl ServeChild {
    /// Run `exe serve <args>` and wait for its line `spindle serve: http=ADDR grpc=ADDR ...`.
    /// Its log goes to this process's stderr at level `warn`.
    pub fn start(exe: &Path, args: &[String]) -> anyhow::Result<ServeChild> {
        let mut child = Command::new(exe)
            .arg("serve")
            .args(args)
            .env("RUST_LOG", "warn")
            .env_remove("SPINDLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {} serve", exe.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut line = String::new();
        let (http, grpc) = loop {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                let status = child.wait()?;
                bail!("spindle serve exited ({status}) before printing its addresses");
            }
            if let Some(rest) = line.trim().strip_prefix("spindle serve: ") {
                break parse_bound(rest)
                    .with_context(|| format!("unexpected line from spindle serve: {line:?}"))?;
            }
        };
        Ok(ServeChild {
            child,
            _stdout: stdout,
            grpc,
            http: HttpClient::new(&http, None),
            http_addr: http,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            ticks_per_s: clock_ticks_per_second()?,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `GET /v1/status` as JSON.
    pub fn status(&self) -> anyhow::Result<serde_json::Value> {
        let (code, body) = self
            .rt
            .block_on(self.http.json(Method::GET, "/v1/status", None))?;
        anyhow::ensure!(code.is_success(), "/v1/status answered {code}: {body}");
        Ok(body)
    }

    /// Poll the status until `done` holds for it; give up after `timeout`, naming `what`.
    pub fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> anyhow::Result<serde_json::Value> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("spindle serve exited ({status}) while waiting until {what}");
            }
            let status = self.status()?;
            if done(&status) {
                return Ok(status);
            }
            if start.elapsed() > timeout {
                bail!("waited {timeout:?} until {what}; the last status was {status}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Storage reads and CPU time so far.
    pub fn sample(&self) -> anyhow::Result<Sample> {
        let pid = self.child.id();
        let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .with_context(|| format!("reading /proc/{pid}/io"))?;
        let read_bytes = io
            .lines()
            .find_map(|l| l.strip_prefix("read_bytes:"))
            .context("no read_bytes in /proc/<pid>/io")?
            .trim()
            .parse()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        Ok(Sample {
            read_bytes,
            cpu_s: cpu_ticks(&stat)? as f64 / self.ticks_per_s,
        })
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().to_string();
        // `kill` rather than libc: this crate has no unsafe code.
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        if !matches!(sent, Ok(s) if s.success()) {
            self.child.kill()?;
        }
        let start = Instant::now();
        while start.elapsed() < STOP_TIMEOUT {
            if let Some(status) = self.child.try_wait()? {
                // `spindle serve` installs its SIGTERM handler when its shutdown future is
                // first polled, which can come after it printed its ports: a node stopped
                // at once (a tiny data set) may then die by the signal itself. The bench
                // needs nothing from a node after stopping it, so that counts as stopped.
                use std::os::unix::process::ExitStatusExt;
                let by_sigterm = status.signal() == Some(libc::SIGTERM);
                anyhow::ensure!(
                    status.success() || by_sigterm,
                    "spindle serve exited with {status}"
                );
                return Ok(());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        bail!("spindle serve did not stop within {STOP_TIMEOUT:?} of SIGTERM")
    }
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `http=ADDR grpc=ADDR data=DIR` → (http, grpc).
fn parse_bound(rest: &str) -> Option<(String, String)> {
    let field = |name: &str| {
        rest.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .map(str::to_owned)
    };
    Some((field("http=")?, field("grpc=")?))
}

/// User plus system CPU seconds of process `pid` so far (all its threads, exited ones
/// included), from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    Ok(cpu_ticks(&stat)? as f64 / clock_ticks_per_second()?)
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks. The
/// command name (field 2) may hold spaces and parentheses, so fields count from its `)`.
fn cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let after = &stat[stat.rfind(')').context("no ')' in /proc/<pid>/stat")? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state).
    let field = |n: usize| -> anyhow::Result<u64> {
        Ok(fields
            .get(n - 3)
            .context("/proc/<pid>/stat is too short")?
            .parse()?)
    };
    Ok(field(14)? + field(15)?)
}

/// The unit of `/proc/<pid>/stat` times (`sysconf(_SC_CLK_TCK)`), read safely from the
/// auxiliary vector the kernel gave this process (`AT_CLKTCK`), where libc reads it too.
fn clock_ticks_per_second() -> anyhow::Result<f64> {
    const AT_CLKTCK: u64 = 17;
    let auxv = std::fs::read("/proc/self/auxv").context("reading /proc/self/auxv")?;
    let word = std::mem::size_of::<usize>();
    let get = |b: &[u8]| -> u64 {
        let mut w = [0u8; 8];
        if cfg!(target_endian = "little") {
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        } else {
            w[8 - b.len()..].copy_from_slice(b);
            u64::from_be_bytes(w)
        }
    };
    auxv.chunks_exact(2 * word)
        .find(|pair| get(&pair[..word]) == AT_CLKTCK)
        .map(|pair| get(&pair[word..]) as f64)
        .filter(|&t| t > 0.0)
        .context("no AT_CLKTCK in /proc/self/auxv")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_around_odd_command_names() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 1 2 3";
        assert_eq!(cpu_ticks(stat).unwrap(), 325);
        assert!(cpu_ticks("42 (x) S 1").is_err());
    }

    #[test]
    fn this_process_has_a_clock_tick() {
        let t = clock_ticks_per_second().unwrap();
        assert!((1.0..=10_000.0).contains(&t), "{t}");
    }

    #[test]
    fn bound_addresses_are_read_from_the_line() {
        let got = parse_bound("http=127.0.0.1:1 grpc=127.0.0.1:2 data=/d x");
        assert_eq!(got, Some(("127.0.0.1:1".into(), "127.0.0.1:2".into())));
        assert_eq!(parse_bound("http=127.0.0.1:1"), None);
    }
}
