//! SIGKILL of one NATS server (the stream's leader) under load: appends go on through the
//! failover, every acknowledged transaction is in the log afterwards at its commit index
//! with exactly its records, and no transaction is partial. The killed server restarts and
//! the log reads the same.
//!
//! Rounds: `SPINDLE_JETSTREAM_KILLS` (default 1) kill-and-restart rounds.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Mutex;

use common::*;
use spindle_core::{Index, Transaction, Value};
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{AppendError, Log};

const CLIENTS: u64 = 4;
const TXNS_PER_ROUND: u64 = 60;

fn txn(client: u64, i: u64) -> Transaction {
    let n = 1 + (client + i) % 4;
    let mut t = Transaction::new();
    for j in 0..n {
        let v = format!("{{\"c\":{client},\"i\":{i},\"j\":{j},\"n\":{n}}}");
        t = t.write(node(&format!("c{client}-{j}")), Value::json(v).unwrap());
    }
    t
}

/// The node that leads `stream`, from a server's /jsz.
fn stream_leader(cluster: &nats_cluster::Cluster, stream: &str) -> usize {
    for node in &cluster.nodes {
        let Some(body) = nats_cluster::http_get(node.http_port, "/jsz?streams=true") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        for account in v["account_details"].as_array().into_iter().flatten() {
            for s in account["stream_detail"].as_array().into_iter().flatten() {
                if s["name"] == stream {
                    if let Some(leader) = s["cluster"]["leader"].as_str() {
                        return cluster.node_named(leader);
                    }
                }
            }
        }
    }
    0
}

#[test]
fn acknowledged_transactions_survive_a_server_kill() {
    let mut cluster = nats_cluster::Cluster::start(3);
    let log = JetStreamLog::open(cluster.config("KILL")).unwrap();
    let rounds: u64 = std::env::var("SPINDLE_JETSTREAM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let acked: Mutex<HashMap<Index, Transaction>> = Mutex::new(HashMap::new());
    let mut unknown = 0;
    for round in 0..rounds {
        let victim = stream_leader(&cluster, "KILL");
        let (tx, rx) = mpsc::channel::<()>();
        let failed = std::thread::scope(|s| {
            let mut handles = Vec::new();
            for c in 0..CLIENTS {
                let (log, acked, tx) = (&log, &acked, tx.clone());
                handles.push(s.spawn(move || {
                    let mut failed = 0;
                    for i in 0..TXNS_PER_ROUND {
                        let t = txn(c, round * TXNS_PER_ROUND + i);
                        match log.append_blocking(&t) {
                            Ok(commit) => {
                                acked.lock().unwrap().insert(commit, t);
                                let _ = tx.send(());
                            }
                            Err(AppendError::Failed { .. }) => failed += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                    failed
                }));
            }
            drop(tx);
            // Kill the leader once a quarter of the round is acknowledged.
            for _ in 0..(CLIENTS * TXNS_PER_ROUND / 4) {
                rx.recv().unwrap();
            }
            cluster.kill(victim);
            handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        });
        unknown += failed;
        cluster.restart(victim);
    }
    let acked = acked.into_inner().unwrap();
    assert_eq!(unknown, 0, "appends failed through the failover");
    assert_eq!(acked.len() as u64, rounds * CLIENTS * TXNS_PER_ROUND);
    let records = futures::executor::block_on(log.read(Index::FIRST, usize::MAX)).unwrap();
    assert_eq!(records.last().map(|r| r.index), Some(log.durable_index()));
    let by_index: HashMap<Index, &spindle_core::Record> =
        records.iter().map(|r| (r.index, r)).collect();
    for (commit, t) in &acked {
        let n = t.writes.len() as u64;
        for (j, w) in t.writes.iter().enumerate() {
            let at = Index::new(commit.get() + 1 + j as u64 - n);
            let r = by_index
                .get(&at)
                .unwrap_or_else(|| panic!("acknowledged record {at} missing"));
            assert_eq!((&r.key, &r.value), (&w.key, &w.value), "record {at}");
            assert_eq!(r.commit, j as u64 == n - 1);
        }
    }
    // Every transaction in the log is whole (it is some acknowledged one, nothing else).
    let committed: u64 = acked.values().map(|t| t.writes.len() as u64).sum();
    assert_eq!(
        records.len() as u64,
        committed,
        "records outside acknowledged transactions"
    );
    // A fresh reader after the restart reads the same.
    let reader = JetStreamLog::open_reader(cluster.config("KILL")).unwrap();
    assert_eq!(
        futures::executor::block_on(reader.read(Index::FIRST, usize::MAX)).unwrap(),
        records
    );
    futures::executor::block_on(log.close());
}
