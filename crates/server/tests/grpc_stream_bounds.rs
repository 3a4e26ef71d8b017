//! gRPC requests are bounded: `Tail` messages hold whole transactions within
//! `tail_batch_records_max` and `tail_batch_bytes_max` (a larger transaction goes alone)
//! whatever the client asks; beyond `tail_streams_max`, `iterate_streams_max` or
//! `carousel_groups_max` a request is refused with RESOURCE_EXHAUSTED naming the limit,
//! and a freed seat can be taken again.

mod common;

use std::time::{Duration, Instant};

use prost::Message as _;
use spindle_core::{ItemKey, Transaction, Value};
use spindle_server::client::{grpc_connect, iterate, tail, GrpcClient};
use spindle_server::proto::{IterateRequest, TailRequest};
use tonic::Code;

fn txn(t: usize, records: usize, pad: usize) -> Transaction {
    (0..records).fold(Transaction::new(), |txn, i| {
        let key = ItemKey::node(format!("n{t}-{i}")).unwrap();
        txn.write(
            key,
            Value::json(format!("{{\"pad\":\"{}\"}}", "p".repeat(pad))).unwrap(),
        )
    })
}

/// The status a call ends with, whether it is refused at once or as its first message.
async fn refusal<T>(call: Result<tonic::Streaming<T>, tonic::Status>) -> tonic::Status
where
    T: prost::Message + Default + Send + 'static,
{
    match call {
        Err(status) => status,
        Ok(mut stream) => match stream.message().await {
            Err(status) => status,
            Ok(m) => panic!("expected a refusal, got a message: {}", m.is_some()),
        },
    }
}

#[test]
fn tail_messages_stay_within_the_record_and_byte_limits() {
    const BYTES_MAX: usize = 64 << 10;
    const RECORDS_MAX: u32 = 50;
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.tail_batch_bytes_max = BYTES_MAX;
        c.tail_batch_records_max = RECORDS_MAX;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        // Small transactions, transactions of ~10 KiB records, and one of ~100 KiB: larger
        // than a message may be, so it must go alone.
        let mut txns: Vec<Transaction> = (0..100).map(|t| txn(t, 3, 10)).collect();
        txns.extend((100..130).map(|t| txn(t, 2, 10_000)));
        txns.push(txn(130, 10, 10_000));
        txns.extend((131..140).map(|t| txn(t, 1, 10)));
        for r in node.log.append_many(&txns).await {
            r.unwrap();
        }
        let durable = node.log.durable_index().get();
        for asked in [0, 7, u32::MAX] {
            let mut client = grpc_connect(&grpc, None).await.unwrap();
            let request = TailRequest {
                from: 1,
                batch_records_max: asked,
            };
            let mut stream = tail(&mut client, request).await.unwrap();
            let mut next = 1u64;
            let mut alone = 0;
            while next <= durable {
                let batch = stream.message().await.unwrap().expect("the tail goes on");
                let bytes = batch.encoded_len();
                let records = batch.records.len();
                assert!(records > 0);
                let last = batch.records.last().unwrap();
                assert!(last.commit, "a message ends on a commit");
                for r in &batch.records {
                    assert_eq!(r.index, next, "records are dense and in order");
                    next += 1;
                }
                let limit = match asked {
                    0 => RECORDS_MAX as usize,
                    n => (n as usize).min(RECORDS_MAX as usize),
                };
                // Whole transactions: a message past a limit holds exactly one.
                let commits = batch.records.iter().filter(|r| r.commit).count();
                if records > limit || bytes > BYTES_MAX {
                    assert_eq!(commits, 1, "{records} records, {bytes} bytes");
                    alone += 1;
                }
            }
            // The 100 KiB transaction, and (when asked for 7) each 10-record one.
            assert!(
                alone >= 1,
                "asked {asked}: the large transaction went alone"
            );
        }
    });
    server.stop();
}

#[test]
fn streams_beyond_their_limits_are_refused_and_seats_come_back() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.iter_chunk_bytes = 4096;
        c.iterate_streams_max = 3;
        c.carousel_groups_max = 1;
        c.tail_streams_max = 1;
    });
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        // ~20 MiB per full iteration: more than HTTP/2 flow-control windows and the
        // server's stream buffers hold, so an unread stream keeps its seat until dropped
        // (a smaller view can be sent whole and end on the server, freeing the seat early).
        let txns: Vec<Transaction> = (0..200).map(|t| txn(t, 50, 2000)).collect();
        let durable = server.append_and_apply(&txns).await;
        let mut client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        let all = IterateRequest {
            view: "disk-0".into(),
            ..Default::default()
        };
        // One filter group aboard: a rider with the same filter shares it.
        let mut first = iterate(&mut client, all.clone()).await.unwrap();
        assert!(first.message().await.unwrap().is_some());
        let mut same = iterate(&mut client, all.clone()).await.unwrap();
        assert!(same.message().await.unwrap().is_some());
        // Another filter would be a second group.
        let keys_only = IterateRequest {
            keys_only: true,
            ..all.clone()
        };
        let refused = refusal(iterate(&mut client, keys_only.clone()).await).await;
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("carousel_groups_max"),
            "{refused:?}"
        );
        // A dedicated iterator uses no group: the third seat (whole values, so it cannot
        // finish unread).
        let dedicated = IterateRequest {
            dedicated: true,
            ..all.clone()
        };
        let mut third = iterate(&mut client, dedicated.clone()).await.unwrap();
        assert!(third.message().await.unwrap().is_some());
        let refused = refusal(iterate(&mut client, dedicated.clone()).await).await;
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("iterate_streams_max"),
            "{refused:?}"
        );
        // A client that goes away frees its seat (hang guard only).
        drop(third);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match iterate(&mut client, dedicated.clone()).await {
                Ok(mut s) => match s.message().await {
                    Ok(Some(_)) => break,
                    Ok(None) => panic!("an iteration ended without a message"),
                    Err(st) => assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}"),
                },
                Err(st) => assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}"),
            }
            assert!(Instant::now() < deadline, "the seat never came back");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Tails: one at a time.
        let next = durable.get() + 1;
        let request = TailRequest {
            from: next,
            batch_records_max: 0,
        };
        let waiting = tail(&mut client, request.clone()).await.unwrap();
        let refused = refusal(tail(&mut client, request.clone()).await).await;
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("tail_streams_max"),
            "{refused:?}"
        );
        drop((first, same, waiting));
    });
    server.stop();
}

/// An item whose versions together pass the largest gRPC message (every version is kept)
/// is still iterated whole through the carousel: it is not put in a shared chunk but read
/// by each rider itself, in messages of about `iter_chunk_bytes`. (A shared chunk used to
/// hold whole items, so this item made one message of about 20 MiB, which the client
/// refused.)
#[test]
fn an_item_larger_than_a_message_is_iterated_whole() {
    use spindle_view::frame::{Frame, FrameReader};
    const VERSIONS: usize = 20;
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    let big = ItemKey::node("big").unwrap();
    server.rt.block_on(async {
        // Small items around it, and 20 versions of about 1,000,000 bytes each.
        let mut txns: Vec<Transaction> = (0..50).map(|t| txn(t, 4, 100)).collect();
        for v in 0..VERSIONS {
            let pad = char::from(b'a' + v as u8)
                .to_string()
                .repeat(1_000_000 - 50);
            let value = Value::json(format!("{{\"pad\":\"{pad}\"}}")).unwrap();
            txns.push(Transaction::new().write(big.clone(), value));
        }
        for r in node.log.append_many(&txns).await {
            r.unwrap();
        }
        let durable = node.log.durable_index();
        let disk = node.disks.iter().next().unwrap();
        disk.view
            .wait_applied_async(durable, Duration::from_secs(60))
            .await
            .unwrap();
        let mut client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        for (latest_only, dedicated) in [(false, false), (true, false), (false, true)] {
            let request = IterateRequest {
                view: "disk-0".into(),
                latest_only,
                dedicated,
                ..Default::default()
            };
            let mut stream = iterate(&mut client, request).await.unwrap();
            let (mut big_versions, mut small, mut end, mut largest) = (0, 0, None, 0);
            while let Some(chunk) = stream.message().await.unwrap() {
                largest = largest.max(chunk.frames.len());
                for frame in FrameReader::new(&chunk.frames) {
                    match frame.unwrap() {
                        Frame::Version(v) if v.key == big => {
                            assert_eq!(v.value.unwrap().len(), 1_000_000 - 50 + 10);
                            big_versions += 1;
                        }
                        Frame::Version(_) => small += 1,
                        Frame::End(e) => end = Some(e),
                    }
                }
            }
            let end = end.expect("an end frame");
            let want_big = if latest_only { 1 } else { VERSIONS };
            assert_eq!(big_versions, want_big, "latest_only {latest_only}");
            assert_eq!(small, 200, "latest_only {latest_only}");
            assert_eq!(end.frames, (want_big + 200) as u64);
            assert!(largest <= 4 << 20, "a message of {largest} bytes");
        }
        let status = disk.carousel.status();
        assert!(status.large_items >= 1, "{status:?}");
    });
    server.stop();
}

/// A `Tail` from past the head waits `read_wait_ms_max` for the log to reach it without
/// holding a seat: answered once the log gets there, refused with FAILED_PRECONDITION naming the
/// head when it does not, and the one tail seat is free for a tail from the head meanwhile.
#[test]
fn a_tail_from_past_the_head_waits_a_bounded_time_without_a_seat() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.tail_streams_max = 1;
        c.read_wait_ms_max = 1_000;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        for r in node.log.append_many(&[txn(0, 1, 10)]).await {
            r.unwrap();
        }
        let head = node.log.durable_index().get();
        let mut client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        let far = TailRequest {
            from: head + 1_000_000,
            batch_records_max: 0,
        };
        let started = Instant::now();
        let refused = tokio::time::timeout(Duration::from_secs(30), async {
            refusal(tail(&mut client, far).await).await
        })
        .await
        .expect("a tail from far past the head was neither answered nor refused");
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(
            refused.message().contains(&format!("head ({head})")),
            "{refused:?}"
        );
        assert!(started.elapsed() >= Duration::from_millis(900));

        // While a tail from far ahead waits, the one seat is free: a tail from the head's
        // next index takes it and is answered.
        let mut far_client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        let far_wait = tokio::spawn(async move {
            let request = TailRequest {
                from: head + 1_000_000,
                batch_records_max: 0,
            };
            refusal(tail(&mut far_client, request).await).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut at_head = tail(
            &mut client,
            TailRequest {
                from: head + 1,
                batch_records_max: 0,
            },
        )
        .await
        .unwrap();
        for r in node.log.append_many(&[txn(1, 1, 10)]).await {
            r.unwrap();
        }
        let first = at_head.message().await.unwrap().unwrap();
        assert_eq!(first.records[0].index, head + 1);
        assert_eq!(far_wait.await.unwrap().code(), Code::FailedPrecondition);
        drop(at_head);

        // A tail from two past the head is answered once the log has grown by two (waiting
        // for the seat the dropped tail gives back, as a client would).
        let head = node.log.durable_index().get();
        let deadline = Instant::now() + Duration::from_secs(60);
        let ahead = loop {
            let mut ahead_client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
            let waiting = tokio::spawn(async move {
                let request = TailRequest {
                    from: head + 2,
                    batch_records_max: 0,
                };
                let mut stream = tail(&mut ahead_client, request).await?;
                stream.message().await
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            for t in 2..4 {
                for r in node.log.append_many(&[txn(t, 1, 10)]).await {
                    r.unwrap();
                }
            }
            match waiting.await.unwrap() {
                Ok(Some(batch)) => break batch,
                Ok(None) => panic!("the tail ended without a message"),
                Err(st) => assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}"),
            }
            assert!(Instant::now() < deadline, "the seat never came back");
        };
        assert_eq!(ahead.records[0].index, head + 2);
    });
    server.stop();
}

/// A client that opens a `Tail` and takes nothing (its stream's flow-control window stays
/// shut) does not hold the stream's seat for ever: once a message has waited
/// `stream_stall_ms_max` for it, the node closes its connection, the seat is free again,
/// and the stream it held ends with an error, not as if it were complete.
#[test]
fn a_tail_whose_client_takes_nothing_gives_its_seat_back() {
    let server = common::TestServer::start(|c| {
        c.disk_partitions = 1;
        c.memory_view = false;
        c.tail_streams_max = 1;
        c.tail_batch_bytes_max = 64 << 10;
        c.stream_stall_ms_max = 1_000;
        // The tails read from index 1 throughout.
        c.truncate = false;
    });
    let node = server.node.clone();
    let grpc = server.bound.grpc.to_string();
    server.rt.block_on(async {
        // About 8 MB of records: more than the client's windows (2 MiB a stream, 5 MiB the
        // connection), the stream's queue and what tonic holds, so the tail's producer
        // must wait for the client.
        let txns: Vec<Transaction> = (0..800).map(|t| txn(t, 1, 10_000)).collect();
        for r in node.log.append_many(&txns).await {
            r.unwrap();
        }
        let request = TailRequest {
            from: 1,
            batch_records_max: 0,
        };
        let mut stalled_client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        let mut stalled = tail(&mut stalled_client, request.clone()).await.unwrap();
        let started = Instant::now();
        let mut client: GrpcClient = grpc_connect(&grpc, None).await.unwrap();
        let mut refusals = 0;
        let mut taken = loop {
            match tail(&mut client, request.clone()).await {
                Ok(mut s) => match s.message().await {
                    Ok(Some(first)) => break first,
                    Ok(None) => panic!("a tail ended without a message"),
                    Err(st) => assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}"),
                },
                Err(st) => assert_eq!(st.code(), Code::ResourceExhausted, "{st:?}"),
            }
            refusals += 1;
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the seat of a tail whose client takes nothing never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            refusals > 0,
            "the stalled tail did not hold the seat at first"
        );
        assert_eq!(taken.records.remove(0).index, 1);
        eprintln!("the seat came back after {:?}", started.elapsed());
        // The stalled stream, read now: what reached the client, then an error.
        let ended = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match stalled.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return None,
                    Err(status) => return Some(status),
                }
            }
        })
        .await
        .expect("the stalled stream neither ended nor failed");
        assert!(ended.is_some(), "the cut stream ended as if complete");
    });
    server.stop();
}
