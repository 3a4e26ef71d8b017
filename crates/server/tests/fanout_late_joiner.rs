//! The log-tail fan-out: every follower of the ring, also one that joins late (after records
//! were published before it joined), applies exactly the log — it equals a view that
//! replayed the log from the start (invariant 4).

use std::sync::Arc;

use spindle_core::{Index, ItemKey, Partition, Transaction, Value};
use spindle_log::{FileLog, LogConfig, SyncMode};
use spindle_server::fanout;
use spindle_server::node_log::NodeLog;
use spindle_view::MemoryView;

fn txn(round: u64, t: u64) -> Transaction {
    let key = ItemKey::node(format!("n{}", (round * 7 + t) % 40)).unwrap();
    let value = if t.is_multiple_of(9) {
        Value::TOMBSTONE
    } else {
        Value::json(format!("{{\"r\":{round},\"t\":{t}}}")).unwrap()
    };
    Transaction::single(key, value)
}

#[test]
fn late_and_early_followers_equal_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 16 << 10,
        sync: SyncMode::Off,
        ..LogConfig::default()
    };
    let log = NodeLog::File(Arc::new(FileLog::open(dir.path(), config).unwrap()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let append = |round: u64| {
        let txns: Vec<_> = (0..50).map(|t| txn(round, t)).collect();
        for r in rt.block_on(log.append_many(&txns)) {
            r.unwrap();
        }
    };
    append(0);
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let health = Arc::new(fanout::TailerHealth::default());
    let (ring, tailer) = fanout::start(log.clone(), Index::FIRST, stop_rx, health).unwrap();
    let early = Arc::new(MemoryView::new(Partition::ALL));
    let late = Arc::new(MemoryView::new(Partition::ALL));
    let spawn = |view: Arc<MemoryView>, name: &'static str| {
        let (log, ring) = (log.clone(), ring.clone());
        std::thread::spawn(move || fanout::follow(name, &*view, &log, &ring, &|_| {}))
    };
    let early_thread = spawn(early.clone(), "early");
    for round in 1..10 {
        append(round);
    }
    // The late follower joins after batches were published without it.
    while ring.cursor() == 0 {
        std::thread::yield_now();
    }
    let late_thread = spawn(late.clone(), "late");
    for round in 10..20 {
        append(round);
    }
    let durable = log.durable_index();
    while early.applied_index() < durable || late.applied_index() < durable {
        std::thread::yield_now();
    }
    stop.send_replace(true);
    tailer.join().unwrap().unwrap();
    early_thread.join().unwrap().unwrap();
    late_thread.join().unwrap().unwrap();
    let replay = MemoryView::new(Partition::ALL);
    let mut next = Index::FIRST;
    while next <= durable {
        let records = log.read(next, 100).unwrap();
        next = records.last().unwrap().index.next();
        replay.apply(&records).unwrap();
    }
    assert_eq!(early.snapshot(), replay.snapshot());
    assert_eq!(late.snapshot(), replay.snapshot());
}
