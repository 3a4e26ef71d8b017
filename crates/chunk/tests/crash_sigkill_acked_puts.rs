//! Every put acknowledged before a SIGKILL is readable, with its exact bytes, after reopen;
//! this holds over several kill-and-reopen rounds on the same store.
//!
//! The test re-executes its own binary as the child (selected by an environment variable).
//! The child puts chunks from several threads and prints each acknowledged id; the parent
//! kills it with SIGKILL once it has seen enough acknowledgements, mid-write.

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use spindle_chunk::{ChunkId, ChunkStore, Options};

const CHILD_DIR_ENV: &str = "SPINDLE_CHUNK_CRASH_CHILD_DIR";
const CHILD_ROUND_ENV: &str = "SPINDLE_CHUNK_CRASH_CHILD_ROUND";
const TEST_NAME: &str = "acknowledged_puts_survive_sigkill";
const ACKS_BEFORE_KILL: usize = 150;
const ROUNDS: u64 = 3;

fn opts() -> Options {
    Options {
        volume_bytes_max: 256 << 10,
        write_buffer_bytes_max: 256 << 10,
        chunk_bytes_max: 64 << 10,
        ..Options::default()
    }
}

#[test]
fn acknowledged_puts_survive_sigkill() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        let round: u64 = std::env::var(CHILD_ROUND_ENV).unwrap().parse().unwrap();
        child(&dir, round);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acked: HashSet<ChunkId> = HashSet::new();
    for round in 0..ROUNDS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .env(CHILD_ROUND_ENV, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut this_round = 0;
        for line in lines.by_ref() {
            if let Some(hex) = line.unwrap().strip_prefix("ACK ") {
                acked.insert(hex.parse().unwrap());
                this_round += 1;
                if this_round == ACKS_BEFORE_KILL {
                    break;
                }
            }
        }
        assert_eq!(this_round, ACKS_BEFORE_KILL, "child stopped early");
        child.kill().unwrap(); // SIGKILL on Unix
                               // Acknowledgements printed before the kill landed are acknowledged too.
        for line in lines {
            if let Some(hex) = line.unwrap().strip_prefix("ACK ") {
                acked.insert(hex.parse().unwrap());
            }
        }
        child.wait().unwrap();

        let store = ChunkStore::open(dir.path(), opts()).unwrap();
        for id in &acked {
            let data = store
                .get(id)
                .unwrap()
                .unwrap_or_else(|| panic!("acked {id} lost"));
            assert_eq!(ChunkId::of(&data), *id);
        }
        assert_eq!(store.used_bytes(), common::disk_bytes(dir.path()));
        eprintln!(
            "round {round}: {} acked so far, open {:?}",
            acked.len(),
            store.open_report()
        );
        store.close().unwrap();
    }
    let report = spindle_chunk::verify_store(dir.path()).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

/// Put chunks from four threads until killed, printing each acknowledged id.
fn child(dir: &str, round: u64) -> ! {
    let store = ChunkStore::open(dir, opts()).unwrap();
    let next = AtomicU64::new(round << 40);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                let len = 1024 + (seed % 61) as usize * 1000;
                let id = store.put(&common::chunk(seed, len)).unwrap();
                let mut out = std::io::stdout().lock();
                writeln!(out, "ACK {id}").unwrap();
                out.flush().unwrap();
            });
        }
    });
    unreachable!("the parent kills the child")
}
