//! The feed (docs/cluster.md "The feed") is only a cache in front of the stream: readers
//! that take records from it, readers whose cache is too small to hold a batch, a reader
//! that opens midway (its cache starts after its first read), and a reader with the feed
//! off all read exactly the same records, while garbage, damaged pieces and well-formed
//! pieces of another stream are published on the feed subject. Batches of over 1 MiB go
//! out in several pieces. Readers at the head take their records from the feed, and the
//! pieces move their durable index (not only the stream poll every 500 ms).

#![cfg(feature = "jetstream")]

mod common;
mod nats_cluster;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use spindle_core::{Index, Record, Transaction, Value};
use spindle_log::jetstream::JetStreamLog;
use spindle_log::{Log, Tail};

const CLIENTS: u64 = 4;
const TXNS_PER_CLIENT: u64 = 60;

fn txn(client: u64, i: u64) -> Transaction {
    let n = 1 + (client * 5 + i * 3) % 7;
    // Now and then a transaction of over 1 MiB: its batch goes out in several pieces.
    let big = client == 0 && i % 20 == 10;
    let mut t = Transaction::new();
    for j in 0..n {
        if big {
            let v = format!(
                "{{\"c\":0,\"i\":{i},\"j\":{j},\"big\":\"{}\"}}",
                "b".repeat(400_000)
            );
            t = t.write(node(&format!("big-{j}")), Value::json(v).unwrap());
            continue;
        }
        let v = format!(
            "{{\"c\":{client},\"i\":{i},\"j\":{j},\"pad\":\"{}\"}}",
            "x".repeat((i % 13) as usize * 20)
        );
        t = t.write(
            node(&format!("c{client}-{}", (i + j) % 6)),
            Value::json(v).unwrap(),
        );
    }
    t
}

/// Every record from index 1 through `last`, through a tail of `reader`.
fn read_all(reader: Arc<JetStreamLog>, last: u64) -> Vec<Record> {
    let mut tail = Tail::new(reader, Index::FIRST, 7);
    let mut out: Vec<Record> = Vec::new();
    while (out.len() as u64) < last {
        let batch = futures::executor::block_on(tail.next_batch()).unwrap();
        assert!(
            batch.last().is_some_and(|r| r.commit),
            "a batch ends mid-transaction"
        );
        out.extend(batch);
    }
    out
}

#[test]
fn readers_of_the_feed_read_what_the_stream_holds() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("FEED");
    let log = JetStreamLog::open(config.clone()).unwrap();
    let open = |bytes_max: usize| {
        let mut c = config.clone();
        c.feed_cache_bytes_max = bytes_max;
        Arc::new(JetStreamLog::open_reader(c).unwrap())
    };
    let with_feed = open(64 << 20);
    let tiny_feed = open(300);
    let no_feed = open(0);
    let total: u64 = (0..CLIENTS)
        .flat_map(|c| (0..TXNS_PER_CLIENT).map(move |i| txn(c, i).writes.len() as u64))
        .sum();

    // Someone else publishes junk on the feed subject the whole time.
    let done = Arc::new(AtomicBool::new(false));
    let noise = {
        let client = log.client();
        let done = done.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        std::thread::spawn(move || {
            rt.block_on(async {
                let mut damaged = b"SPF1".to_vec();
                damaged.extend_from_slice(&1u64.to_le_bytes());
                damaged.extend_from_slice(&1u64.to_le_bytes());
                damaged.extend_from_slice(&1u32.to_le_bytes());
                damaged.extend_from_slice(&3u32.to_le_bytes());
                damaged.extend_from_slice(b"abc");
                damaged.extend_from_slice(&0u32.to_le_bytes()); // wrong CRC
                                                                // Well formed, but of another stream: records that would replace 1..=2.
                let mut alien = b"SPF1".to_vec();
                alien.extend_from_slice(&12345u64.to_le_bytes());
                alien.extend_from_slice(&1u64.to_le_bytes());
                alien.extend_from_slice(&2u64.to_le_bytes());
                alien.extend_from_slice(&2u32.to_le_bytes());
                for _ in 0..2 {
                    let mut payload = Vec::new();
                    let key = node("alien");
                    let value = Value::json("{\"alien\":true}").unwrap();
                    spindle_core::record::encode_payload(true, &key, &value, &mut payload);
                    alien.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    alien.extend_from_slice(&payload);
                }
                let crc = crc32c::crc32c(&alien);
                alien.extend_from_slice(&crc.to_le_bytes());
                while !done.load(Ordering::Acquire) {
                    let mut sent = true;
                    for junk in [b"garbage".to_vec(), damaged.clone(), alien.clone()] {
                        sent &= client.publish("spn.FEED.feed", junk.into()).await.is_ok();
                    }
                    if !sent {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
                }
            })
        })
    };

    let (late, late_records) = std::thread::scope(|s| {
        let readers: Vec<_> = [&with_feed, &tiny_feed, &no_feed]
            .into_iter()
            .map(|r| {
                let r = r.clone();
                s.spawn(move || read_all(r, total))
            })
            .collect();
        let writers: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let log = &log;
                s.spawn(move || {
                    for i in 0..TXNS_PER_CLIENT {
                        log.append_blocking(&txn(c, i)).unwrap();
                        if i % 10 == 9 {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                    }
                })
            })
            .collect();
        // A reader opened midway starts from index 1: the stream first, then the feed.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let late = open(64 << 20);
        let late_reader = {
            let late = late.clone();
            s.spawn(move || read_all(late, total))
        };
        for w in writers {
            w.join().unwrap();
        }
        let mut got: Vec<Vec<Record>> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        let late_records = late_reader.join().unwrap();
        for (name, records) in ["feed", "tiny feed"].iter().zip(&got[..2]) {
            assert_eq!(records.len(), got[2].len(), "{name}: record count");
            for (a, b) in records.iter().zip(&got[2]) {
                assert_eq!(a, b, "{name}: a record differs from the stream's");
            }
        }
        (late, (late_records, got.pop().unwrap()))
    });
    done.store(true, Ordering::Release);
    noise.join().unwrap();
    let (late_records, stream_records) = late_records;
    assert_eq!(
        late_records, stream_records,
        "the late reader read other records"
    );
    assert_eq!(stream_records.len() as u64, total);
    for (i, r) in stream_records.iter().enumerate() {
        assert_eq!(r.index, Index::new(i as u64 + 1));
    }

    let (fed, fetched) = with_feed.read_sources();
    assert_eq!(fed + fetched, total);
    assert!(
        fed > total / 2,
        "a reader at the head took {fed} of {total} records from the feed"
    );
    let (tiny_fed, tiny_fetched) = tiny_feed.read_sources();
    assert_eq!(tiny_fed + tiny_fetched, total);
    assert!(tiny_fetched > 0, "a 300-byte cache cannot hold every batch");
    assert_eq!(no_feed.read_sources(), (0, total));
    let (late_fed, late_fetched) = late.read_sources();
    assert_eq!(late_fed + late_fetched, total);
    assert!(
        late_fetched > 0,
        "the late reader read its start from the stream"
    );
    assert_eq!(with_feed.durable_index().get(), total);
    assert_eq!(no_feed.durable_index().get(), total);
}

/// The group commit's linger only holds a batch back while it is smaller than the previous
/// one: a lone writer (each batch one transaction) never waits for it, even when it is long.
#[test]
fn a_lone_writer_never_waits_for_the_linger() {
    let cluster = nats_cluster::Cluster::start(3);
    let mut config = cluster.config("LINGER");
    config.group_commit_linger = std::time::Duration::from_millis(500);
    let log = JetStreamLog::open(config).unwrap();
    // Three-record transactions and one-record ones in turn: if the linger compared
    // records instead of transactions, each one-record append would wait the full 500 ms.
    let start = std::time::Instant::now();
    for i in 0..20 {
        let mut t = Transaction::new();
        for j in 0..(1 + 2 * (i % 2)) {
            t = t.write(node(&format!("lone-{i}-{j}")), Value::json("{}").unwrap());
        }
        log.append_blocking(&t).unwrap();
    }
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(4),
        "20 appends of a lone writer took {took:?}: they waited for the linger"
    );
}

/// A reader's durable index follows the announced batches: after each append, a reader in
/// another handle sees it at once, not at the stream poll (every 500 ms).
#[test]
fn announced_batches_move_a_readers_durable_index() {
    let cluster = nats_cluster::Cluster::start(3);
    let config = cluster.config("DURABLE");
    let log = JetStreamLog::open(config.clone()).unwrap();
    let reader = JetStreamLog::open_reader(config).unwrap();
    let first = log.append_blocking(&txn(1, 0)).unwrap();
    futures::executor::block_on(reader.wait_for(first)).unwrap();
    let mut waits = Vec::new();
    for i in 1..=20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let index = log.append_blocking(&txn(1, i)).unwrap();
        let appended = std::time::Instant::now();
        futures::executor::block_on(reader.wait_for(index)).unwrap();
        waits.push(appended.elapsed());
    }
    waits.sort();
    let median = waits[waits.len() / 2];
    assert!(
        median < std::time::Duration::from_millis(150),
        "the reader's durable index lagged the appends by {median:?} (median of {waits:?})"
    );
}

/// A read that finds no server answering direct gets (status 503, no responders: as right
/// after the stream is created, before a replica's direct-get subscription is up) asks
/// again until one answers, instead of failing. Direct gets are turned off on the stream to
/// make the 503 happen, and on again while the read waits.
#[test]
fn a_read_waits_while_no_server_answers_direct_gets() {
    use async_nats::jetstream::stream::Config;
    let cluster = nats_cluster::Cluster::start(1);
    let mut config = cluster.config("UNANSWERED");
    config.feed_cache_bytes_max = 0;
    let log = JetStreamLog::open(config.clone()).unwrap();
    let mut last = Index::ZERO;
    for i in 0..5 {
        last = log.append_blocking(&txn(2, i)).unwrap();
    }
    let reader = Arc::new(JetStreamLog::open_reader(config.clone()).unwrap());
    futures::executor::block_on(reader.wait_for(last)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let set_direct = |on: bool| {
        rt.block_on(async {
            let client = async_nats::connect(config.servers[0].as_str())
                .await
                .unwrap();
            let js = async_nats::jetstream::new(client);
            let stream = js.get_stream(&config.stream).await.unwrap();
            js.update_stream(Config {
                allow_direct: on,
                ..stream.cached_info().config.clone()
            })
            .await
            .unwrap();
        })
    };
    set_direct(false);
    let read = {
        let reader = reader.clone();
        std::thread::spawn(move || futures::executor::block_on(reader.read(Index::FIRST, 1000)))
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(
        !read.is_finished(),
        "the read ended while no server answered"
    );
    set_direct(true);
    let records = read.join().unwrap().expect("the read failed");
    assert_eq!(records.len() as u64, last.get());
    assert_eq!(records.last().map(|r| r.index), Some(last));
}
