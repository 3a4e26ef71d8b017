//! Crash safety (invariants 1–3): a child process appending under load is killed with
//! SIGKILL; after reopen every acknowledged transaction is present byte for byte, no
//! transaction is partly visible, and appends continue at the next index.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::*;
use spindle_core::{Index, Transaction, Value};
use spindle_log::{FileLog, LogConfig};

const DIR_ENV: &str = "SPINDLE_CRASH_TEST_DIR";

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 256 << 10,
        ..LogConfig::default()
    }
}

fn value(task: u64, seq: u64, i: u64, n: u64) -> Value {
    Value::json(format!(
        "{{\"task\":{task},\"seq\":{seq},\"i\":{i},\"n\":{n},\"pad\":\"{}\"}}",
        "p".repeat((seq % 7) as usize * 10)
    ))
    .unwrap()
}

fn txn(task: u64, seq: u64) -> Transaction {
    let n = 1 + (task + seq) % 3;
    let mut t = Transaction::new();
    for i in 0..n {
        t = t.write(
            node(&format!("t{task}/k{}", (seq + i) % 5)),
            value(task, seq, i, n),
        );
    }
    t
}

/// The child: append from 32 concurrent tasks forever, printing each acknowledgement. Run
/// only by `acknowledged_appends_survive_sigkill`, as a separate process.
#[test]
#[ignore = "the child process of acknowledged_appends_survive_sigkill"]
fn crash_child() {
    let dir = std::env::var(DIR_ENV).expect("run by acknowledged_appends_survive_sigkill");
    let log = FileLog::open(dir, config()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for task in 0..32u64 {
            let log = log.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                for seq in 0.. {
                    let commit = log.append(&txn(task, seq)).await.unwrap();
                    tx.send((commit, task, seq)).unwrap();
                }
            });
        }
        let mut out = std::io::stdout().lock();
        while let Some((commit, task, seq)) = rx.recv().await {
            writeln!(out, "ACK {} {task} {seq}", commit.get()).unwrap();
            out.flush().unwrap();
        }
    });
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut acked = Vec::new();
        // Two lives per round: the second appends on top of the first's recovered log.
        for life in 0..2u64 {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "crash_child",
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(DIR_ENV, dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = BufReader::new(child.stdout.take().unwrap());
            let target = 500 + round * 700 + life * 300;
            let mut lines = stdout.lines();
            let mut seen = 0;
            while seen < target {
                let line = lines.next().expect("child exited early").unwrap();
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                    acked.push((f[0], f[1], f[2]));
                    seen += 1;
                }
            }
            child.kill().unwrap(); // SIGKILL
                                   // Acks already written to the pipe before the kill also count.
            for line in lines {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix("ACK ") {
                    let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                    acked.push((f[0], f[1], f[2]));
                }
            }
            child.wait().unwrap();
            verify(dir.path(), &acked);
        }
    }
}

fn verify(dir: &std::path::Path, acked: &[(u64, u64, u64)]) {
    let log = open(dir, config());
    let durable = log.durable_index().get();
    let records = log.read(Index::FIRST, usize::MAX).unwrap();
    assert_eq!(records.len() as u64, durable, "indexes are dense from 1");
    // Every transaction in the log is whole: records i = 0..n-1, commit only on the last.
    let mut i = 0;
    while i < records.len() {
        let v: serde_json::Value =
            serde_json::from_str(records[i].value.as_json().unwrap()).unwrap();
        if records[i].key == node("after-crash") {
            assert!(records[i].commit);
            i += 1;
            continue;
        }
        let (task, seq, n) = (
            v["task"].as_u64().unwrap(),
            v["seq"].as_u64().unwrap(),
            v["n"].as_u64().unwrap(),
        );
        let want = txn(task, seq);
        assert!(
            i + n as usize <= records.len(),
            "partial transaction at the end"
        );
        for (j, w) in want.writes.iter().enumerate() {
            let r = &records[i + j];
            assert_eq!(
                (&r.key, &r.value),
                (&w.key, &w.value),
                "record {} differs",
                r.index
            );
            assert_eq!(r.commit, j + 1 == n as usize);
        }
        i += n as usize;
    }
    for &(commit, task, seq) in acked {
        assert!(
            commit <= durable,
            "acknowledged commit {commit} lost (durable {durable})"
        );
        let want = txn(task, seq);
        let first = commit as usize - want.writes.len();
        for (j, w) in want.writes.iter().enumerate() {
            assert_eq!(
                records[first + j].value,
                w.value,
                "acknowledged record differs"
            );
        }
    }
    let next = log.append_blocking(&put("after-crash", 0)).unwrap();
    assert_eq!(
        next.get(),
        durable + 1,
        "appends continue at the next index"
    );
}
