//! SIGKILL of one NATS server (the stream's leader) under load: appends go on through the
//! failover, every acknowledged transaction is in the log afterwards at its commit index
//! with exactly its records, and no transaction is partial. The killed server restarts and
//! the log reads the same.
//!
//! Rounds: `SPINDLE_JETSTREAM_KILLS` (default 2) kill-and-restart rounds. Even rounds kill
//! the server the appender is connected to, leading the stream as the appender places it (a
//! reconnect and an election at once); odd rounds first move the leader to another server,
//! so the appender's connection survives the kill (an election only).

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Mutex;

use common::*;
use spindle_core::{Index, Transaction, Value};
use spindle_log::jetstream::placement::lead_from_connected_server;
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

/// Move the stream's leader to the server the appender is connected to (`away` false) or
/// to another one (`away` true); the server that leads.
fn place_leader(cluster: &nats_cluster::Cluster, log: &JetStreamLog, away: bool) -> usize {
    let appender_on = log.client().server_info().server_name;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut refused = Vec::new();
    for (i, node) in cluster.nodes.iter().enumerate() {
        if (node.name == appender_on) == away {
            continue;
        }
        let placed = rt.block_on(async {
            let client = async_nats::connect(cluster.servers()[i].clone())
                .await
                .unwrap();
            let js = async_nats::jetstream::new(client.clone());
            let wait = std::time::Duration::from_secs(30);
            lead_from_connected_server(&client, &js, "KILL", wait).await
        });
        match placed {
            Ok(_) => return i,
            // The server killed last round may still be catching up: try the next.
            Err(e) => refused.push(format!("{}: {e}", node.name)),
        }
    }
    panic!("no server took the lead: {refused:?}");
}

#[test]
fn acknowledged_transactions_survive_a_server_kill() {
    let mut cluster = nats_cluster::Cluster::start(3);
    let log = JetStreamLog::open(cluster.config("KILL")).unwrap();
    let rounds: u64 = std::env::var("SPINDLE_JETSTREAM_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let acked: Mutex<HashMap<Index, Transaction>> = Mutex::new(HashMap::new());
    let mut unknown = 0;
    for round in 0..rounds {
        // Even rounds: the leader is the appender's own server (where the appender puts
        // it when it opens, placed again after an earlier round's kill moved it).
        let away = round % 2 == 1;
        let victim = place_leader(&cluster, &log, away);
        let appender_on = log.client().server_info().server_name;
        assert_eq!(cluster.nodes[victim].name != appender_on, away);
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
