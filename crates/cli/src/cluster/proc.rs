//! Member processes: started detached (a session of their own via setsid(1), inside their
//! network namespace via `ip netns exec`, stdout and stderr appended to their log file),
//! found again later by pid *and* start time (a pid can be reused), signalled with sh's kill.
//! Both wrappers exec in place, so the recorded pid is the member's own.

use std::fs::OpenOptions;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::state::Member;

/// How often a wait looks at /proc again.
const POLL_MS: u64 = 50;
/// How much of a log's end `log_tail` reads.
const LOG_TAIL_BYTES_MAX: u64 = 16 << 10;

/// Start `m` detached with `env` added; returns its pid and start time.
pub fn spawn(m: &Member, env: &[(&str, &str)]) -> anyhow::Result<(u32, u64)> {
    if let Some(parent) = m.log.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&m.log)
        .with_context(|| format!("opening {}", m.log.display()))?;
    let mut cmd = Command::new("setsid");
    if let Some(ns) = &m.netns {
        cmd.args(["ip", "netns", "exec", ns]);
    }
    cmd.arg(&m.program)
        .args(&m.args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {} (setsid {})", m.name, m.program.display()))?;
    let pid = child.id();
    // Not waited for: the member outlives this command. Its start time is read now, while
    // it cannot have been reaped (it is our child until we exit).
    let ticks = start_ticks(pid).with_context(|| format!("{} (pid {pid}) vanished", m.name))?;
    Ok((pid, ticks))
}

/// The process's state letter and start time from /proc/<pid>/stat.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ticks = fields.get(19)?.parse().ok()?; // field 22: starttime
    Some((state, ticks))
}

fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, t)| t)
}

/// Whether the member's recorded process runs (a zombie does not).
pub fn alive(m: &Member) -> bool {
    match (m.pid, m.start_ticks) {
        (Some(pid), Some(ticks)) => is_alive(pid, ticks),
        _ => false,
    }
}

pub fn is_alive(pid: u32, ticks: u64) -> bool {
    matches!(stat(pid), Some((state, t)) if t == ticks && state != 'Z' && state != 'X')
}

/// Send `signal` (a name for kill: TERM, KILL) to the member if it runs; whether it did.
pub fn signal(m: &Member, signal: &str) -> anyhow::Result<bool> {
    let Some(pid) = m.pid.filter(|_| alive(m)) else {
        return Ok(false);
    };
    // The shell's builtin kill: every machine has sh, not every one has procps' kill(1).
    let status = Command::new("sh")
        .args(["-c", "kill -s \"$0\" \"$1\"", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running sh -c kill")?;
    // It may have exited between the check and the signal.
    Ok(status.success() || !alive(m))
}

/// Wait until none of `members` runs, at most `wait`; returns the names still running.
pub fn wait_gone(members: &[&Member], wait: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let running: Vec<String> = members
            .iter()
            .filter(|m| alive(m))
            .map(|m| m.name.clone())
            .collect();
        if running.is_empty() || started.elapsed() >= wait {
            return running;
        }
        std::thread::sleep(Duration::from_millis(POLL_MS));
    }
}

/// The last `lines` lines of a log file ("(empty)" or the error if there is none).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let read = || -> std::io::Result<String> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES_MAX)))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) if text.trim().is_empty() => "(empty)".to_owned(),
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = std::process::id();
        let (state, ticks) = stat(me).unwrap();
        assert_ne!(state, 'Z');
        assert!(is_alive(me, ticks));
        assert!(!is_alive(me, ticks + 1));
        assert!(stat(u32::MAX).is_none());
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.log");
        std::fs::write(&p, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&p, 2), "c\nd");
        assert!(log_tail(&dir.path().join("none"), 2).contains("cannot read"));
    }
}
