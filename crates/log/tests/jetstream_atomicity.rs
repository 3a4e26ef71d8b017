//! No reader of the JetStream log sees part of a transaction: while several clients append
//! multi-record transactions (group-committed into shared batches), a separate reader
//! handle tails the stream, and every batch it gets ends on a commit record and holds
//! whole transactions only.

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use common::*;
use spindle_core::{Index, Transaction, Value};
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Log, Tail};

const CLIENTS: u64 = 4;
const TXNS_PER_CLIENT: u64 = 40;

fn txn(client: u64, i: u64) -> Transaction {
    let n = 1 + (client * 7 + i * 3) % 9;
    let mut t = Transaction::new();
    for j in 0..n {
        let v = format!("{{\"c\":{client},\"i\":{i},\"j\":{j},\"n\":{n}}}");
        t = t.write(
            node(&format!("c{client}-{}", (i + j) % 5)),
            Value::json(v).unwrap(),
        );
    }
    t
}

fn field(r: &spindle_core::Record, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(r.value.as_json().unwrap()).unwrap();
    v[name].as_u64().unwrap()
}

#[test]
fn readers_see_whole_transactions_only() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("ATOMIC");
    let log = JetStreamLog::open(config.clone()).unwrap();
    let reader = std::sync::Arc::new(JetStreamLog::open_reader(config).unwrap());
    let total_records: u64 = (0..CLIENTS)
        .flat_map(|c| (0..TXNS_PER_CLIENT).map(move |i| txn(c, i).writes.len() as u64))
        .sum();
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let log = &log;
            s.spawn(move || {
                for i in 0..TXNS_PER_CLIENT {
                    log.append_blocking(&txn(c, i)).unwrap();
                }
            });
        }
        let mut tail = Tail::new(reader.clone(), Index::FIRST, 5);
        let mut seen = 0u64;
        let mut batches = 0u64;
        while seen < total_records {
            let batch = futures::executor::block_on(tail.next_batch()).unwrap();
            assert!(
                batch.last().is_some_and(|r| r.commit),
                "a batch ends mid-transaction"
            );
            let mut at = 0;
            while at < batch.len() {
                let n = field(&batch[at], "n") as usize;
                let txn = &batch[at..at + n];
                for (j, r) in txn.iter().enumerate() {
                    assert_eq!(field(r, "c"), field(&batch[at], "c"));
                    assert_eq!(field(r, "i"), field(&batch[at], "i"));
                    assert_eq!(
                        field(r, "j"),
                        j as u64,
                        "records of a transaction out of place"
                    );
                    assert_eq!(r.commit, j == n - 1, "commit flag only on the last record");
                }
                at += n;
            }
            seen += batch.len() as u64;
            batches += 1;
        }
        assert_eq!(seen, total_records);
        assert!(batches > 1);
    });
    assert_eq!(log.durable_index().get(), total_records);
    assert_eq!(reader.durable_index().get(), total_records);
}
