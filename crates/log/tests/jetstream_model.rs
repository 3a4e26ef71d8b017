//! Model test: the same random transactions with conditions, prefix truncations and
//! reopens run on the file log and on the JetStream log (a real 3-node cluster); every
//! outcome (commit index, or the exact failed conditions) and every read is equal,
//! including conditions on items whose last write was truncated away.
//!
//! Cases: `SPINDLE_JETSTREAM_CASES` (default 4), each with its own stream.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spindle_core::{Index, ItemKey, Transaction, Value};
use spindle_log::jetstream::{JetStreamConfig, JetStreamLog};
use spindle_log::{FileLog, Log};

fn key(k: u8) -> ItemKey {
    if k % 3 == 2 {
        ItemKey::edge(format!("n{}", k % 4), "rel", format!("n{k}")).unwrap()
    } else {
        ItemKey::node(format!("n{k}")).unwrap()
    }
}

fn random_txn(rng: &mut StdRng, file: &FileLog) -> Transaction {
    let mut txn = Transaction::new();
    for _ in 0..rng.random_range(1..5) {
        let value = if rng.random_bool(0.15) {
            Value::TOMBSTONE
        } else {
            obj(rng.random_range(0..1000))
        };
        txn = txn.write(key(rng.random_range(0..8)), value);
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..rng.random_range(0..3) {
        let k: u8 = rng.random_range(0..8);
        if !seen.insert(k) {
            continue;
        }
        let expected = match rng.random_range(0..3) {
            0 => Index::ZERO,
            // The item's current version, as a reader of the file log would find it.
            1 => current_version(file, &key(k)),
            _ => Index::new(rng.random_range(1..60)),
        };
        txn = txn.condition(key(k), expected);
    }
    txn
}

/// The version a client would read: the last record of the item, truncated or not, is
/// unknown to a reader of the retained log, so fall back to a guess that may be stale.
fn current_version(file: &FileLog, k: &ItemKey) -> Index {
    file.read(file.first_index(), usize::MAX)
        .unwrap()
        .iter()
        .rev()
        .find(|r| &r.key == k)
        .map_or(Index::ZERO, |r| r.index)
}

fn check_reads(rng: &mut StdRng, file: &FileLog, js: &JetStreamLog) {
    assert_eq!(js.durable_index(), file.durable_index());
    let first = js.first_index().max(file.first_index());
    let all_file = file.read(first, usize::MAX).unwrap();
    let all_js = futures::executor::block_on(js.read(first, usize::MAX)).unwrap();
    assert_eq!(all_js, all_file, "whole reads from {first}");
    for _ in 0..3 {
        let last = file.durable_index().get().max(first.get());
        let from = Index::new(rng.random_range(first.get()..=last));
        let max = rng.random_range(1..8);
        let f = file.read(from, max).unwrap();
        let j = futures::executor::block_on(js.read(from, max)).unwrap();
        assert_eq!(j, f, "read({from}, {max})");
    }
}

fn open_js(config: &JetStreamConfig) -> JetStreamLog {
    JetStreamLog::open(config.clone()).unwrap()
}

#[derive(Debug, Default)]
struct Stats {
    committed: u64,
    conflicts: u64,
    truncated: u64,
}

fn run_case(cluster: &nats_cluster::Cluster, case: u64, stats: &mut Stats) {
    let seed = 0x5eed_0000 + case;
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut file = open(dir.path(), small_segments());
    let config = cluster.config(&format!("MODEL{case}"));
    let mut js = open_js(&config);
    let steps = rng.random_range(40..90);
    for step in 0..steps {
        let roll = rng.random_range(0..20);
        if roll < 17 {
            let txn = random_txn(&mut rng, &file);
            let f = file.append_blocking(&txn);
            let j = js.append_blocking(&txn);
            assert_eq!(j, f, "seed {seed} step {step}: {txn:?}");
            match j {
                Ok(_) => stats.committed += 1,
                Err(_) => stats.conflicts += 1,
            }
        } else if roll < 19 {
            let durable = file.durable_index().get();
            let below = Index::new(durable * rng.random_range(0..=100u64) / 100 + 1);
            let before = js.first_index();
            let ff = futures::executor::block_on(file.truncate_prefix(below)).unwrap();
            let jf = futures::executor::block_on(js.truncate_prefix(below)).unwrap();
            // JetStream purges exactly; the file log deletes whole segments only.
            assert_eq!(jf, below.max(before));
            stats.truncated = stats.truncated.max(jf.get());
            assert!(
                ff <= jf.max(Index::FIRST),
                "file first {ff}, jetstream first {jf}"
            );
            check_reads(&mut rng, &file, &js);
        } else {
            futures::executor::block_on(js.close());
            drop(js);
            file.close();
            drop(file);
            file = open(dir.path(), small_segments());
            js = open_js(&config);
            check_reads(&mut rng, &file, &js);
        }
    }
    check_reads(&mut rng, &file, &js);
    futures::executor::block_on(js.close());
}

#[test]
fn jetstream_log_matches_the_file_log() {
    let cluster = nats_cluster::Cluster::start(3);
    let cases: u64 = std::env::var("SPINDLE_JETSTREAM_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let mut stats = Stats::default();
    for case in 0..cases {
        run_case(&cluster, case, &mut stats);
    }
    eprintln!("{stats:?}");
    // The cases exercised what they are about.
    assert!(
        stats.committed > 0 && stats.conflicts > 0 && stats.truncated > 1,
        "{stats:?}"
    );
}
