//! A `spindle` process started with a low soft limit on open files raises it to the hard
//! limit (a large store needs many descriptors: table files, chunk volumes, connections).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// (soft, hard) of "Max open files" in /proc/PID/limits; `u64::MAX` for unlimited.
fn open_files_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .take(2)
        .map(|v| v.parse().unwrap_or(u64::MAX))
        .collect();
    (fields[0], fields[1])
}

#[test]
fn serve_raises_a_low_soft_limit_to_the_hard_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -Sn 256 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_spindle"))
        .args([
            "serve",
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // The first line says where it listens: it is up.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let (soft, hard) = open_files_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("http="), "serve did not start: {line:?}");
    assert!(
        hard > 256,
        "the hard limit here is {hard}: nothing to raise"
    );
    assert_eq!(soft, hard.min(1 << 20), "soft limit {soft}, hard {hard}");
}
